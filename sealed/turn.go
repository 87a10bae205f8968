package sealed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// turn is one admitted turn's resources and record (docs/architecture.md, "The request path").
type turn struct {
	s       *settings
	pool    *pool           // warm workers to claim; nil: every turn starts cold
	ctx     context.Context // the turn context: deadline, Stop, Close
	end     context.CancelCauseFunc
	binding rtsandbox.Binding // what the router admitted: channel, speaker, tier
	text    string
	reset   bool
	onReply func(rtsandbox.Reply) // sees a reply the driver accepted
	onText  broker.TextFunc       // the streamed answers' text, or nil
	stats   TurnStats
}

// run sets up the workspace, run dir and broker, runs the container and
// always tears down what it set up, in reverse order. A teardown failure
// fails the turn even when the worker replied.
func (t *turn) run() (reply rtsandbox.Reply, err error) {
	var undo teardown
	defer func() {
		// Cancel first, even after a success: host-tool calls still in
		// flight end before their listener goes away (a review regression of the reference).
		t.end(errTurnEnded)
		err = errors.Join(err, undo.run())
		if err == nil {
			// The state is committed only by a turn that ended cleanly:
			// a failed turn changes nothing. A store that fails to keep
			// it does not cost the guest the answer (issue 22).
			err, t.stats.StateErr = storeFailure(t.commit(&reply))
		}
		if err != nil {
			reply = rtsandbox.Reply{} // a failed turn has no reply
		} else if t.stats.StateErr == nil {
			// Only a turn whose state was kept consumes a pending fresh
			// start (docs/sealed-turn.md, "Commands"); a failed one, or one whose history stayed as
			// it was, leaves it for the next turn.
			t.onReply(reply)
		}
		t.finish(err)
	}()
	// The roots were checked at setup; a root swapped since then (by
	// whoever can write its parent) must not receive this turn's dirs.
	if err := t.s.checkRoots(); err != nil {
		return rtsandbox.Reply{}, err
	}
	state, err := t.s.State.Load(t.ctx, t.binding.Channel)
	if err != nil {
		if t.ctx.Err() != nil {
			// Stopped, timed out or closed while loading: the turn ends
			// for that cause, not as a failed store.
			return rtsandbox.Reply{}, fmt.Errorf("%w: %w", context.Cause(t.ctx), err)
		}
		return rtsandbox.Reply{}, fmt.Errorf("%w: %w", errState, err)
	}
	stdin, err := t.workerInput(state)
	if err != nil {
		return rtsandbox.Reply{}, err
	}
	calls := &callRecorder{}
	// The turn context, not the caller's, binds the broker: when the turn
	// ends, new calls get 410 and calls in flight are cancelled.
	bt := t.s.Broker.Turn(t.ctx, t.binding, broker.WithText(t.onText))
	res, err := t.runWorker(stdin, calls.wrap(bt), calls, &undo)
	t.stats.record(res, calls)
	err = overBudget(err, t.stats.WorkerClass, bt.OverBudget())
	if err != nil {
		return rtsandbox.Reply{}, fmt.Errorf("sandbox turn: %w", err)
	}
	return res.Reply, nil
}

// runWorker runs the turn's worker: a warm one from the pool when there
// is one, else a cold one. A warm worker that never took its turn (it
// died before or at its claim: the engine or its exit failed the run
// before any broker call and without a failure line of the worker) is
// replaced by another warm one or a cold start, so the turn still gets
// its answer; at most claimAttempts warm ones are tried. Each attempt's
// socket and run dir go when the next begins; the last one's are undone
// with the turn.
func (t *turn) runWorker(stdin []byte, h http.Handler, calls *callRecorder, undo *teardown) (container.Result, error) {
	var removing []<-chan struct{} // earlier attempts' containers not yet gone
	for attempt := 0; ; attempt++ {
		var ws *warmSlot
		if attempt < claimAttempts {
			ws = t.pool.take(t.ctx)
		}
		var place teardown
		res, err := t.attempt(ws, stdin, h, &place)
		if res.Settled != nil {
			removing = append(removing, res.Settled)
		}
		if ws == nil || !unclaimed(res, err, calls) || t.ctx.Err() != nil {
			*undo = append(*undo, place...)
			res.Settled = allClosed(removing)
			return res, err
		}
		t.s.Logger.Warn("sandbox turn: its warm worker ended before it took the turn; starting another",
			"channel", string(t.binding.Channel), "container", ws.w.Name(), "err", err)
		if err := place.run(); err != nil {
			return res, err
		}
	}
}

// attempt runs the turn on ws, or cold when ws is nil: the broker listens
// in the worker's run dir (the slot's, made empty at prestart, or a new
// one), then the engine runs it. place gets the undo steps.
func (t *turn) attempt(ws *warmSlot, stdin []byte, h http.Handler, place *teardown) (container.Result, error) {
	var runDir, name string
	if ws != nil {
		// The pool refills once the engine is done with this run
		// (Runtime.afterSettled): a create and start beside it slow the
		// engine's handling of its exit and removal.
		runDir, name = ws.dir, ws.w.Name()
	} else {
		dir, err := makeRunDir(t.s.RunRoot, t.s.owner())
		if err != nil {
			return container.Result{}, err
		}
		runDir, name = dir, container.Name(string(t.binding.Channel))
	}
	place.add(func() error { return os.RemoveAll(runDir) })
	srv, err := t.listen(runDir, h)
	if err != nil {
		if ws != nil { // claimed, never run: it goes as a failed run's would
			err = errors.Join(err, discard(ws.w))
		}
		return container.Result{}, err
	}
	place.add(srv.Close)
	t.stats.Listening = time.Now()
	t.stats.Container, t.stats.Warm = name, ws != nil
	if ws != nil {
		return ws.w.Run(t.ctx, stdin)
	}
	return t.s.Driver.Run(t.ctx, t.s.spec(name, runDir), stdin)
}

// allClosed returns a channel closed once every one of chs is; nil when
// there is none. A turn's slot counts every container it ran until the
// engine confirmed each gone (Runtime.afterSettled).
func allClosed(chs []<-chan struct{}) <-chan struct{} {
	switch len(chs) {
	case 0:
		return nil
	case 1:
		return chs[0]
	}
	all := make(chan struct{})
	go func() {
		defer close(all)
		for _, ch := range chs {
			<-ch
		}
	}()
	return all
}

// unclaimed reports a warm run that failed before its worker took the
// turn: an engine failure or a failed exit with no broker call and no
// failure line of the worker (a worker that read its turn and failed
// writes one). Such a run had no effect, so another worker may run it.
func unclaimed(res container.Result, err error, calls *callRecorder) bool {
	if !errors.Is(err, container.ErrEngine) && !errors.Is(err, container.ErrWorkerFailed) {
		return false
	}
	if _, n := calls.get(); n > 0 {
		return false
	}
	_, wrote := container.ParseWorkerFailure(res.StderrTail)
	return !wrote
}

// listen serves h on the run dir's socket and hands the socket to the
// worker user when the service is root (still 0600).
func (t *turn) listen(runDir string, h http.Handler) (*broker.Server, error) {
	sock := socketPath(runDir)
	if len(sock) > maxSocketPath {
		return nil, rtsandbox.ErrSocketPath
	}
	srv, err := broker.Listen(sock, h, broker.ListenOptions{Logger: t.s.Logger})
	if err != nil {
		return nil, err
	}
	if err := t.s.owner().apply(sock, 0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("sandbox broker socket: %w", err), srv.Close())
	}
	return srv, nil
}

// workerInput is the turn JSON: the speaker without its principal, the
// channel's state (no history after a fresh start), and nothing secret.
// Empty lists are [] rather than null.
func (t *turn) workerInput(state rtsandbox.ChannelState) ([]byte, error) {
	in := wire.Turn{
		Text:     t.text,
		Speaker:  wire.TurnSpeaker{ID: t.binding.Speaker.ID, Name: t.binding.Speaker.Name},
		Model:    t.s.Model,
		Prompt:   t.s.Prompt,
		TimeZone: t.s.TimeZone,
		Reset:    t.reset,
		Memory:   emptyIfNil(state.Memory),
		History:  emptyIfNil(state.History),
		Tools:    emptyIfNil(t.s.tools),
		MCP:      emptyIfNil(t.s.mcp),
		ModelAPI: t.s.ModelAPI,
		Stream:   t.s.ModelStream,
		Thinking: t.s.Thinking,
	}
	if t.reset {
		in.History = []rtsandbox.HistoryEntry{}
	}
	b, err := jsonjs.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("sandbox turn input: %w", err)
	}
	if len(b) > rtsandbox.MaxTurnBytes {
		return nil, fmt.Errorf("sandbox turn input is %d bytes, over %d: %w", len(b), rtsandbox.MaxTurnBytes, ErrTooLarge)
	}
	return b, nil
}

func emptyIfNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// stateTimeout bounds a clean turn's commit of its state, which runs after
// the turn context ended: the store's busy timeout (a writer waits 5 s for
// another process's lock). Past it the answer is delivered unsaved
// (storeFailure), so a locked memory.db delays an answer by at most this
// much rather than throwing it away.
const stateTimeout = 5 * time.Second

// storeFailure splits a commit's error: the reply's own fault (no state,
// a state over the limits or writing another principal's namespace:
// rtsandbox.ErrInvalid or ErrRefused) fails the turn as before; anything
// else is the store's (a lock, a full disk, a damaged file, the bound
// passed), which keeps the answer and drops the state.
func storeFailure(err error) (turnErr, stateErr error) {
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, container.ErrInvalidReply), errors.Is(err, rtsandbox.ErrInvalid), errors.Is(err, rtsandbox.ErrRefused):
		return err, nil
	}
	return nil, err
}

// commit stores the state a cleanly ended turn returned and takes it off
// the reply, which leaves the runtime without it. A worker that exits 0
// must return state; an update the store refuses fails the turn and
// leaves the stored state as it was.
func (t *turn) commit(reply *rtsandbox.Reply) error {
	st := reply.State
	reply.State = nil
	if st == nil {
		return fmt.Errorf("sandbox turn: %w: the reply carries no state", container.ErrInvalidReply)
	}
	// The turn context has ended (its calls are cut off first); the
	// commit of a clean turn still runs, within its own bound.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), stateTimeout)
	defer cancel()
	if err := t.s.State.Save(ctx, t.binding, *st); err != nil {
		return fmt.Errorf("%w: %w", errState, err)
	}
	return nil
}

// finish completes the record and logs the outcome for the operator, with
// its class. A turn cut short on purpose (stopped, shut down, cancelled) is
// not a failure; a removal still pending is noted, never as a cleanup
// failure. Nothing the container wrote is logged but the worker's parsed
// class and detail.
func (t *turn) finish(err error) {
	s := &t.stats
	s.Ended, s.Err = time.Now(), err
	s.Class = classify(err, s.WorkerClass)
	attrs := []any{"channel", string(t.binding.Channel), "class", s.Class}
	if s.WorkerClass != "" {
		attrs = append(attrs, "worker_class", s.WorkerClass, "worker_detail", s.WorkerDetail)
	}
	if s.CleanupPending {
		attrs = append(attrs, "cleanup_pending", true, "container", s.Container)
	}
	switch {
	case err == nil && s.StateErr != nil:
		t.s.Logger.Error("sandbox turn answered, but its state was not saved: the answer was delivered; "+
			"this turn's memory changes and history are not kept (the memory database: docs/operations.md)",
			append(attrs, "duration", s.Ended.Sub(s.Admitted), "calls", s.Calls, "err", s.StateErr)...)
	case err == nil && s.CleanupPending:
		t.s.Logger.Info("sandbox turn done; container removal continues in the background",
			append(attrs, "duration", s.Ended.Sub(s.Admitted), "calls", s.Calls)...)
	case err == nil:
		t.s.Logger.Debug("sandbox turn done", append(attrs, "duration", s.Ended.Sub(s.Admitted), "calls", s.Calls)...)
	case endedEarly(s.Class):
		t.s.Logger.Info("sandbox turn ended early", append(attrs, "err", err)...)
	default:
		t.s.Logger.Warn("sandbox turn failed", append(attrs, "err", err)...)
	}
	if t.s.OnTurn != nil {
		t.s.OnTurn(t.stats)
	}
}

// spec is the container profile of one turn; its /workspace is a tmpfs.
func (s *settings) spec(name, runDir string) container.Spec {
	return container.Spec{
		Name: name, Image: s.Image, UID: s.UID, GID: s.GID,
		RunDir: runDir, Limits: s.Limits, Labels: s.labels, Runtime: s.Runtime,
	}
}

// preflight validates the container profile a turn would get, so that a
// bad image name, user or limit is a setup error rather than a failure of
// every turn.
func (s *settings) preflight() error {
	probe := "preflight:check"
	spec := s.spec(container.Name(probe), filepath.Join(s.RunRoot, runDirPrefix+"XXXXXX"))
	if err := spec.Validate(); err != nil {
		return setupError("%w", err)
	}
	return nil
}

func (s *settings) owner() owner {
	return owner{chown: s.hostRoot, uid: s.UID, gid: s.GID}
}

// teardown runs registered undo steps in reverse order, all of them, and
// joins their errors.
type teardown []func() error

func (u *teardown) add(f func() error) { *u = append(*u, f) }

func (u teardown) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		errs = append(errs, u[i]())
	}
	return errors.Join(errs...)
}

// callRecorder notes when the worker first reached the broker and how many
// requests it made.
type callRecorder struct {
	mu    sync.Mutex
	first time.Time
	n     int
}

func (c *callRecorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		if c.n == 0 {
			c.first = time.Now()
		}
		c.n++
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (c *callRecorder) get() (time.Time, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first, c.n
}
