package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/sqlitelock"
)

// Session turns keep the daily budgets as sealed turns do: a spent budget
// refuses the turn before it runs, a seconds limit below the turn deadline
// refuses every turn, and a turn that runs reserves its deadline and
// settles the seconds it took.
func TestSessionTurnBudget(t *testing.T) {
	const timeout = 60 * time.Second
	b := rtsandbox.Binding{Channel: "http:lobby", Speaker: rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "p_alice"}}
	tests := []struct {
		name      string
		limits    budget.Limits
		spend     int64 // calls spent before the turn
		wantRun   bool
		wantOver  bool
		wantSpent int64 // seconds used after the turn
	}{
		{"no limits", budget.Limits{}, 0, true, false, 1},
		{"calls left", budget.Limits{Calls: 2}, 1, true, false, 1},
		{"calls spent", budget.Limits{Calls: 1}, 1, false, true, 0},
		{"seconds below the deadline", budget.Limits{Seconds: 59}, 0, false, true, 0},
		{"seconds for one deadline", budget.Limits{Seconds: 60}, 0, true, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			l, err := budget.Open(filepath.Join(dir, budget.FileName), budget.Config{PerSpeaker: tt.limits})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			scopes := budget.Scopes(b.Channel, b.Speaker.PrincipalID)
			if tt.spend > 0 {
				r, err := l.Reserve(ctx, l.Today(), scopes, budget.Calls, tt.spend)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Settle(ctx, r, tt.spend); err != nil {
					t.Fatal(err)
				}
			}
			tb := turnBudget{ledger: l, timeout: timeout}
			var reserved int64
			ran := false
			_, err = tb.run(ctx, b, func() (rtsandbox.Answer, error) {
				ran = true
				reserved = seconds(t, l, budget.SpeakerScope("p_alice")).Reserved
				return rtsandbox.Answer{Reply: rtsandbox.Reply{OK: true}}, nil
			})
			if ran != tt.wantRun || errors.Is(err, rtsandbox.ErrOverBudget) != tt.wantOver {
				t.Fatalf("ran %v, err %v; want ran %v, over budget %v", ran, err, tt.wantRun, tt.wantOver)
			}
			if ran && reserved != 60 {
				t.Errorf("seconds reserved during the turn = %d; want the 60 s deadline", reserved)
			}
			got := seconds(t, l, budget.SpeakerScope("p_alice"))
			if diff := cmp.Diff(budget.Entry{Kind: budget.Seconds, Used: tt.wantSpent, Limit: tt.limits.Seconds}, got); diff != "" {
				t.Errorf("seconds after the turn (-want +got):\n%s", diff)
			}
		})
	}
}

// budgets.on_store_error in session mode: with usage.db's write lock held
// and a change unwritten past the grace, deny refuses the turn before it
// runs (the store's guest text), allow runs it.
func TestSessionTurnStorePolicy(t *testing.T) {
	b := rtsandbox.Binding{Channel: "http:lobby", Speaker: rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "p_alice"}}
	tests := []struct {
		name    string
		policy  budget.Policy
		wantRun bool
	}{
		{"deny", budget.Deny, false},
		{"allow", budget.Allow, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, budget.FileName)
			l, err := budget.Open(path, budget.Config{PerSpeaker: budget.Limits{Calls: 10}, OnStoreError: tt.policy, Grace: time.Nanosecond})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			release := sqlitelock.Hold(t, path)
			defer release()
			if _, err := l.Reserve(ctx, l.Today(), budget.Scopes(b.Channel, "p_bob"), budget.Calls, 1); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(ctx); err == nil {
				t.Fatal("Flush under the lock succeeded")
			}
			ran := false
			_, err = turnBudget{ledger: l, timeout: time.Minute}.run(ctx, b, func() (rtsandbox.Answer, error) {
				ran = true
				return rtsandbox.Answer{Reply: rtsandbox.Reply{OK: true}}, nil
			})
			if ran != tt.wantRun || (err != nil) == tt.wantRun {
				t.Fatalf("ran %v, err %v; want ran %v", ran, err, tt.wantRun)
			}
			if !tt.wantRun && (rtsandbox.GuestText(err) != rtsandbox.StoreText || !strings.Contains(err.Error(), path)) {
				t.Errorf("refusal %v: guest text %q; want the store's, and the file named", err, rtsandbox.GuestText(err))
			}
		})
	}
}

func TestSessionTurnBudgetNoLedger(t *testing.T) {
	ran := false
	if _, err := (turnBudget{}).run(context.Background(), rtsandbox.Binding{}, func() (rtsandbox.Answer, error) {
		ran = true
		return rtsandbox.Answer{}, nil
	}); err != nil || !ran {
		t.Errorf("without a ledger: ran %v, err %v; want the turn run", ran, err)
	}
}

// seconds is scope's seconds entry of today.
func seconds(t *testing.T, l *budget.Ledger, scope string) budget.Entry {
	t.Helper()
	es, err := l.Usage(context.Background(), l.Today(), scope)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind == budget.Seconds {
			return e
		}
	}
	return budget.Entry{Kind: budget.Seconds}
}
