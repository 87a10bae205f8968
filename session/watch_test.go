package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// TestWatchFaultCutsTurn (issue 22 item 1): a bound turn whose container
// exits, is removed, paused or restarted fails at once with the sandbox
// stopped text instead of waiting for its deadline (an hour here); the
// container is not removed by the cut turn; the next turn runs on a
// fresh container, or on the one Docker restarted, which stays.
func TestWatchFaultCutsTurn(t *testing.T) {
	tests := []struct {
		action string
		next   []string // driver calls of the next turn
	}{
		{"die", []string{"status", "remove:NAME", "ensure", "create"}},
		{"destroy", []string{"status", "remove:NAME", "ensure", "create"}},
		{"pause", []string{"status", "remove:NAME", "ensure", "create"}},
		{"restart", []string{"status", "ensure"}}, // healthy after Docker's restart: kept
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			f := newFixture(t, func(o *Options) { o.TurnTimeout = time.Hour })
			ch := "discord:w"
			name := f.rt.name(rtsandbox.ChannelKey(ch))
			done := f.hangingTurn(ch)
			f.w.takeCalls()
			began := time.Now()
			f.w.fault(name, tt.action)
			err := <-done
			if !errors.Is(err, rtsandbox.ErrSandboxStopped) || !errors.Is(err, container.ErrSessionDown) {
				t.Fatalf("turn = %v; want the container's fault", err)
			}
			if elapsed := time.Since(began); elapsed > 10*time.Second {
				t.Errorf("the fault was heard after %v", elapsed)
			}
			if got := rtsandbox.GuestText(err); got != rtsandbox.SandboxStoppedText {
				t.Errorf("guest text %q; want %q", got, rtsandbox.SandboxStoppedText)
			}
			if got := classify(err); got != rtsandbox.ClassWorker {
				t.Errorf("class %q; want %q", got, rtsandbox.ClassWorker)
			}
			if diff := cmp.Diff([]string{"logs:200"}, f.w.takeCalls()); diff != "" {
				t.Errorf("the cut turn's driver calls (-want +got):\n%s", diff)
			}
			if len(f.log.find("session container stopped serving")) != 1 {
				t.Error("no operator line for the fault")
			}
			f.w.worker = newWorld().worker
			if _, err := f.turnIn(context.Background(), ch, "b"); err != nil {
				t.Fatalf("next turn = %v", err)
			}
			want := make([]string, len(tt.next))
			for i, c := range tt.next {
				want[i] = strings.ReplaceAll(c, "NAME", name)
			}
			if diff := cmp.Diff(want, f.w.takeCalls()); diff != "" {
				t.Errorf("the next turn's driver calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWarmTurnNoEngineCall (issue 22 item 4): a warm turn, its container
// watched and its worker ready, makes no engine call, so an engine
// outage does not fail it.
func TestWarmTurnNoEngineCall(t *testing.T) {
	f := newFixture(t)
	if _, err := f.turnIn(context.Background(), "discord:warm", "a"); err != nil {
		t.Fatal(err)
	}
	f.w.takeCalls()
	for _, id := range []string{"b", "c"} {
		if _, err := f.turnIn(context.Background(), "discord:warm", id); err != nil {
			t.Fatal(err)
		}
	}
	if calls := f.w.takeCalls(); len(calls) != 0 {
		t.Errorf("warm turns called the engine: %v", calls)
	}
	if f.w.watchCalls != 1 {
		t.Errorf("%d watches; want the first start's only", f.w.watchCalls)
	}
}

// TestUnwatchedChannelAsksEngine: when the engine cannot watch, the turn
// still runs (with an operator line) and the next start asks the engine
// again rather than trusting an unwatched container.
func TestUnwatchedChannelAsksEngine(t *testing.T) {
	f := newFixture(t)
	f.w.watchErr = errors.New("events unavailable")
	for _, id := range []string{"a", "b"} {
		if _, err := f.turnIn(context.Background(), "discord:u", id); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(f.w.takeCalls(), "status"); n != 2 {
		t.Errorf("%d status calls; want one per turn", n)
	}
	if len(f.log.find("session container not watched")) != 2 {
		t.Error("no operator line for the missing watch")
	}
}

// TestOwnRemovalIsNoFault: the runtime's own removal of a watched
// container (off, fresh, a recreate) ends the watch first, so the
// engine's destroy event cuts nothing and logs no fault.
func TestOwnRemovalIsNoFault(t *testing.T) {
	f := newFixture(t)
	ch := rtsandbox.ChannelKey("discord:own")
	if _, err := f.turnIn(context.Background(), string(ch), "a"); err != nil {
		t.Fatal(err)
	}
	f.rt.afterFault = func(name string) { t.Errorf("the runtime's own removal of %s was taken for a fault", name) }
	if err := f.rt.Remove(context.Background(), ch); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.StartFresh(ch); err != nil {
		t.Fatal(err)
	}
	if _, err := f.turnIn(context.Background(), string(ch), "b"); err != nil {
		t.Fatal(err)
	}
	if len(f.log.find("session container stopped serving")) != 0 {
		t.Error("a fault was logged for the runtime's own removal")
	}
}

// TestFaultBetweenTurns: a container that dies while no turn runs makes
// the next turn ask the engine and start it anew.
func TestFaultBetweenTurns(t *testing.T) {
	f := newFixture(t)
	ch := "discord:idle"
	if _, err := f.turnIn(context.Background(), ch, "a"); err != nil {
		t.Fatal(err)
	}
	name := f.rt.name(rtsandbox.ChannelKey(ch))
	handled := f.faultHandled()
	f.w.fault(name, "die")
	<-handled
	f.w.takeCalls()
	if _, err := f.turnIn(context.Background(), ch, "b"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"status", "remove:" + name, "ensure", "create"}, f.w.takeCalls()); diff != "" {
		t.Errorf("driver calls (-want +got):\n%s", diff)
	}
}

// TestDrainCutTurnRestartingText (issue 22 item 4): a turn the host's
// drain cuts (the router cancels its context with rtsandbox.ErrStopping)
// answers the guest with the restarting text and is a shutdown.
func TestDrainCutTurnRestartingText(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.TurnTimeout = time.Hour })
	delivered := make(chan struct{})
	f.w.worker = hangWorker(func() { close(delivered) })
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { _, err := f.turnIn(ctx, "discord:drain", "a"); done <- err }()
	<-delivered
	cancel(rtsandbox.ErrStopping)
	err := <-done
	if got := rtsandbox.GuestText(err); got != rtsandbox.RestartingText {
		t.Errorf("guest text %q; want the restarting text (err %v)", got, err)
	}
	if got := classify(err); got != rtsandbox.ClassShutdown {
		t.Errorf("class %q; want %q", got, rtsandbox.ClassShutdown)
	}
}

// TestFaultBeforeDeliveryRunsAgain: a fault that races a warm turn's
// start (the turn took the warm path, then the container's fault was
// heard, before or while the turn waited for a worker to take it) does
// not fail the turn: nothing of it ran, so it runs once more on a worker
// started anew, or on the one Docker restarted, which stays.
func TestFaultBeforeDeliveryRunsAgain(t *testing.T) {
	tests := []struct {
		name   string
		inject func(f *fixture, name string) // inside the turn, after its start
		next   []string
	}{
		{"heard before the attempt", func(f *fixture, name string) {
			handled := f.faultHandled()
			f.w.fault(name, "die")
			<-handled
		}, []string{"status", "remove:NAME", "ensure", "create"}},
		{"heard while undelivered", func(f *fixture, name string) {
			f.w.mu.Lock()
			f.w.stopped[name] = f.w.running[name] // dead; its events not yet heard
			delete(f.w.running, name)
			f.w.mu.Unlock()
			f.w.onUndelivered = func() {
				f.w.onUndelivered = nil
				f.w.mu.Lock()
				f.w.faultLocked(name, "die")
				f.w.mu.Unlock()
			}
		}, []string{"status", "remove:NAME", "ensure", "create"}},
		{"restarted healthy", func(f *fixture, name string) {
			handled := f.faultHandled()
			f.w.fault(name, "restart")
			<-handled
		}, []string{"status", "ensure"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inject func()
			f := newFixture(t, func(o *Options) {
				o.TurnTimeout = time.Hour
				memory := o.Memory
				o.Memory = func(ctx context.Context, b rtsandbox.Binding) (string, string, error) {
					if inject != nil {
						inject()
						inject = nil
					}
					return memory(ctx, b)
				}
			})
			ch := "discord:race"
			name := f.rt.name(rtsandbox.ChannelKey(ch))
			if _, err := f.turnIn(context.Background(), ch, "a"); err != nil {
				t.Fatal(err)
			}
			f.w.takeCalls()
			inject = func() { tt.inject(f, name) }
			res, err := f.turnIn(context.Background(), ch, "b")
			if err != nil || res.Text != "done" {
				t.Fatalf("turn = %+v, %v; want it run again and answered", res, err)
			}
			want := make([]string, len(tt.next))
			for i, c := range tt.next {
				want[i] = strings.ReplaceAll(c, "NAME", name)
			}
			if diff := cmp.Diff(want, f.w.takeCalls()); diff != "" {
				t.Errorf("driver calls (-want +got):\n%s", diff)
			}
			if len(f.log.find("session turn runs again: its container stopped serving before the worker took it")) != 1 {
				t.Error("no operator line for the turn run again")
			}
		})
	}
}
