package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Every way a session turn ends has its class, with the sealed
// runtime's precedence: an abort is its cause's, whatever it cut short.
func TestClassify(t *testing.T) {
	aborted := func(err, cause error) error { return &turnError{msg: "x", errs: []error{err, cause}} }
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"ok", nil, rtsandbox.ClassOK},
		{"cleanup-wins", errors.Join(container.ErrCleanup, rtsandbox.ErrTurnStopped), rtsandbox.ClassEngine},
		{"host-disk-full", fmt.Errorf("write: %w", syscall.ENOSPC), rtsandbox.ClassDiskFull},
		{"workspace-full", fmt.Errorf("gate: %w", rtsandbox.ErrWorkspaceFull), rtsandbox.ClassDiskFull},
		{"shutdown", aborted(ErrWorkerFailed, rtsandbox.ErrRuntimeClosed), rtsandbox.ClassShutdown},
		{"stopped", aborted(context.Canceled, rtsandbox.ErrTurnStopped), rtsandbox.ClassStopped},
		{"host-drain", aborted(errors.New("Turn cancelled"), rtsandbox.ErrStopping), rtsandbox.ClassShutdown},
		{"container-down", aborted(context.Canceled, fmt.Errorf("%w: die", container.ErrSessionDown)), rtsandbox.ClassWorker},
		{"worker-restarted", fmt.Errorf("%w: announced again", rtsandbox.ErrSandboxStopped), rtsandbox.ClassWorker},
		{"timeout", aborted(ErrWorkerFailed, rtsandbox.ErrTurnTimeout), rtsandbox.ClassTimeout},
		{"caller-gone", aborted(errors.New("x"), context.Canceled), rtsandbox.ClassCancelled},
		{"daily-budget", fmt.Errorf("%w: refused", rtsandbox.ErrOverBudget), rtsandbox.ClassBudget},
		{"worker-ok-false", fmt.Errorf("%w: boom", ErrWorkerFailed), rtsandbox.ClassWorker},
		{"worker-not-ready", ErrNotReady, rtsandbox.ClassWorker},
		{"worker-capability", fmt.Errorf("%w: worker capability missing", rtsandbox.ErrRefused), rtsandbox.ClassWorker},
		{"workspace-alias", ErrAlias, rtsandbox.ClassInternal},
		{"engine", fmt.Errorf("create: %w", container.ErrEngine), rtsandbox.ClassEngine},
		{"image-missing", container.ErrImageMissing, rtsandbox.ClassEngine},
		{"invalid-reply", fmt.Errorf("files: %w", wire.ErrInvalidReply), rtsandbox.ClassInvalidReply},
		{"other", errors.New("socket"), rtsandbox.ClassInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.err); got != tt.want {
				t.Errorf("classify(%v) = %q; want %q", tt.err, got, tt.want)
			}
			if !slices.Contains(Classes(), tt.want) {
				t.Errorf("%q is not in Classes()", tt.want)
			}
		})
	}
}

// Issue 21: every admitted session turn is reported once it ended, with
// its channel and class (the turn metrics count session turns from
// this); a turn refused at admission (the channel busy) is not; Active
// counts the turns running.
func TestOnTurnReportsAdmittedTurns(t *testing.T) {
	var mu sync.Mutex
	var got []TurnStats
	f := newFixture(t, func(o *Options) {
		o.OnTurn = func(s TurnStats) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, s)
		}
	})
	ctx := context.Background()
	if _, err := f.turnIn(ctx, "discord:ok", "a"); err != nil {
		t.Fatal(err)
	}
	f.w.worker = func(context.Context, wire.SessionTurn) (wire.SessionResult, error) {
		return wire.SessionResult{Error: "boom"}, nil
	}
	if _, err := f.turnIn(ctx, "discord:bad", "a"); !errors.Is(err, ErrWorkerFailed) {
		t.Fatalf("failing turn = %v", err)
	}
	done := f.hangingTurn("discord:hang")
	if n := f.rt.Active(); n != 1 {
		t.Errorf("Active() with one turn running = %d; want 1", n)
	}
	if _, err := f.turnIn(ctx, "discord:hang", "b"); !errors.Is(err, rtsandbox.ErrChannelBusy) {
		t.Fatalf("second turn in a busy channel = %v", err)
	}
	f.rt.Stop("discord:hang")
	<-done
	if n := f.rt.Active(); n != 0 {
		t.Errorf("Active() after the turns = %d; want 0", n)
	}

	mu.Lock()
	defer mu.Unlock()
	type brief struct{ Channel, Class string }
	var briefs []brief
	for _, s := range got {
		briefs = append(briefs, brief{string(s.Channel), s.Class})
		if s.Admitted.IsZero() || s.Ended.Before(s.Admitted) || (s.Err == nil) != (s.Class == rtsandbox.ClassOK) {
			t.Errorf("stats %+v: want admitted ≤ ended and an error exactly when not ok", s)
		}
	}
	want := []brief{{"discord:ok", rtsandbox.ClassOK}, {"discord:bad", rtsandbox.ClassWorker}, {"discord:hang", rtsandbox.ClassStopped}}
	if diff := cmp.Diff(want, briefs); diff != "" {
		t.Errorf("reported turns (-want +got):\n%s", diff)
	}
}

// The runtime makes each channel's broker for that channel: its startup
// window is charged to it.
func TestNewBrokerGetsChannel(t *testing.T) {
	f := newFixture(t)
	for _, ch := range []string{"discord:one", "http:two"} {
		if _, err := f.turnIn(context.Background(), ch, "a"); err != nil {
			t.Fatal(err)
		}
	}
	var got []rtsandbox.ChannelKey
	f.w.mu.Lock()
	for _, b := range f.w.brokers {
		got = append(got, b.channel)
	}
	f.w.mu.Unlock()
	if diff := cmp.Diff([]rtsandbox.ChannelKey{"discord:one", "http:two"}, got); diff != "" {
		t.Errorf("brokers made for (-want +got):\n%s", diff)
	}
}
