package sealed

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// TestAdmissionBoundsRunningTurns: with two slots, six channels at once
// never run more than two containers together, every turn is answered,
// and slots go out in arrival order.
func TestAdmissionBoundsRunningTurns(t *testing.T) {
	f := newFixture(t, func(f *fixture) { f.opts.MaxTurns = 2 })
	var running, peak atomic.Int32
	var mu sync.Mutex
	var order []string
	// The first two turns hold their slots until all six have arrived:
	// with a timer alone, a loaded machine let them finish while the later
	// ones were still arriving, and the queue never reached its length.
	arrived := make(chan struct{})
	allArrived := sync.OnceFunc(func() { close(arrived) })
	t.Cleanup(allArrived) // a failed wait must not leave them blocked
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		order = append(order, turn.Text)
		mu.Unlock()
		<-arrived
		time.Sleep(50 * time.Millisecond)
		return rtsandbox.Reply{OK: true, Text: turn.Text}, nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := rtsandbox.ChannelKey(fmt.Sprint("fake:", i))
			_, errs[i] = f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: ch, Speaker: speaker("guest")}, fmt.Sprint(i))
		}()
		// A known arrival order: the next turn starts once this one holds
		// its slot (the first two) or queues for one. A sleep was not
		// enough on a loaded CI machine: a late first turn found the slot
		// the third had taken.
		waitFor(t, fmt.Sprint("turn ", i, " arrived"), func() bool {
			if i < 2 {
				mu.Lock()
				defer mu.Unlock()
				return len(order) == i+1
			}
			return f.rt.slots.waiting.Load() == int32(i-1)
		})
	}
	allArrived()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("turn %d = %v", i, err)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("peak running turns = %d; want 2", p)
	}
	// Slots go out in arrival order, two at a time: a pair that gets its
	// slots together may reach the driver in either order.
	pairs := func(o []string) []string {
		out := []string{}
		for i := 0; i+1 < len(o); i += 2 {
			a, b := o[i], o[i+1]
			out = append(out, min(a, b)+max(a, b))
		}
		return out
	}
	if got := pairs(order); len(order) != 6 || fmt.Sprint(got) != "[01 23 45]" {
		t.Errorf("start order = %v; want 0 and 1, then 2 and 3, then 4 and 5", order)
	}
}

// TestDeadlineStartsAtSlot: a turn that waited for its slot still gets its
// whole deadline.
func TestDeadlineStartsAtSlot(t *testing.T) {
	f := newFixture(t, func(f *fixture) {
		f.opts.MaxTurns = 1
		f.opts.TurnTimeout = time.Second
	})
	f.driver.run = func(ctx context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		select {
		case <-time.After(700 * time.Millisecond):
		case <-ctx.Done():
			return rtsandbox.Reply{}, fmt.Errorf("%w: %w", container.ErrAborted, context.Cause(ctx))
		}
		return rtsandbox.Reply{OK: true, Text: turn.Text}, nil
	}
	errs := make(chan error, 2)
	for _, ch := range []rtsandbox.ChannelKey{"fake:a", "fake:b"} {
		go func() { errs <- f.say(ch) }()
		time.Sleep(20 * time.Millisecond)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("RunTurn = %v; want both within their own deadline (the second waited ~700ms)", err)
		}
	}
}

// TestQueueWaitEndsBusy: a turn that finds no slot within MaxQueueWait
// fails with ErrHostBusy before anything exists for it.
func TestQueueWaitEndsBusy(t *testing.T) {
	f := newFixture(t, func(f *fixture) {
		f.opts.MaxTurns = 1
		f.opts.MaxQueueWait = 100 * time.Millisecond
	})
	hold := make(chan struct{})
	started := make(chan struct{}, 1)
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		started <- struct{}{}
		<-hold
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hold")
		done <- err
	}()
	<-started
	start := time.Now()
	_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:b", Speaker: speaker("guest")}, "wait")
	if !errors.Is(err, ErrHostBusy) || !errors.Is(err, rtsandbox.ErrBusy) {
		t.Errorf("queued RunTurn = %v; want ErrHostBusy", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Errorf("busy after %v; want about the 100ms queue wait", d)
	}
	if n := len(f.driver.gotSpecs()); n != 1 {
		t.Errorf("driver ran %d times; want only the holding turn", n)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Errorf("holding turn = %v", err)
	}
}

// TestStopWhileQueued: Stop reaches a turn that still waits for a slot.
func TestStopWhileQueued(t *testing.T) {
	f := newFixture(t, func(f *fixture) { f.opts.MaxTurns = 1 })
	hold := make(chan struct{})
	started := make(chan struct{}, 1)
	f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
		started <- struct{}{}
		<-hold
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	defer close(hold)
	go f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:a", Speaker: speaker("guest")}, "hold")
	<-started
	done := make(chan error, 1)
	go func() {
		_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:b", Speaker: speaker("guest")}, "wait")
		done <- err
	}()
	waitFor(t, "fake:b queued", func() bool { return len(f.rt.Busy()) == 2 })
	if !f.rt.Stop("fake:b") {
		t.Fatal("Stop(fake:b) = false; want the queued turn stopped")
	}
	if err := <-done; !errors.Is(err, ErrAdmissionAborted) || !errors.Is(err, rtsandbox.ErrTurnStopped) {
		t.Errorf("stopped queued turn = %v; want ErrAdmissionAborted caused by rtsandbox.ErrTurnStopped", err)
	}
}

func TestDefaultMaxTurns(t *testing.T) {
	if n := DefaultMaxTurns(512); n < 1 || n > maxTurnsPerCPU*runtime.NumCPU() {
		t.Errorf("DefaultMaxTurns(512) = %d; want 1..%d", n, maxTurnsPerCPU*runtime.NumCPU())
	}
	// A memory limit larger than the host admits one turn, never zero.
	if n := DefaultMaxTurns(1 << 30); n != 1 {
		t.Errorf("DefaultMaxTurns(1 TiB) = %d; want 1", n)
	}
	mem := hostMemory()
	if mem <= 0 {
		t.Fatal("host memory unknown")
	}
	per := 256
	if n := DefaultMaxTurns(per); int64(n)*int64(per<<20) > int64(float64(mem)*hostMemoryShare) && n > 1 {
		t.Errorf("DefaultMaxTurns(%d) = %d oversubscribes %d bytes of host memory", per, n, mem)
	}
}

// TestSlotHeldUntilEarlyReplySettled: an early reply's container is still
// being removed when its turn returns; the turn's slot keeps counting it
// until the driver settled it, so with MaxTurns 1 the next turn waits
// (the host never has more than MaxTurns turn containers), and Close waits
// for the removal too.
func TestSlotHeldUntilEarlyReplySettled(t *testing.T) {
	f := newFixture(t, func(f *fixture) {
		f.opts.MaxTurns = 1
		f.opts.MaxQueueWait = 100 * time.Millisecond
	})
	f.driver.settled = make(chan struct{})
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: turn.Text}, nil
	}
	if err := f.say("fake:a"); err != nil {
		t.Fatalf("first turn = %v", err)
	}
	if err := f.say("fake:b"); !errors.Is(err, ErrHostBusy) {
		t.Fatalf("a turn while the first one's container is removed = %v; want ErrHostBusy", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.rt.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close = %v before the early reply's container was settled", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(f.driver.settled)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
