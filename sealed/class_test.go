package sealed

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// guestMarker stands for guest text and model content: it must never reach
// the operator log.
const guestMarker = "GUEST-MARKER-51c2"

// logRecord is one operator record with its attributes as text.
type logRecord struct {
	level   slog.Level
	message string
	attrs   map[string]string
}

// operatorLog records the runtime's operator records.
type operatorLog struct {
	mu      sync.Mutex
	records []logRecord
}

func (l *operatorLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *operatorLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *operatorLog) WithGroup(string) slog.Handler            { return l }
func (l *operatorLog) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, message: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, rec)
	return nil
}

// turnRecords returns the records about a turn's outcome.
func (l *operatorLog) turnRecords() []logRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.records), func(r logRecord) bool {
		return !strings.HasPrefix(r.message, "sandbox turn")
	})
}

func (l *operatorLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.records {
		fmt.Fprintf(&b, "%s %q %v\n", r.level, r.message, r.attrs)
	}
	return b.String()
}

// stateStore wraps the fixture's store to fail a call.
type stateStore struct {
	StateStore
	saveErr error
}

func (s stateStore) Save(ctx context.Context, b rtsandbox.Binding, st rtsandbox.ChannelState) error {
	if s.saveErr != nil {
		return s.saveErr
	}
	return s.StateStore.Save(ctx, b, st)
}

// blockUntilEnd is a driver run that holds the turn until its context ends,
// after signalling that it runs.
func blockUntilEnd(started chan<- struct{}) func(ctx context.Context, spec container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
	return func(ctx context.Context, spec container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		close(started)
		<-ctx.Done()
		return rtsandbox.Reply{}, fmt.Errorf("%w: %w", container.ErrAborted, context.Cause(ctx))
	}
}

// TestTurnClasses: every outcome class, one turn each. The operator log
// names the class (and the worker's class when it wrote one), a turn cut
// short is not logged as a failure, nothing mentions a cleanup to inspect
// unless a container may really be left, and no guest text or model
// content reaches the log. The guest sees no reply on a failure (the router
// answers with its fixed text).
func TestTurnClasses(t *testing.T) {
	const ch = rtsandbox.ChannelKey("fake:guests")
	type setup struct {
		f       *fixture
		ctx     context.Context
		cancel  context.CancelFunc
		started chan struct{}
	}
	tests := []struct {
		name        string
		model       []string // the stand-in model's script; nil: none used
		edit        func(f *fixture, s *setup)
		during      func(s *setup) // runs once the driver has started, if it signals
		class       string
		workerClass string
		level       slog.Level
		wantReply   bool
	}{
		{name: "ok", model: []string{completion("Hello " + guestMarker)}, class: rtsandbox.ClassOK, level: slog.LevelDebug, wantReply: true},
		{name: "upstream", model: []string{}, // the model answers 500: the broker 502
			class: rtsandbox.ClassUpstream, workerClass: container.WorkerUpstreamFailed, level: slog.LevelWarn},
		{name: "budget", model: []string{completion("never asked")},
			edit: func(f *fixture, _ *setup) {
				// Spend the turn's call budget before the worker runs:
				// its model call gets 429.
				f.driver.run = func(ctx context.Context, spec container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
					for range 48 {
						mustPost(t, ctx, spec, wire.RouteModel, `[]`)
					}
					return runWorker(ctx, spec, turn)
				}
			},
			class: rtsandbox.ClassBudget, workerClass: container.WorkerBudgetExhausted, level: slog.LevelWarn},
		{name: "worker-null-content", model: []string{completion(nil)},
			class: rtsandbox.ClassWorker, workerClass: container.WorkerNoFinalText, level: slog.LevelWarn},
		{name: "worker-model-response", model: []string{`{"choices":[{"message":"` + guestMarker + `"}]}`},
			class: rtsandbox.ClassWorker, workerClass: container.WorkerModelResponse, level: slog.LevelWarn},
		{name: "engine", edit: func(f *fixture, _ *setup) {
			f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{}, fmt.Errorf("%w: create: connection refused", container.ErrEngine)
			}
		}, class: rtsandbox.ClassEngine, level: slog.LevelWarn},
		{name: "cleanup-failed", edit: func(f *fixture, _ *setup) {
			f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{}, fmt.Errorf("%w: remove x: driver closed", container.ErrCleanup)
			}
		}, class: rtsandbox.ClassEngine, level: slog.LevelWarn},
		{name: "timeout", edit: func(f *fixture, s *setup) {
			f.opts.TurnTimeout = MinTurnTimeout
			f.driver.run = blockUntilEnd(s.started)
		}, class: rtsandbox.ClassTimeout, level: slog.LevelWarn},
		{name: "stopped", edit: func(f *fixture, s *setup) { f.driver.run = blockUntilEnd(s.started) },
			during: func(s *setup) { s.f.rt.Stop(ch) }, class: rtsandbox.ClassStopped, level: slog.LevelInfo},
		{name: "shutdown", edit: func(f *fixture, s *setup) { f.driver.run = blockUntilEnd(s.started) },
			during: func(s *setup) { go s.f.rt.Close(context.Background()) }, class: rtsandbox.ClassShutdown, level: slog.LevelInfo},
		{name: "cancelled", edit: func(f *fixture, s *setup) { f.driver.run = blockUntilEnd(s.started) },
			during: func(s *setup) { s.cancel() }, class: rtsandbox.ClassCancelled, level: slog.LevelInfo},
		{name: "invalid-reply", edit: func(f *fixture, _ *setup) {
			f.driver.stateless = true
			f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{OK: true, Text: guestMarker}, nil // no state
			}
		}, class: rtsandbox.ClassInvalidReply, level: slog.LevelWarn},
		{name: "state-corrupt", edit: func(f *fixture, _ *setup) {
			// A row the host could not have written: a key of 200
			// characters, holding guest text.
			plantRow(t, f, ch, "channel", strings.Repeat("k", 200)+guestMarker, "note")
		}, class: rtsandbox.ClassState, level: slog.LevelWarn},
		// A state the store could not keep (a full disk, a lock held past
		// the bound) does not cost the guest a ready answer: the turn is
		// ok, its record an error naming the file (issue 22).
		{name: "state-not-saved-disk-full", model: []string{completion("Hi.")}, edit: func(f *fixture, _ *setup) {
			f.opts.State = stateStore{StateStore: f.state, saveErr: &fs.PathError{Op: "write", Path: filepath.Join(f.stateDir, "memory.db-wal"), Err: syscall.ENOSPC}}
		}, class: rtsandbox.ClassOK, level: slog.LevelError, wantReply: true},
		{name: "state-not-saved-locked", model: []string{completion("Hi.")}, edit: func(f *fixture, _ *setup) {
			f.opts.State = stateStore{StateStore: f.state, saveErr: fmt.Errorf("memory database %s: save: database is locked (5)", filepath.Join(f.stateDir, "memory.db"))}
		}, class: rtsandbox.ClassOK, level: slog.LevelError, wantReply: true},
		// A state the reply broke (over the limits) still fails the turn.
		{name: "state-refused", model: []string{completion("Hi.")}, edit: func(f *fixture, _ *setup) {
			f.opts.State = stateStore{StateStore: f.state, saveErr: fmt.Errorf("memory database x: save: %w", rtsandbox.ErrInvalid)}
		}, class: rtsandbox.ClassState, level: slog.LevelWarn},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := &operatorLog{}
			var stats TurnStats
			s := &setup{started: make(chan struct{})}
			s.ctx, s.cancel = context.WithCancel(context.Background())
			defer s.cancel()
			var model *modelServer
			if tc.model != nil {
				model = newModelServer(t, tc.model...)
			}
			s.f = newFixture(t, func(f *fixture) {
				if model != nil {
					f.cfg.ModelURL = model.url()
				}
				f.driver.run = runWorker
				f.opts.Logger = slog.New(log)
				f.opts.OnTurn = func(st TurnStats) { stats = st }
				if tc.edit != nil {
					tc.edit(f, s)
				}
			})
			if tc.during != nil {
				go func() {
					<-s.started
					tc.during(s)
				}()
			}
			reply, err := s.f.rt.RunTurn(s.ctx, rtsandbox.Binding{Channel: ch, Speaker: speaker("guest")}, "Hi "+guestMarker)
			if tc.wantReply != (err == nil) {
				t.Fatalf("RunTurn = %+v, %v; want a reply %v", reply, err, tc.wantReply)
			}
			if !tc.wantReply && reply != (rtsandbox.Reply{}) {
				t.Errorf("failed turn returned %+v; want no reply", reply)
			}
			if stats.Class != tc.class || stats.WorkerClass != tc.workerClass {
				t.Errorf("TurnStats class %q, worker class %q; want %q, %q", stats.Class, stats.WorkerClass, tc.class, tc.workerClass)
			}
			recs := log.turnRecords()
			if len(recs) != 1 {
				t.Fatalf("turn records:\n%s; want one", log.text())
			}
			r := recs[0]
			if r.attrs["class"] != tc.class || r.attrs["worker_class"] != tc.workerClass || r.level != tc.level {
				t.Errorf("record %s %q class=%q worker_class=%q; want %s, %q, %q", r.level, r.message, r.attrs["class"], r.attrs["worker_class"], tc.level, tc.class, tc.workerClass)
			}
			if tc.workerClass != "" && r.attrs["worker_detail"] == "" {
				t.Errorf("record %v has no worker_detail", r.attrs)
			}
			all := log.text()
			if strings.Contains(all, guestMarker) {
				t.Errorf("operator log holds guest or model text:\n%s", all)
			}
			if tc.name != "cleanup-failed" && strings.Contains(all, "inspect") {
				t.Errorf("operator log asks to inspect a cleanup:\n%s", all)
			}
		})
	}
}

// A reply whose container removal is still pending is delivered; the
// record says the removal goes on and names the container.
func TestTurnCleanupPendingKeepsReply(t *testing.T) {
	log := &operatorLog{}
	var stats TurnStats
	f := newFixture(t, func(f *fixture) {
		f.opts.Logger = slog.New(log)
		f.opts.OnTurn = func(st TurnStats) { stats = st }
	})
	pending := &pendingDriver{fakeDriver: f.driver}
	f.driver.run = func(context.Context, container.Spec, wire.Turn) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: "Done."}, nil
	}
	opts := f.opts
	opts.Driver = pending
	f.rt.Close(context.Background())
	rt, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	reply, err := rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "Hi")
	if err != nil || reply.Text != "Done." {
		t.Fatalf("RunTurn = %+v, %v; want the reply", reply, err)
	}
	if stats.Class != rtsandbox.ClassOK || !stats.CleanupPending || stats.Container == "" {
		t.Errorf("TurnStats = class %q pending %v container %q; want ok, pending, the name", stats.Class, stats.CleanupPending, stats.Container)
	}
	recs := log.turnRecords()
	if len(recs) != 1 || recs[0].level != slog.LevelInfo || recs[0].attrs["cleanup_pending"] != "true" || recs[0].attrs["container"] != stats.Container {
		t.Errorf("turn records:\n%s; want one Info record naming the pending container", log.text())
	}
}

// pendingDriver reports every run's removal as pending.
type pendingDriver struct{ *fakeDriver }

func (d *pendingDriver) Run(ctx context.Context, spec container.Spec, stdin []byte) (container.Result, error) {
	res, err := d.fakeDriver.Run(ctx, spec, stdin)
	res.CleanupPending, res.Removed = true, time.Time{}
	return res, err
}
