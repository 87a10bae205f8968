package budget_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/sqlitelock"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
)

// storedUsed reads scope's used count of kind on day from the file, from
// a connection of its own.
func storedUsed(t *testing.T, path, scope string, k budget.Kind) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var used int64
	err = db.QueryRow(`SELECT used FROM usage WHERE day=? AND scope=? AND kind=?`, day, scope, string(k)).Scan(&used)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("read %s: %v", path, err)
	}
	return used
}

// The attack of issue 22: an operator's sqlite3 shell holds usage.db's
// write lock. Every turn's reservation, check and settlement still
// succeeds at once (the counts live in memory; before, each waited the 5 s
// busy timeout in turn and failed), the limits still hold, and the counts
// reach the file once the lock is gone.
func TestLockedUsageDatabaseBlocksNoTurn(t *testing.T) {
	ctx := context.Background()
	dir := privateDir(t)
	path := filepath.Join(dir, budget.FileName)
	l := mustOpen(t, dir, budget.Config{PerChannel: budget.Limits{Calls: 12}})
	release := sqlitelock.Hold(t, path)

	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for i := range 24 {
		wg.Go(func() {
			ch := rtsandbox.ChannelKey("http:c" + string(rune('a'+i%12)))
			scopes := budget.Scopes(ch, "p"+string(rune('a'+i)))
			if err := l.Check(ctx, day, scopes); err != nil {
				errs <- err
				return
			}
			r, err := l.Reserve(ctx, day, scopes, budget.Calls, 1)
			if err != nil {
				errs <- err
				return
			}
			errs <- l.Settle(ctx, r, 1)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a turn's ledger call under the lock = %v; want nil", err)
		}
	}
	if _, err := l.Reserve(ctx, day, budget.Scopes("http:ca", "pz"), budget.Calls, 11); !errors.Is(err, budget.ErrExhausted) {
		t.Fatalf("Reserve past the channel's limit under the lock = %v; want ErrExhausted", err)
	}
	if err := l.Flush(ctx); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Flush under the lock = %v; want an error naming %s", err, path)
	}
	release()
	if err := l.Flush(ctx); err != nil {
		t.Fatalf("Flush after the lock = %v", err)
	}
	if got := storedUsed(t, path, budget.Installation, budget.Calls); got != 24 {
		t.Errorf("stored installation calls = %d; want 24", got)
	}
}

// budgets.on_store_error: while a change waits unwritten past StoreGrace
// and the last write failed, deny refuses new turns with ErrStore naming
// the file, allow passes them; both pass again once a write succeeds, and
// the ledger logs the outage once, class store, with the file.
func TestStorePolicy(t *testing.T) {
	tests := []struct {
		name    string
		policy  budget.Policy
		refused bool
	}{
		{"deny", budget.Deny, true},
		{"allow", budget.Allow, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := privateDir(t)
			path := filepath.Join(dir, budget.FileName)
			l := mustOpen(t, dir, budget.Config{PerSpeaker: budget.Limits{Calls: 100}, OnStoreError: tt.policy})
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			budget.SetClock(l, func() time.Time { return now })
			scopes := budget.Scopes("http:a", "bob")
			release := sqlitelock.Hold(t, path)
			r, err := l.Reserve(ctx, day, scopes, budget.Calls, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Settle(ctx, r, 1); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(ctx); err == nil {
				t.Fatal("Flush under the lock succeeded")
			}
			if err := l.Check(ctx, day, scopes); err != nil {
				t.Fatalf("Check within StoreGrace = %v; want nil", err)
			}
			budget.SetClock(l, func() time.Time { return now.Add(budget.StoreGrace) })
			err = l.Check(ctx, day, scopes)
			if got := errors.Is(err, rtsandbox.ErrStore); got != tt.refused {
				t.Fatalf("Check past StoreGrace = %v; want refused %v", err, tt.refused)
			}
			if tt.refused && !strings.Contains(err.Error(), path) {
				t.Errorf("refusal %q does not name %s", err, path)
			}
			release()
			if err := l.Flush(ctx); err != nil {
				t.Fatalf("Flush after the lock = %v", err)
			}
			if err := l.Check(ctx, day, scopes); err != nil {
				t.Fatalf("Check after a good write = %v; want nil", err)
			}
		})
	}
}

// The writer logs the outage once, class store, naming the file, and its
// end once.
func TestStoreOutageLogged(t *testing.T) {
	ctx := context.Background()
	dir := privateDir(t)
	path := filepath.Join(dir, budget.FileName)
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := mustOpen(t, dir, budget.Config{PerSpeaker: budget.Limits{Calls: 100}, Logger: log})
	release := sqlitelock.Hold(t, path)
	if _, err := l.Reserve(ctx, day, budget.Scopes("http:a", "bob"), budget.Calls, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &buf, "usage database unavailable")
	release()
	waitFor(t, &buf, "usage database written again")
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.Contains(line, "class=store") || !strings.Contains(line, "file="+path) {
			t.Errorf("record %q lacks class=store or file=%s", line, path)
		}
		m := record.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("record %q", line)
		}
		lines = append(lines, m[1]+" "+m[2])
	}
	want := []string{"ERROR usage database unavailable", "WARN usage database written again"}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// record is a text record's level and message up to its first colon.
var record = regexp.MustCompile(`level=(\w+) msg="([^:"]+)`)

// waitFor waits until buf holds s: the writer's next tick, no sleep.
func waitFor(t *testing.T, buf *syncbuf.Buffer, s string) {
	t.Helper()
	tick := time.NewTicker(budget.FlushInterval / 4)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(buf.String(), s) {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no %q in the log:\n%s", s, buf.String())
		}
	}
}
