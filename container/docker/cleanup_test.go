package docker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/rtsandbox/rtsandbox"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// fastDriver is newDriver with a short backoff, so retry tests run in
// milliseconds; Close runs at the test's end and must find nothing queued.
func fastDriver(t *testing.T, f *fakeEngine) *Driver {
	t.Helper()
	d := newDriver(f)
	d.retry = backoff{base: time.Millisecond, max: 20 * time.Millisecond}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	return d
}

// engineSwitch is a removal that fails while the engine is down.
type engineSwitch struct{ down atomic.Bool }

func (e *engineSwitch) remove(context.Context, string) error {
	if e.down.Load() {
		return cerrdefs.ErrUnavailable.WithMessage("Cannot connect to the Docker daemon")
	}
	return nil
}

func waitPending(t *testing.T, d *Driver, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for d.Pending() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Pending() = %d; want %d", d.Pending(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := backoff{base: 100 * time.Millisecond, max: 5 * time.Second}
	tests := []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{0, 0.5, 100 * time.Millisecond},
		{1, 0.5, 200 * time.Millisecond},
		{3, 0.5, 800 * time.Millisecond},
		{5, 0.5, 3200 * time.Millisecond},
		{6, 0.5, 5 * time.Second}, // 6.4 s capped
		{200, 0.5, 5 * time.Second},
		{0, 0, 80 * time.Millisecond}, // jitter: ×0.8 …
		{6, 0.999999, 5999998 * time.Microsecond},
	}
	for _, tc := range tests {
		if got := b.delay(tc.attempt, tc.r); got != tc.want {
			t.Errorf("delay(%d, %v) = %v; want %v", tc.attempt, tc.r, got, tc.want)
		}
	}
}

func TestRemoveUntil(t *testing.T) {
	inProgress := cerrdefs.ErrConflict.WithMessage("removal of container sandbox-one is already in progress")
	notFound := cerrdefs.ErrNotFound.WithMessage("No such container: sandbox-one")
	down := cerrdefs.ErrUnavailable.WithMessage("Cannot connect to the Docker daemon")
	tests := []struct {
		name      string
		script    []error
		max       int
		wantErr   bool
		wantCalls int
	}{
		{"conflict-then-not-found", []error{inProgress, notFound}, 0, false, 2},
		{"conflict-then-removed", []error{inProgress, nil}, 0, false, 2},
		// A timeout or an unreachable engine is retried too, not only a
		// conflict.
		{"engine-errors-then-removed", []error{down, context.DeadlineExceeded, down, nil}, 0, false, 4},
		{"not-found-is-done", []error{notFound}, 0, false, 1},
		{"attempts-bounded", []error{down, down, down, down}, 3, true, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine()
			f.removeErrs = tc.script
			err := fastDriver(t, f).removeUntil(context.Background(), "sandbox-one", tc.max)
			if (err != nil) != tc.wantErr {
				t.Fatalf("removeUntil = %v; want error %v", err, tc.wantErr)
			}
			if n := len(f.callsOf("remove")); n != tc.wantCalls {
				t.Errorf("remove calls = %d; want %d", n, tc.wantCalls)
			}
		})
	}
}

// Retries continue until the context ends, each waiting longer.
func TestRemoveUntilStopsWithContext(t *testing.T) {
	f := newFakeEngine()
	var sw engineSwitch
	sw.down.Store(true)
	f.removeFn = sw.remove
	d := fastDriver(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := d.removeUntil(ctx, "sandbox-one", 0)
	if !cerrdefs.IsUnavailable(err) {
		t.Fatalf("removeUntil = %v; want the engine's last error", err)
	}
	calls := f.callsOf("remove")
	if len(calls) < 5 {
		t.Fatalf("remove calls = %d; want retries until the context ended", len(calls))
	}
	first, last := calls[1].at.Sub(calls[0].at), calls[len(calls)-1].at.Sub(calls[len(calls)-2].at)
	if last <= first {
		t.Errorf("gaps %v then %v; want a growing backoff", first, last)
	}
}

// The contract decision: a worker that replied and exited 0 keeps its reply
// when only the removal is left; the container is queued, counted by
// Pending, and removed once the engine answers again.
func TestRunCleanupPendingKeepsReply(t *testing.T) {
	f := newFakeEngine()
	f.worker = replyWorker(`{"ok":true,"text":"done"}`, 0)
	var sw engineSwitch
	sw.down.Store(true)
	f.removeFn = sw.remove
	d := fastDriver(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	res, err := d.Run(ctx, fakeSpec(t), []byte(`{}`))
	elapsed := time.Since(start)
	if err != nil || res.Reply != (rtsandbox.Reply{OK: true, Text: "done"}) {
		t.Fatalf("Run = %+v, %v; want the reply", res.Reply, err)
	}
	if !res.CleanupPending || !res.Removed.IsZero() || d.Pending() != 1 {
		t.Fatalf("CleanupPending %v, Removed %v, Pending() %d; want true, zero, 1", res.CleanupPending, res.Removed, d.Pending())
	}
	if limit := time.Second + overrun + 200*time.Millisecond; elapsed > limit {
		t.Errorf("Run took %v; want at most %v", elapsed, limit)
	}
	assertSettledOnlyOnceGone(t, d, res.Settled, &sw)
	waitPending(t, d, 0)
	if rm := f.callsOf("remove"); rm[len(rm)-1].ref != "sandbox-one" {
		t.Errorf("last removal of %q; want the exact name", rm[len(rm)-1].ref)
	}
}

// assertSettledOnlyOnceGone: a run handed to the background remover has
// Settled set, and it stays open while the engine is down (the container
// still exists: a caller bounding containers must keep counting it), then
// closes once the engine is up and the remover confirmed the removal.
func assertSettledOnlyOnceGone(t *testing.T, d *Driver, settled <-chan struct{}, sw *engineSwitch) {
	t.Helper()
	if settled == nil {
		t.Fatal("Settled is nil with the removal pending; want it set until the remover confirms the container gone")
	}
	waitPending(t, d, 1) // past the cleanup budget: queued
	select {
	case <-settled:
		t.Fatal("Settled closed while the engine could not remove the container")
	case <-time.After(300 * time.Millisecond):
	}
	sw.down.Store(false)
	select {
	case <-settled:
	case <-time.After(10 * time.Second):
		t.Fatal("Settled still open 10 s after the engine answered again")
	}
}

// TestEarlyReplySettledWhenRemovalQueued is the pool-burst overshoot's
// regression (the host had pool + max_turns + 1 containers): an early
// reply's removal that outlives the cleanup budget goes to the background
// remover, and Settled, which holds the turn's slot, closes only when the
// remover confirms the container gone, not when it was queued.
func TestEarlyReplySettledWhenRemovalQueued(t *testing.T) {
	f := newFakeEngine()
	f.worker = func(killed <-chan struct{}, in io.Reader, out, _ io.Writer) int {
		if _, err := io.ReadAll(in); err != nil {
			return 99
		}
		_, _ = io.WriteString(out, `{"ok":true,"text":"done"}`+string(wire.ReplyEnd))
		<-killed // never exits on its own: only the early reply ends the turn
		return 137
	}
	var sw engineSwitch
	sw.down.Store(true)
	f.removeFn = sw.remove
	d := fastDriver(t, f)
	res, err := d.Run(context.Background(), fakeSpec(t), []byte(`{}`))
	if err != nil || res.Reply != (rtsandbox.Reply{OK: true, Text: "done"}) {
		t.Fatalf("Run = %+v, %v; want the early reply", res.Reply, err)
	}
	assertSettledOnlyOnceGone(t, d, res.Settled, &sw)
	waitPending(t, d, 0)
}

// A failed run whose removal is pending reports its own failure, not a
// cleanup failure.
func TestRunFailedWithCleanupPending(t *testing.T) {
	f := newFakeEngine()
	f.worker = replyWorker(`{"ok":false,"text":"x"}`, 1)
	var sw engineSwitch
	sw.down.Store(true)
	f.removeFn = sw.remove
	d := fastDriver(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := d.Run(ctx, fakeSpec(t), []byte(`{}`))
	if !errors.Is(err, rtcontainer.ErrWorkerFailed) || errors.Is(err, rtcontainer.ErrCleanup) || !res.CleanupPending {
		t.Fatalf("Run = %v, pending %v; want ErrWorkerFailed alone, pending", err, res.CleanupPending)
	}
	assertSettledOnlyOnceGone(t, d, res.Settled, &sw)
	waitPending(t, d, 0)
}

// A hung engine cannot hold a run past its deadline by more than the
// overrun: neither while creating, nor when kill and removal hang after the
// worker started.
func TestRunHungEngineKeepsDeadline(t *testing.T) {
	for _, when := range []string{"create", "cleanup"} {
		t.Run(when, func(t *testing.T) {
			f := newFakeEngine()
			f.worker = hostileWorker
			if when == "create" {
				f.hang.Store(true)
			} else {
				f.worker = func(killed <-chan struct{}, in io.Reader, out, errw io.Writer) int {
					f.hang.Store(true) // the engine wedges once the worker runs
					return hostileWorker(killed, in, out, errw)
				}
			}
			d := fastDriver(t, f)
			const deadline = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			res, err := d.Run(ctx, fakeSpec(t), []byte(`{}`))
			elapsed := time.Since(start)
			if !errors.Is(err, rtcontainer.ErrAborted) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run = %v; want ErrAborted wrapping the deadline", err)
			}
			if elapsed < deadline || elapsed > deadline+overrun+300*time.Millisecond {
				t.Errorf("Run took %v; want between %v and %v", elapsed, deadline, deadline+overrun)
			}
			t.Logf("hung engine (%s): Run returned after %v", when, elapsed)
			if !res.CleanupPending || d.Pending() != 1 {
				t.Errorf("CleanupPending %v, Pending() %d; want true, 1", res.CleanupPending, d.Pending())
			}
			f.hang.Store(false)
			waitPending(t, d, 0)
		})
	}
}

// The worker's share of a run ends before the deadline: the reserve is a
// quarter of the time left, at most maxReserve.
func TestBudget(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		left, reserve time.Duration
	}{
		{time.Second, 250 * time.Millisecond},
		{2 * time.Second, 500 * time.Millisecond},
		{120 * time.Second, maxReserve},
	} {
		ctx, cancel := context.WithDeadline(context.Background(), now.Add(tc.left))
		b := newBudget(ctx, now)
		cancel()
		if got := now.Add(tc.left).Sub(b.cut); got != tc.reserve {
			t.Errorf("%v left: reserve %v; want %v", tc.left, got, tc.reserve)
		}
		if got := b.stop.Sub(now.Add(tc.left)); got != overrun {
			t.Errorf("%v left: stop %v after the deadline; want %v", tc.left, got, overrun)
		}
	}
	if b := newBudget(context.Background(), now); !b.cut.IsZero() || !b.stop.IsZero() {
		t.Errorf("no deadline: %+v; want the zero budget", b)
	}
}

// Close waits for queued removals within its context, then names what is
// left; afterwards nothing more is queued, and a run whose container is not
// confirmed gone fails with ErrCleanup.
func TestCloseReportsLeftovers(t *testing.T) {
	f := newFakeEngine()
	f.worker = replyWorker(`{"ok":true,"text":"done"}`, 0)
	var sw engineSwitch
	sw.down.Store(true)
	f.removeFn = sw.remove
	d := newDriver(f)
	d.retry = backoff{base: time.Millisecond, max: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if res, err := d.Run(ctx, fakeSpec(t), []byte(`{}`)); err != nil || !res.CleanupPending {
		t.Fatalf("Run = %v, pending %v; want pending", err, res.CleanupPending)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer ccancel()
	err := d.Close(cctx)
	if !errors.Is(err, rtcontainer.ErrCleanup) || !strings.Contains(err.Error(), "sandbox-one") {
		t.Fatalf("Close = %v; want ErrCleanup naming sandbox-one", err)
	}
	f2 := newFakeEngine()
	f2.worker = replyWorker(`{"ok":true,"text":"done"}`, 0)
	f2.removeFn = sw.remove
	d.api = f2
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	spec := fakeSpec(t)
	spec.Name = "sandbox-two"
	if _, err := d.Run(ctx2, spec, []byte(`{}`)); !errors.Is(err, rtcontainer.ErrCleanup) {
		t.Errorf("Run after Close = %v; want ErrCleanup", err)
	}
	if err := d.Close(context.Background()); !errors.Is(err, rtcontainer.ErrCleanup) || strings.Contains(err.Error(), "sandbox-two") {
		t.Errorf("second Close = %v; want the same leftovers", err)
	}
}

// ReapEvery queues labelled containers nobody owns, skips the live ones and
// those of a running Run, and wakes queued removals when the engine answers.
func TestReapEvery(t *testing.T) {
	labels, _ := rtcontainer.TurnLabels("inst")
	other, _ := rtcontainer.TurnLabels("other")
	f := newFakeEngine()
	f.list = []container.Summary{
		{ID: "id-orphan", Names: []string{"/rtsandbox-orphan"}, Labels: labels},
		{ID: "id-live", Names: []string{"/rtsandbox-live"}, Labels: labels},
		{ID: "id-running", Names: []string{"/rtsandbox-running"}, Labels: labels},
		{ID: "id-other", Names: []string{"/rtsandbox-other"}, Labels: other}, // a filter bug must not matter
	}
	var removed atomic.Int32
	f.removeFn = func(_ context.Context, ref string) error {
		removed.Add(1)
		return nil
	}
	d := fastDriver(t, f)
	d.track("rtsandbox-running")
	defer d.untrack("rtsandbox-running")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- d.ReapEvery(ctx, "inst", 10*time.Millisecond, func(name string) bool { return name == "rtsandbox-live" })
	}()
	deadline := time.Now().Add(5 * time.Second)
	for removed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("orphan not removed")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a few more passes
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ReapEvery = %v", err)
	}
	waitPending(t, d, 0)
	for _, c := range f.callsOf("remove") {
		if c.ref != "rtsandbox-orphan" {
			t.Errorf("removed %q; want only rtsandbox-orphan", c.ref)
		}
	}
	if err := d.ReapEvery(context.Background(), "Bad Id", time.Second, nil); !errors.Is(err, rtcontainer.ErrInvalidSpec) {
		t.Errorf("ReapEvery(bad id) = %v; want ErrInvalidSpec", err)
	}
	if err := d.ReapEvery(context.Background(), "inst", 0, nil); !errors.Is(err, rtcontainer.ErrInvalidSpec) {
		t.Errorf("ReapEvery(interval 0) = %v; want ErrInvalidSpec", err)
	}
}

// A reaper pass that reaches the engine retries queued removals at once
// instead of after their backoff.
func TestReapEveryWakesQueuedRemovals(t *testing.T) {
	f := newFakeEngine()
	f.worker = replyWorker(`{"ok":true,"text":"done"}`, 0)
	f.list = []container.Summary{}
	var sw engineSwitch
	sw.down.Store(true)
	f.removeFn = sw.remove
	d := fastDriver(t, f)
	d.retry = backoff{base: time.Hour, max: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if res, err := d.Run(ctx, fakeSpec(t), []byte(`{}`)); err != nil || !res.CleanupPending {
		t.Fatalf("Run = %v, pending %v; want pending", err, res.CleanupPending)
	}
	sw.down.Store(false)
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.ReapEvery(rctx, "inst", 20*time.Millisecond, nil) }()
	waitPending(t, d, 0)
	rcancel()
	<-done
}

// The end of a failed worker's stderr comes back in the Result; nothing of
// a successful one does.
func TestRunKeepsStderrTailOfFailure(t *testing.T) {
	line := `{"error_class":"no_final_text","detail":"model content is not a string"}` + "\n"
	worker := func(code int) func(<-chan struct{}, io.Reader, io.Writer, io.Writer) int {
		return func(_ <-chan struct{}, in io.Reader, out, errw io.Writer) int {
			_, _ = io.ReadAll(in)
			_, _ = io.WriteString(errw, strings.Repeat("noise\n", 2000)+line)
			_, _ = io.WriteString(out, `{"ok":false,"text":"The sandbox worker failed."}`)
			return code
		}
	}
	f := newFakeEngine()
	f.worker = worker(1)
	res, err := fastDriver(t, f).Run(context.Background(), fakeSpec(t), []byte(`{}`))
	if !errors.Is(err, rtcontainer.ErrWorkerFailed) {
		t.Fatalf("Run = %v; want ErrWorkerFailed", err)
	}
	if len(res.StderrTail) != rtcontainer.StderrTailSize || !bytes.HasSuffix(res.StderrTail, []byte(line)) || res.StderrBytes != 2000*6+len(line) {
		t.Errorf("tail %d bytes (suffix ok %v), count %d; want the last %d bytes", len(res.StderrTail),
			bytes.HasSuffix(res.StderrTail, []byte(line)), res.StderrBytes, rtcontainer.StderrTailSize)
	}
	if got, ok := rtcontainer.ParseWorkerFailure(res.StderrTail); !ok || got.Class != rtcontainer.WorkerNoFinalText {
		t.Errorf("ParseWorkerFailure = %+v, %v", got, ok)
	}
	f = newFakeEngine()
	f.worker = func(_ <-chan struct{}, in io.Reader, out, errw io.Writer) int {
		_, _ = io.ReadAll(in)
		_, _ = io.WriteString(errw, "a tool failed\n")
		_, _ = io.WriteString(out, `{"ok":true,"text":"fine"}`)
		return 0
	}
	res, err = fastDriver(t, f).Run(context.Background(), fakeSpec(t), []byte(`{}`))
	if err != nil || res.StderrTail != nil || res.StderrBytes != len("a tool failed\n") {
		t.Errorf("Run = %v, tail %q, count %d; want no tail after a success", err, res.StderrTail, res.StderrBytes)
	}
}
