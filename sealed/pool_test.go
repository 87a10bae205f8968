package sealed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// warmEngine is fakeDriver that can prestart: a warm worker records its
// spec and what its run dir held at the prestart, runs its turn through
// the fake driver on its claim, and dies when the test kills it. It
// counts live containers (prestarted or cold, not yet removed) and keeps
// their peak.
type warmEngine struct {
	*fakeDriver
	mu         sync.Mutex
	image      string
	prestarts  []container.Spec
	dirAtStart [][]string // the run dir's entries when each worker started
	warm       []*fakeWarm
	discarded  int
	live, peak int
	runs       []string // container names, one per run, warm or cold
	failStart  error
}

func newWarmEngine(d *fakeDriver) *warmEngine {
	return &warmEngine{fakeDriver: d, image: "sha256:one"}
}

func (e *warmEngine) up() {
	e.live++
	e.peak = max(e.peak, e.live)
}

func (e *warmEngine) Run(ctx context.Context, spec container.Spec, stdin []byte) (container.Result, error) {
	e.mu.Lock()
	e.up()
	e.runs = append(e.runs, spec.Name)
	e.mu.Unlock()
	defer e.down()
	return e.fakeDriver.Run(ctx, spec, stdin)
}

func (e *warmEngine) down() {
	e.mu.Lock()
	e.live--
	e.mu.Unlock()
}

func (e *warmEngine) ImageID(context.Context, string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.image, nil
}

func (e *warmEngine) Prestart(ctx context.Context, spec container.Spec) (container.Warm, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(spec.RunDir)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failStart != nil {
		return nil, e.failStart
	}
	w := &fakeWarm{e: e, spec: spec, image: e.image, exited: make(chan struct{}), started: time.Now()}
	e.prestarts = append(e.prestarts, spec)
	e.dirAtStart = append(e.dirAtStart, names)
	e.warm = append(e.warm, w)
	e.up()
	return w, nil
}

// kill ends the i-th prestarted worker as the engine reports a death.
func (e *warmEngine) kill(i int) {
	e.mu.Lock()
	w := e.warm[i]
	e.mu.Unlock()
	w.kill()
}

func (e *warmEngine) counts() (prestarts, discarded, live, peak int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.prestarts), e.discarded, e.live, e.peak
}

func (e *warmEngine) gotRuns() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.runs...)
}

type fakeWarm struct {
	e       *warmEngine
	spec    container.Spec
	image   string
	started time.Time
	exited  chan struct{}
	once    sync.Once
	used    bool
	dead    bool // killed at its claim: the engine has not reported it yet
	// removing, with dead: the dead run's removal is pending until it closes
	removing chan struct{}
}

func (w *fakeWarm) Name() string            { return w.spec.Name }
func (w *fakeWarm) Image() string           { return w.image }
func (w *fakeWarm) Exited() <-chan struct{} { return w.exited }
func (w *fakeWarm) kill()                   { w.once.Do(func() { close(w.exited) }) }

func (w *fakeWarm) Run(ctx context.Context, stdin []byte) (container.Result, error) {
	e := w.e
	e.mu.Lock()
	if w.used {
		e.mu.Unlock()
		panic("a warm worker ran twice")
	}
	w.used = true
	e.runs = append(e.runs, w.spec.Name)
	dead, removing := w.dead, w.removing
	e.mu.Unlock()
	if dead { // the claim finds it ended: the engine reports it at once
		res := container.Result{ExitCode: 137, Began: time.Now()}
		if removing != nil {
			res.CleanupPending, res.Settled = true, removing
			go func() { <-removing; e.down() }()
		} else {
			e.down()
		}
		return res, fmt.Errorf("%w: exit code 137", container.ErrWorkerFailed)
	}
	defer e.down()
	res, err := e.fakeDriver.Run(ctx, w.spec, stdin)
	res.Created, res.Started = w.started, w.started
	return res, err
}

func (w *fakeWarm) Discard(context.Context) error {
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	if w.used {
		panic("a claimed warm worker was discarded")
	}
	w.used = true
	w.e.discarded++
	w.e.live--
	return nil
}

// poolFixture is newFixture on a warmEngine with a pool of size, started
// and filled.
func poolFixture(t *testing.T, size int, edit func(f *fixture)) (*fixture, *warmEngine) {
	t.Helper()
	var e *warmEngine
	f := newFixture(t, func(f *fixture) {
		f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
			return rtsandbox.Reply{OK: true, Text: "hi"}, nil
		}
		e = newWarmEngine(f.driver)
		f.opts.Driver, f.opts.PoolSize = e, size
		if edit != nil {
			edit(f)
		}
	})
	f.rt.StartPool()
	waitIdle(t, f.rt, size)
	return f, e
}

func waitIdle(t *testing.T, rt *Runtime, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d idle warm workers", n), func() bool { return rt.PoolStats().Idle == n })
}

func turnOn(t *testing.T, f *fixture, channel string) TurnStats {
	t.Helper()
	var got TurnStats
	var mu sync.Mutex
	f.rt.s.OnTurn = func(s TurnStats) { mu.Lock(); got = s; mu.Unlock() }
	if _, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: rtsandbox.ChannelKey(channel), Speaker: speaker("alice")}, "hello"); err != nil {
		t.Fatalf("RunTurn(%s) = %v", channel, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got
}

// TestPoolWarmTurn: a turn claims a warm worker, which is replaced; the
// claimed one served that turn only.
func TestPoolWarmTurn(t *testing.T) {
	f, e := poolFixture(t, 2, nil)
	st := turnOn(t, f, "discord:1:2")
	if !st.Warm || !strings.HasPrefix(st.Container, container.NamePrefix+"warm-") {
		t.Errorf("turn stats warm %v, container %q; want a warm pool worker", st.Warm, st.Container)
	}
	waitIdle(t, f.rt, 2)
	if n, _, _, _ := e.counts(); n != 3 {
		t.Errorf("prestarts = %d; want 3 (2, and one replacing the claimed)", n)
	}
	turnOn(t, f, "discord:1:3")
	if runs := e.gotRuns(); len(runs) != 2 || runs[0] == runs[1] {
		t.Errorf("runs %v: want two turns on two containers", runs)
	}
}

// TestPoolNoGuestDataBeforeClaim: a pooled worker is started under the
// very profile a cold turn gets, with a name that hashes no channel and an
// empty run dir; the turn (and its socket) reach it only at the claim.
func TestPoolNoGuestDataBeforeClaim(t *testing.T) {
	f, e := poolFixture(t, 1, nil)
	const channel = "discord:9:secret-room"
	turnOn(t, f, channel)
	e.mu.Lock()
	warm := e.prestarts[0]
	dir := e.dirAtStart[0]
	e.mu.Unlock()
	cold := f.rt.s.spec(container.Name(channel), warm.RunDir)
	if diff := cmp.Diff(cold, warm, cmpIgnoreName()); diff != "" {
		t.Errorf("warm spec differs from the cold one beyond its name (-cold +warm):\n%s", diff)
	}
	if hash := container.Name(channel)[:len(container.NamePrefix)+16]; strings.Contains(warm.Name, hash[len(container.NamePrefix):]) {
		t.Errorf("warm name %q carries the channel hash", warm.Name)
	}
	if len(dir) != 0 {
		t.Errorf("the run dir held %v at the prestart; want it empty", dir)
	}
	if got := f.driver.gotStdins(); len(got) != 1 || !strings.Contains(string(got[0]), "hello") {
		t.Errorf("the worker got %d turns; want the one, at its claim", len(got))
	}
}

func cmpIgnoreName() cmp.Option {
	return cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Name" }, cmp.Ignore())
}

// TestPoolDeadWhileIdleReplaced: a worker the engine reports dead while it
// waits is removed and replaced without a claim; the next turn is warm.
func TestPoolDeadWhileIdleReplaced(t *testing.T) {
	f, e := poolFixture(t, 2, nil)
	e.kill(0)
	waitFor(t, "the dead worker discarded and replaced", func() bool {
		n, discarded, _, _ := e.counts()
		return discarded == 1 && n == 3 && f.rt.PoolStats().Idle == 2
	})
	if st := turnOn(t, f, "discord:1:2"); !st.Warm {
		t.Error("the turn after the replacement started cold")
	}
}

// TestPoolClaimOfDeadWorkerRetries: a worker that dies at its claim (the
// engine has not told the pool yet) fails before it took the turn; the
// turn runs again on another warm worker; when that one is dead too, on a
// cold start, and answers.
func TestPoolClaimOfDeadWorkerRetries(t *testing.T) {
	f, e := poolFixture(t, 2, nil)
	e.mu.Lock()
	for _, w := range e.warm {
		w.dead = true // both: the turn then also falls back to a cold start
	}
	e.mu.Unlock()
	reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "discord:1:2", Speaker: speaker("alice")}, "hello")
	if err != nil || reply.Text != "hi" {
		t.Fatalf("RunTurn = %+v, %v; want the answer from another worker", reply, err)
	}
	runs := e.gotRuns()
	if len(runs) != 3 || !strings.HasPrefix(runs[0], container.NamePrefix+"warm-") ||
		!strings.HasPrefix(runs[1], container.NamePrefix+"warm-") || strings.HasPrefix(runs[2], container.NamePrefix+"warm-") {
		t.Errorf("runs %v; want two dead warm workers tried, then a cold start", runs)
	}
	waitIdle(t, f.rt, 2)
}

// TestPoolRetriedClaimHoldsSlotUntilRemoved: a warm worker dead at its
// claim whose removal is still pending when the turn moves on to a cold
// start still counts: the turn's slot is held until every container the
// turn ran is gone, not only its last one, so with MaxTurns 1 the next
// turn waits for that removal too.
func TestPoolRetriedClaimHoldsSlotUntilRemoved(t *testing.T) {
	f, e := poolFixture(t, 1, func(f *fixture) {
		f.opts.MaxTurns = 1
		f.opts.MaxQueueWait = 100 * time.Millisecond
	})
	removing := make(chan struct{})
	e.mu.Lock()
	e.warm[0].dead, e.warm[0].removing = true, removing
	e.mu.Unlock()
	if err := f.say("discord:1:2"); err != nil {
		t.Fatalf("RunTurn = %v; want the answer from a cold start", err)
	}
	if err := f.say("discord:1:3"); !errors.Is(err, ErrHostBusy) {
		t.Fatalf("a turn while the first one's dead warm worker is still removed = %v; want ErrHostBusy", err)
	}
	close(removing)
	waitFor(t, "the slot freed once the dead worker is gone", func() bool { return f.say("discord:1:4") == nil })
}

// TestPoolClaimFailureRetriesOnlyUntakenTurns: the retry rule. A run that
// failed after a broker call, or with the worker's own failure line, is
// not retried; an engine failure before either is.
func TestPoolClaimFailureRetriesOnlyUntakenTurns(t *testing.T) {
	engineErr := fmt.Errorf("%w: attach", container.ErrEngine)
	for _, tc := range []struct {
		name  string
		res   container.Result
		err   error
		calls int
		retry bool
	}{
		{"engine-before-anything", container.Result{}, engineErr, 0, true},
		{"killed-exit", container.Result{ExitCode: 137}, fmt.Errorf("%w: exit code 137", container.ErrWorkerFailed), 0, true},
		{"after-a-broker-call", container.Result{}, engineErr, 1, false},
		{"worker-failure-line", container.Result{StderrTail: []byte(`{"error_class":"invalid_turn","detail":"x"}` + "\n")},
			fmt.Errorf("%w: exit code 1", container.ErrWorkerFailed), 0, false},
		{"timeout", container.Result{}, fmt.Errorf("%w: %w", container.ErrAborted, rtsandbox.ErrTurnTimeout), 0, false},
		{"ok", container.Result{}, nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := &callRecorder{n: tc.calls}
			if got := unclaimed(tc.res, tc.err, calls); got != tc.retry {
				t.Errorf("unclaimed = %v; want %v", got, tc.retry)
			}
		})
	}
}

// TestPoolImageChangeDrains: a rebuilt image (the tag names another ID)
// drains the pool at the next claim: that turn starts cold, no worker of
// the old image serves a turn, and the pool refills from the new one.
func TestPoolImageChangeDrains(t *testing.T) {
	f, e := poolFixture(t, 2, nil)
	e.mu.Lock()
	e.image = "sha256:two"
	e.mu.Unlock()
	if st := turnOn(t, f, "discord:1:2"); st.Warm {
		t.Error("a worker of the old image served the turn")
	}
	waitFor(t, "the pool refilled from the new image", func() bool {
		_, discarded, _, _ := e.counts()
		return discarded == 2 && f.rt.PoolStats().Idle == 2
	})
	e.mu.Lock()
	for _, w := range e.warm[2:] {
		if w.image != "sha256:two" {
			t.Errorf("refilled worker of image %s", w.image)
		}
	}
	e.mu.Unlock()
	if st := turnOn(t, f, "discord:1:3"); !st.Warm {
		t.Error("the turn after the refill started cold")
	}
}

// TestPoolBurstStaysBounded: 4 × the pool size of channels at once, with
// fewer turn slots: every turn answers, the live containers never exceed
// pool + max_turns, and Close leaves none.
func TestPoolBurstStaysBounded(t *testing.T) {
	const size, maxTurns = 2, 3
	release := make(chan struct{})
	f, e := poolFixture(t, size, func(f *fixture) {
		f.opts.MaxTurns = maxTurns
		f.driver.run = func(ctx context.Context, _ container.Spec, _ wire.Turn) (rtsandbox.Reply, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return rtsandbox.Reply{OK: true, Text: "hi"}, nil
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, 4*size)
	for i := range 4 * size {
		wg.Go(func() {
			_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: rtsandbox.ChannelKey(fmt.Sprintf("discord:1:%d", i)), Speaker: speaker("alice")}, "hello")
			errs <- err
		})
	}
	waitFor(t, "max_turns turns running", func() bool { return len(f.driver.gotSpecs()) >= maxTurns })
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("RunTurn = %v", err)
		}
	}
	f.rt.Close(context.Background())
	_, _, live, peak := e.counts()
	if peak > size+maxTurns || live != 0 {
		t.Errorf("peak %d live containers, %d left; want at most %d, none left", peak, live, size+maxTurns)
	}
	assertEmpty(t, f.runRoot)
}

// TestPoolCloseRemovesIdle: Close removes the idle workers and their dirs,
// and a closed pool starts nothing.
func TestPoolCloseRemovesIdle(t *testing.T) {
	f, e := poolFixture(t, 3, nil)
	if err := f.rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, discarded, live, _ := e.counts(); discarded != 3 || live != 0 || n != 3 {
		t.Errorf("prestarts %d, discarded %d, live %d; want 3, 3, 0", n, discarded, live)
	}
	assertEmpty(t, f.runRoot)
	f.rt.StartPool()
	if got := f.rt.PoolStats(); got.Idle != 0 {
		t.Errorf("PoolStats after Close = %+v", got)
	}
}

// TestPoolPrestartFailureFallsBackCold: an engine that cannot prestart
// leaves the pool empty; turns start cold and answer.
func TestPoolPrestartFailureFallsBackCold(t *testing.T) {
	f := newFixture(t, func(f *fixture) {
		f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
			return rtsandbox.Reply{OK: true, Text: "hi"}, nil
		}
		e := newWarmEngine(f.driver)
		e.failStart = fmt.Errorf("%w: down", container.ErrEngine)
		f.opts.Driver, f.opts.PoolSize = e, 2
	})
	f.rt.StartPool()
	if st := turnOn(t, f, "discord:1:2"); st.Warm {
		t.Error("warm turn from a pool that cannot start")
	}
	assertEmptyAfterClose(t, f)
}

func assertEmptyAfterClose(t *testing.T, f *fixture) {
	t.Helper()
	f.rt.Close(context.Background())
	assertEmpty(t, f.runRoot)
}

func TestPoolSizeRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"negative", func(o *Options) { o.PoolSize = -1 }, "pool size -1"},
		{"no-prestart", func(o *Options) { o.PoolSize = 1 }, "needs an engine that can prestart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Broker: nil}
			f := newFixture(t, nil)
			o = f.opts
			tc.edit(&o)
			f.rt.Close(context.Background())
			_, err := New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v; want %q", err, tc.want)
			}
		})
	}
}

func TestDefaultPoolSize(t *testing.T) {
	for _, tc := range []struct{ maxTurns, want int }{{1, 1}, {4, 1}, {5, 2}, {8, 2}, {16, 4}, {1000, 4}} {
		// 64 MiB each fits any test machine's quarter of memory.
		if got := DefaultPoolSize(tc.maxTurns, 64); got != tc.want {
			t.Errorf("DefaultPoolSize(%d, 64) = %d; want %d", tc.maxTurns, got, tc.want)
		}
	}
	if got := DefaultPoolSize(16, 1<<30); got != 1 {
		t.Errorf("DefaultPoolSize at 1 TiB per worker = %d; want at least 1", got)
	}
}
