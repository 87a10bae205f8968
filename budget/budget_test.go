package budget_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

const day = "2026-12-01"

func mustOpen(tb testing.TB, dir string, cfg budget.Config) *budget.Ledger {
	tb.Helper()
	l, err := budget.Open(filepath.Join(dir, budget.FileName), cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

func privateDir(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func used(tb testing.TB, l *budget.Ledger, scope string, k budget.Kind) (int64, int64) {
	tb.Helper()
	es, err := l.Usage(context.Background(), day, scope)
	if err != nil {
		tb.Fatalf("Usage: %v", err)
	}
	for _, e := range es {
		if e.Kind == k {
			return e.Used, e.Reserved
		}
	}
	return 0, 0
}

func TestReserve(t *testing.T) {
	cfg := budget.Config{
		PerSpeaker:      budget.Limits{Calls: 3},
		PerChannel:      budget.Limits{Calls: 5, Tokens: 100},
		PerInstallation: budget.Limits{Seconds: 60},
	}
	scopes := budget.Scopes("http:lobby", "alice")
	tests := []struct {
		name    string
		kind    budget.Kind
		amounts []int64 // reserved and settled in turn before the last
		last    int64
		wantErr bool
	}{
		{name: "under-limit", kind: budget.Calls, amounts: []int64{1, 1}, last: 1},
		{name: "speaker-limit", kind: budget.Calls, amounts: []int64{1, 1, 1}, last: 1, wantErr: true},
		{name: "channel-tokens", kind: budget.Tokens, amounts: []int64{60}, last: 41, wantErr: true},
		{name: "exact-limit", kind: budget.Tokens, amounts: []int64{60}, last: 40},
		{name: "installation-seconds", kind: budget.Seconds, amounts: []int64{30, 30}, last: 1, wantErr: true},
		{name: "unlimited", kind: budget.Seconds, amounts: nil, last: 60},
		{name: "zero-amount-at-limit", kind: budget.Calls, amounts: []int64{1, 1, 1}, last: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			l := mustOpen(t, privateDir(t), cfg)
			for _, a := range tt.amounts {
				r, err := l.Reserve(ctx, day, scopes, tt.kind, a)
				if err != nil {
					t.Fatalf("Reserve(%d) = %v", a, err)
				}
				if err := l.Settle(ctx, r, a); err != nil {
					t.Fatalf("Settle: %v", err)
				}
			}
			_, err := l.Reserve(ctx, day, scopes, tt.kind, tt.last)
			if got := errors.Is(err, rtsandbox.ErrOverBudget); got != tt.wantErr {
				t.Fatalf("Reserve(%d) = %v; want over budget %v", tt.last, err, tt.wantErr)
			}
		})
	}
}

func TestRefusedReservationChangesNothing(t *testing.T) {
	ctx := context.Background()
	l := mustOpen(t, privateDir(t), budget.Config{PerChannel: budget.Limits{Calls: 1}})
	if _, err := l.Reserve(ctx, day, budget.Scopes("http:a", "bob"), budget.Calls, 1); err != nil {
		t.Fatal(err)
	}
	_, err := l.Reserve(ctx, day, budget.Scopes("http:a", "carol"), budget.Calls, 1)
	if !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("Reserve = %v; want ErrExhausted", err)
	}
	if u, r := used(t, l, budget.SpeakerScope("carol"), budget.Calls); u != 0 || r != 0 {
		t.Errorf("carol's calls = %d used, %d reserved; want 0, 0", u, r)
	}
	if _, r := used(t, l, budget.Installation, budget.Calls); r != 1 {
		t.Errorf("installation reserved = %d; want 1", r)
	}
}

func TestCheckRefusesWhenNothingIsLeft(t *testing.T) {
	ctx := context.Background()
	l := mustOpen(t, privateDir(t), budget.Config{PerSpeaker: budget.Limits{Tokens: 10}})
	scopes := budget.Scopes("http:a", "bob")
	if err := l.Check(ctx, day, scopes); err != nil {
		t.Fatalf("Check before any spend = %v", err)
	}
	r, _ := l.Reserve(ctx, day, scopes, budget.Tokens, 5)
	if err := l.Settle(ctx, r, 12); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(ctx, day, scopes); !errors.Is(err, rtsandbox.ErrOverBudget) {
		t.Fatalf("Check after 12 of 10 tokens = %v; want ErrOverBudget", err)
	}
	if err := l.Check(ctx, day, budget.Scopes("http:a", "carol")); err != nil {
		t.Fatalf("Check for another speaker = %v", err)
	}
}

func TestSettleRecordsActualOverReservation(t *testing.T) {
	ctx := context.Background()
	l := mustOpen(t, privateDir(t), budget.Config{PerSpeaker: budget.Limits{Tokens: 1000}})
	var spent atomic.Int64
	l.OnSettle = func(k budget.Kind, n int64) { spent.Add(n) }
	scopes := budget.Scopes("http:a", "bob")
	r, err := l.Reserve(ctx, day, scopes, budget.Tokens, 500)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Settle(ctx, r, 900); err != nil {
		t.Fatal(err)
	}
	if u, res := used(t, l, budget.SpeakerScope("bob"), budget.Tokens); u != 900 || res != 0 {
		t.Errorf("tokens = %d used, %d reserved; want 900, 0", u, res)
	}
	if _, err := l.Reserve(ctx, day, scopes, budget.Tokens, 101); !errors.Is(err, budget.ErrExhausted) {
		t.Errorf("Reserve(101) after 900 of 1000 = %v; want ErrExhausted", err)
	}
	if got := spent.Load(); got != 900 {
		t.Errorf("OnSettle total = %d; want 900", got)
	}
}

// TestReserveNeverOverspends races 50 goroutines on a limit of 7: exactly
// 7 reservations succeed, and settling them leaves used at 7.
func TestReserveNeverOverspends(t *testing.T) {
	ctx := context.Background()
	l := mustOpen(t, privateDir(t), budget.Config{PerInstallation: budget.Limits{Calls: 7}})
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			scopes := budget.Scopes("http:a", string(rune('a'+i%26)))
			r, err := l.Reserve(ctx, day, scopes, budget.Calls, 1)
			switch {
			case errors.Is(err, budget.ErrExhausted):
				refused.Add(1)
				return
			case err != nil:
				t.Errorf("Reserve: %v", err)
				return
			}
			ok.Add(1)
			if err := l.Settle(ctx, r, 1); err != nil {
				t.Errorf("Settle: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 7 || refused.Load() != 43 {
		t.Errorf("reservations: %d ok, %d refused; want 7, 43", ok.Load(), refused.Load())
	}
	if u, r := used(t, l, budget.Installation, budget.Calls); u != 7 || r != 0 {
		t.Errorf("installation calls = %d used, %d reserved; want 7, 0", u, r)
	}
}

func TestUsageSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := privateDir(t)
	cfg := budget.Config{PerSpeaker: budget.Limits{Calls: 2}}
	scopes := budget.Scopes("http:a", "bob")
	l, err := budget.Open(filepath.Join(dir, budget.FileName), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := l.Reserve(ctx, day, scopes, budget.Calls, 1)
	if err := l.Settle(ctx, r, 1); err != nil {
		t.Fatal(err)
	}
	// A reservation never settled (the process died) is not kept.
	if _, err := l.Reserve(ctx, day, scopes, budget.Calls, 1); err != nil {
		t.Fatal(err)
	}
	l.Close()

	l2 := mustOpen(t, dir, cfg)
	es, err := l2.Usage(ctx, day, budget.SpeakerScope("bob"))
	if err != nil {
		t.Fatal(err)
	}
	want := []budget.Entry{
		{Kind: budget.Calls, Used: 1, Limit: 2},
		{Kind: budget.Tokens},
		{Kind: budget.Seconds},
	}
	if diff := cmp.Diff(want, es); diff != "" {
		t.Errorf("Usage after reopen (-want +got):\n%s", diff)
	}
	if _, err := l2.Reserve(ctx, day, scopes, budget.Calls, 1); err != nil {
		t.Fatalf("second call of 2 = %v", err)
	}
	if _, err := l2.Reserve(ctx, day, scopes, budget.Calls, 1); !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("third call of 2 = %v; want ErrExhausted", err)
	}
	fi, err := os.Stat(filepath.Join(dir, budget.FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("database mode = %v, %v; want 0600", fi.Mode(), err)
	}
}

func TestOpenIsExclusive(t *testing.T) {
	dir := privateDir(t)
	mustOpen(t, dir, budget.Config{})
	if _, err := budget.Open(filepath.Join(dir, budget.FileName), budget.Config{}); !errors.Is(err, privdir.ErrLocked) {
		t.Fatalf("second Open = %v; want privdir.ErrLocked", err)
	}
}

func TestOpenRefusesSharedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := budget.Open(filepath.Join(dir, budget.FileName), budget.Config{}); err == nil {
		t.Fatal("Open in a group-readable dir succeeded")
	}
}

func TestDayIsUTC(t *testing.T) {
	loc := time.FixedZone("UTC+10", 10*3600)
	at := time.Date(2026, 12, 2, 5, 0, 0, 0, loc) // 2026-12-01 19:00 UTC
	if got, want := budget.Day(at), "2026-12-01"; got != want {
		t.Errorf("Day(%v) = %q; want %q", at, got, want)
	}
}

func TestChannelReport(t *testing.T) {
	ctx := context.Background()
	l := mustOpen(t, privateDir(t), budget.Config{PerChannel: budget.Limits{Calls: 500}, PerInstallation: budget.Limits{Tokens: 9000}})
	l.Now = func() time.Time { return time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC) }
	r, _ := l.Reserve(ctx, l.Today(), budget.Scopes("http:lobby", "bob"), budget.Calls, 1)
	if err := l.Settle(ctx, r, 3); err != nil {
		t.Fatal(err)
	}
	rep, err := l.ChannelReport(ctx, "http:lobby")
	if err != nil {
		t.Fatal(err)
	}
	want := "Today (UTC 2026-12-01): this channel 3/500 calls, 0 tokens, 0 seconds; all channels 3 calls, 0/9000 tokens, 0 seconds."
	if got := rep.String(); got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
}
