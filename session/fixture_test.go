package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/effort"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The fixture of the reference's runtime tests, adapted: instead of a fake driver whose
// ensureRunning plays the worker over the real broker socket, a fake
// Driver keeps "containers" in memory and a fake Broker stands for the
// session broker (the real one, broker.Session, is tested in its own
// package): a broker is ready while a container runs on its run
// directory (the worker announces itself to whichever broker listens
// there, docs/session.md, "Session runtime" "Host restart re-announce"), and Execute hands the turn to
// the world's worker function. By default the worker declares both
// privacy capabilities and answers {ok, text:"done", files:[art.png
// "AQID"]}; the judge keeps the previous level (default high); the prompt
// block is "<channel>:<id>".

const testImage = "sandbox:test"

// world is the fake engine and the fake workers behind it.
type world struct {
	mu         sync.Mutex
	calls      []string                         // driver calls: "status", "ensure", "create", "remove:<name>", "logs:<n>"
	running    map[string]container.SessionSpec // name → spec of a running container
	stopped    map[string]container.SessionSpec // name → spec of a stopped one
	created    []container.SessionSpec          // every create
	brokers    []*fakeBroker                    // every broker made, in order
	caps       wire.WorkerCapabilities          // what workers declare
	worker     func(context.Context, wire.SessionTurn) (wire.SessionResult, error)
	delivered  []wire.SessionTurn      // turns workers received
	binds      []wire.SessionBinding   // every Bind
	logText    string                  // what Logs answers
	brokerErr  error                   // NewBroker fails with it
	onEnsure   func()                  // runs inside EnsureRunning
	onRemove   func()                  // runs inside Remove
	ensureGate chan struct{}           // EnsureRunning's create waits for it when set
	late       sync.WaitGroup          // the creates waiting for ensureGate
	watchers   map[string][]chan error // name → the live watches of its container
	watchCalls int                     // Watch calls (not in calls: every start makes one)
	watchErr   error                   // Watch fails with it when set
	// onUndelivered runs when a turn waits with no worker to take it.
	onUndelivered func()
}

func newWorld() *world {
	w := &world{
		running: map[string]container.SessionSpec{}, stopped: map[string]container.SessionSpec{},
		watchers: map[string][]chan error{},
		caps:     wire.WorkerCapabilities{PrivateTo: true, ReaderRecords: true},
		logText:  "worker line 1\nworker line 2\n",
	}
	w.worker = func(context.Context, wire.SessionTurn) (wire.SessionResult, error) {
		return wire.SessionResult{OK: true, Text: "done", Files: []wire.ReplyFile{{Name: "art.png", Data: "AQID"}}}, nil
	}
	return w
}

func (w *world) record(call string) {
	w.mu.Lock()
	w.calls = append(w.calls, call)
	w.mu.Unlock()
}

// Calls returns the driver calls so far and forgets them.
func (w *world) takeCalls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.calls
	w.calls = nil
	return c
}

func (w *world) Status(_ context.Context, name string) (container.SessionStatus, error) {
	w.record("status")
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.running[name]; ok {
		return container.SessionStatus{State: container.StateRunning, Image: s.Image, Profile: s.Profile, Digest: s.Digest()}, nil
	}
	if s, ok := w.stopped[name]; ok {
		return container.SessionStatus{State: container.StateStopped, Image: s.Image, Profile: s.Profile, Digest: s.Digest()}, nil
	}
	return container.SessionStatus{State: container.StateMissing}, nil
}

// EnsureRunning plays the engine: with ensureGate set, the create waits
// for the gate; a caller whose ctx ends first gets ctx's error at once, as
// from the Docker client, while the engine still makes the container when
// the gate opens (late counts such creates).
func (w *world) EnsureRunning(ctx context.Context, spec container.SessionSpec) error {
	w.record("ensure")
	if w.onEnsure != nil {
		w.onEnsure()
	}
	if w.ensureGate == nil {
		return w.create(spec)
	}
	done := make(chan error, 1)
	w.late.Go(func() {
		<-w.ensureGate
		done <- w.create(spec)
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// create makes spec's container unless a matching one runs.
func (w *world) create(spec container.SessionSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.running[spec.Name]; ok && s.Digest() == spec.Digest() {
		return nil
	}
	delete(w.stopped, spec.Name)
	w.faultLocked(spec.Name, "destroy") // a replaced container's watch hears it go
	w.running[spec.Name] = spec
	w.created = append(w.created, spec)
	w.calls = append(w.calls, "create")
	return nil
}

func (w *world) Remove(_ context.Context, name string) error {
	w.record("remove:" + name)
	if w.onRemove != nil {
		w.onRemove()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.running, name)
	delete(w.stopped, name)
	w.faultLocked(name, "destroy")
	return nil
}

// Watch plays the engine's watch contract: a container that does not run
// is refused; one that does gets a watch that hears its next fault (fault,
// and the engine's own removal or replacement of it).
func (w *world) Watch(ctx context.Context, name string) (<-chan error, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watchCalls++
	if w.watchErr != nil {
		return nil, w.watchErr
	}
	if _, ok := w.running[name]; !ok {
		return nil, fmt.Errorf("%w: %s is not running", container.ErrSessionDown, name)
	}
	ch := make(chan error, 1)
	w.watchers[name] = append(w.watchers[name], ch)
	return ch, nil
}

// fault plays a fault of the container name: "die" and "pause" stop it
// (a paused container is not running), "destroy" removes it, "restart"
// leaves it running, as Docker's restart policy does after a crash. Its
// watches hear it.
func (w *world) fault(name, action string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch action {
	case "die", "pause":
		if s, ok := w.running[name]; ok {
			w.stopped[name] = s
			delete(w.running, name)
		}
	case "destroy":
		delete(w.running, name)
		delete(w.stopped, name)
	}
	w.faultLocked(name, action)
}

// faultLocked tells the watches of name that its container had action.
func (w *world) faultLocked(name, action string) {
	for _, ch := range w.watchers[name] {
		ch <- fmt.Errorf("%w: %s: %s", container.ErrSessionDown, name, action)
	}
	delete(w.watchers, name)
}

func (w *world) Logs(_ context.Context, _ string, n int) (string, error) {
	w.record(fmt.Sprintf("logs:%d", n))
	return w.logText, nil
}

// runningOn reports whether a container runs with runDir mounted.
func (w *world) runningOn(runDir string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.running {
		if s.RunDir == runDir {
			return true
		}
	}
	return false
}

func (w *world) newBroker(channel rtsandbox.ChannelKey, profile, socketPath string) (Broker, error) {
	if w.brokerErr != nil {
		return nil, w.brokerErr
	}
	ln, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, err
	}
	b := &fakeBroker{w: w, channel: channel, profile: profile, socket: socketPath, ln: ln}
	w.mu.Lock()
	w.brokers = append(w.brokers, b)
	w.mu.Unlock()
	return b, nil
}

// fakeBroker plays broker.Session's contract: one bound turn at a time,
// the privacy capability gate of docs/protocol.md, "Privacy" in Execute, Close.
type fakeBroker struct {
	w               *world
	channel         rtsandbox.ChannelKey // what the runtime made it for
	profile, socket string
	ln              net.Listener
	mu              sync.Mutex
	bound           bool
	closed          bool
}

func (b *fakeBroker) Bind(_ context.Context, sb wire.SessionBinding) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bound {
		return nil, errors.New("Broker turn already active")
	}
	b.bound = true
	b.w.mu.Lock()
	b.w.binds = append(b.w.binds, sb)
	b.w.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.bound = false
		b.mu.Unlock()
	}, nil
}

func (b *fakeBroker) Execute(ctx context.Context, t wire.SessionTurn) (wire.SessionResult, error) {
	b.mu.Lock()
	bound, closed := b.bound, b.closed
	b.mu.Unlock()
	if !bound || closed {
		return wire.SessionResult{}, errors.New("Turn ended")
	}
	if !b.w.runningOn(filepath.Dir(b.socket)) {
		// No worker polls: the turn waits undelivered until its context
		// ends, as with broker.Session.
		if b.w.onUndelivered != nil {
			b.w.onUndelivered()
		}
		<-ctx.Done()
		return wire.SessionResult{}, fmt.Errorf("Turn cancelled: %w", wire.ErrTurnUndelivered)
	}
	b.w.mu.Lock()
	caps, worker := b.w.caps, b.w.worker
	b.w.mu.Unlock()
	if t.PrivateMemory() && (!caps.PrivateTo || !caps.ReaderRecords) {
		return wire.SessionResult{}, fmt.Errorf("Sandbox worker image %s lacks privateTo, readerRecords; rebuild this image with the installed core and sandbox packages", testImage)
	}
	b.w.mu.Lock()
	b.w.delivered = append(b.w.delivered, t)
	b.w.mu.Unlock()
	return worker(ctx, t)
}

func (b *fakeBroker) Ready() bool {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	return !closed && b.w.runningOn(filepath.Dir(b.socket))
}

func (b *fakeBroker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.ln.Close()
}

// logRecord is one operator log record with its attributes.
type logRecord struct {
	msg   string
	attrs map[string]any
}

// logSink records operator log records.
type logSink struct {
	mu      sync.Mutex
	records []logRecord
}

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{msg: r.Message, attrs: map[string]any{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve().Any()
		return true
	})
	l.mu.Lock()
	l.records = append(l.records, rec)
	l.mu.Unlock()
	return nil
}
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSink) WithGroup(string) slog.Handler      { return l }

// find returns the records with message msg.
func (l *logSink) find(msg string) []logRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logRecord
	for _, r := range l.records {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// fixture is a Runtime on a fresh party dir and world.
type fixture struct {
	rt    *Runtime
	w     *world
	log   *logSink
	party string
	opts  Options
}

// shortDir returns a short private temp dir (socket paths stay under 100
// bytes), removed when t ends.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// workerUser is the worker's uid:gid for tests: this process's ids, or
// 1000:1000 when the tests run as root.
func workerUser() (int, int) {
	if os.Geteuid() == 0 {
		return 1000, 1000
	}
	return os.Geteuid(), os.Getegid()
}

// testOptions are the fixture's options on party and w.
func testOptions(party string, w *world, log *logSink) Options {
	uid, gid := workerUser()
	return Options{
		Driver: w, NewBroker: w.newBroker,
		Profiles:   map[string]Profile{"studio": {}, "other": {}},
		ProfileFor: func(rtsandbox.ChannelKey) string { return "studio" },
		PartyDir:   filepath.Join(party, "party"), Image: testImage, Installation: "test",
		UID: uid, GID: gid, TurnTimeout: time.Second,
		Judge: effort.JudgeFunc(func(_ context.Context, _, previous string) (string, error) {
			if previous == "" {
				return effort.High, nil
			}
			return previous, nil
		}),
		Memory: func(_ context.Context, b rtsandbox.Binding) (string, string, error) {
			return string(b.Channel) + ":" + b.Speaker.ID, "", nil
		},
		Logger: slog.New(log),
	}
}

func newFixture(t *testing.T, edit ...func(*Options)) *fixture {
	t.Helper()
	w, log := newWorld(), &logSink{}
	party := shortDir(t)
	o := testOptions(party, w, log)
	for _, e := range edit {
		e(&o)
	}
	rt, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	return &fixture{rt: rt, w: w, log: log, party: rt.s.PartyDir, opts: o}
}

// faultHandled returns a channel closed once the runtime has handled the
// next container fault its watches hear.
func (f *fixture) faultHandled() <-chan struct{} {
	done := make(chan struct{})
	var once sync.Once
	f.rt.afterFault = func(string) { once.Do(func() { close(done) }) }
	return done
}

// binding is a turn of speaker id in channel.
func binding(channel, id string) rtsandbox.Binding {
	return rtsandbox.Binding{
		Channel: rtsandbox.ChannelKey(channel),
		Speaker: rtsandbox.Speaker{ID: id, Name: "Guest " + id, PrincipalID: "discord:" + id},
		Tier:    rtsandbox.TierMember,
	}
}

// turnIn runs a turn with text "hello" for speaker id in channel.
func (f *fixture) turnIn(ctx context.Context, channel, id string) (TurnResult, error) {
	return f.rt.Turn(ctx, TurnRequest{Binding: binding(channel, id), Text: "hello", TurnID: id})
}

// delivered returns the turns workers received.
func (w *world) deliveredTurns() []wire.SessionTurn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.delivered)
}

// removals returns the names of the "remove:" calls among calls.
func removals(calls []string) []string {
	var out []string
	for _, c := range calls {
		if name, ok := strings.CutPrefix(c, "remove:"); ok {
			out = append(out, name)
		}
	}
	return out
}

// hangWorker is a worker that calls onDelivery, then holds the turn
// until its context ends.
func hangWorker(onDelivery func()) func(context.Context, wire.SessionTurn) (wire.SessionResult, error) {
	return func(ctx context.Context, _ wire.SessionTurn) (wire.SessionResult, error) {
		onDelivery()
		<-ctx.Done()
		return wire.SessionResult{}, context.Cause(ctx)
	}
}

// hangingTurn starts a turn in channel whose worker never answers and
// returns, once the worker has it, where the turn's error will arrive.
func (f *fixture) hangingTurn(channel string) <-chan error {
	delivered := make(chan struct{})
	f.w.worker = hangWorker(func() { close(delivered) })
	done := make(chan error, 1)
	go func() { _, err := f.turnIn(context.Background(), channel, "a"); done <- err }()
	<-delivered
	return done
}
