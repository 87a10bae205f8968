package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/attach"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Bounds of what a failed turn writes to the operator log (docs/architecture.md, "The request path").
const (
	maxLogMessage = 4000   // the failure message, UTF-16 units
	maxLogLines   = 200000 // the worker's last log lines, UTF-16 units
	// cleanupTimeout bounds the log read and the removal after an abort,
	// which run after the turn's own context ended, and the driver's
	// EnsureRunning, which runs to its end whatever that context says.
	cleanupTimeout = 60 * time.Second
)

// TurnRequest is one session turn as the host asks for it.
type TurnRequest struct {
	// Binding is what the router admitted: channel, speaker and tier.
	Binding rtsandbox.Binding
	// Text is the guest's message, at most 100,000 UTF-16 units.
	Text string
	// Images go to the worker with the text (docs/protocol.md, "Images and files"); nil for none.
	Images []wire.Image
	// TurnID names the turn (a safe file name: the worker's outbox
	// directory); "" means a fresh random id.
	TurnID string
}

// TurnResult is a successful turn: the worker's final text and its reply
// files, decoded.
type TurnResult struct {
	TurnID string
	Text   string
	Files  []File
}

// File is one reply file, decoded (the root's noun).
type File = rtsandbox.File

// RunTurn runs one guest turn in b's channel (the router.Runtime shape)
// and returns its text; reply files are dropped (the router delivers text
// only; Turn returns them). Errors are Turn's.
func (r *Runtime) RunTurn(ctx context.Context, b rtsandbox.Binding, text string) (rtsandbox.Reply, error) {
	res, err := r.Turn(ctx, TurnRequest{Binding: b, Text: text})
	if err != nil {
		return rtsandbox.Reply{}, err
	}
	if len(res.Files) > 0 {
		r.s.Logger.Info("session reply files not delivered", "channel", string(b.Channel), "turn_id", res.TurnID, "files", len(res.Files))
	}
	return rtsandbox.Reply{OK: true, Text: res.Text}, nil
}

// Turn runs one session turn (docs/architecture.md, "The request path"). Refusals, decided before anything
// runs: rtsandbox.ErrChannelKey, rtsandbox.ErrRuntimeClosed, rtsandbox.ErrChannelBusy. Every other failure is
// logged ("sandbox turn failed") and returned as an error whose text is
// "Sandbox turn timed out" (the deadline passed) or "Sandbox turn failed:
// <scrubbed message>", wrapping the original error (ErrWorkerFailed for a
// worker's ok:false, ErrUnknownProfile, ErrNotReady, wire.ErrTurnInput
// …) and, when the turn was aborted, its cause (rtsandbox.ErrTurnTimeout, rtsandbox.ErrTurnStopped,
// rtsandbox.ErrRuntimeClosed or the caller's). An aborted turn's container is removed
// before Turn returns.
func (r *Runtime) Turn(ctx context.Context, req TurnRequest) (TurnResult, error) {
	return r.turnWith(ctx, req, nil)
}

// turnWith is Turn with a step that runs once the channel is taken and
// before anything starts (RunInput collects the attachments there): it
// may change the request, end the turn with no result (false) or fail it.
// An admitted turn is reported (Options.OnTurn) once its channel is free.
func (r *Runtime) turnWith(ctx context.Context, req TurnRequest, before func(t *turn, req *TurnRequest) (bool, error)) (_ TurnResult, err error) {
	channel := req.Binding.Channel
	if err := checkChannel(channel); err != nil {
		return TurnResult{}, err
	}
	admitted := time.Now()
	t, err := r.admit(ctx, channel)
	if err != nil {
		return TurnResult{}, err
	}
	defer func() { r.report(t, admitted, err) }()
	defer r.finish(t)
	if t.id = req.TurnID; t.id == "" {
		t.id = newTurnID()
	}
	if before != nil {
		run, err := before(t, &req)
		if err != nil {
			return TurnResult{}, r.failed(t, err)
		}
		if !run {
			return TurnResult{TurnID: t.id}, nil
		}
	}
	res, err := r.run(t, req)
	if err != nil {
		return TurnResult{}, r.failed(t, err)
	}
	return res, nil
}

// turn is one admitted turn.
type turn struct {
	channel rtsandbox.ChannelKey
	id      string
	caller  context.Context // the caller's context
	ctx     context.Context // the turn signal: caller, Stop/Close, deadline
	cancel  context.CancelCauseFunc
	stop    context.CancelFunc // the deadline timer
	act     *activity
}

// admit makes t the channel's active turn (docs/architecture.md, "The request path").
func (r *Runtime) admit(ctx context.Context, channel rtsandbox.ChannelKey) (*turn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, rtsandbox.ErrRuntimeClosed
	}
	cs := r.state(channel)
	if cs.active != nil {
		return nil, rtsandbox.ErrChannelBusy
	}
	base, cancel := context.WithCancelCause(ctx)
	tctx, stop := context.WithTimeoutCause(base, r.s.TurnTimeout, rtsandbox.ErrTurnTimeout)
	t := &turn{channel: channel, caller: ctx, ctx: tctx, cancel: cancel, stop: stop,
		act: &activity{cancel: cancel, done: make(chan struct{})}}
	cs.active = t.act
	return t, nil
}

// pastDeadline reports whether the turn's own deadline (TurnTimeout from
// its admission, not an earlier one of its caller's) has passed.
func (t *turn) pastDeadline() bool {
	d, ok := t.ctx.Deadline()
	if cd, mine := t.caller.Deadline(); mine && !cd.After(d) {
		return false
	}
	return ok && !time.Now().Before(d)
}

// finish always runs (docs/architecture.md, "The request path"): the turn signal ends, so broker
// calls still in flight end, and the channel is free.
func (r *Runtime) finish(t *turn) {
	t.cancel(errTurnEnded)
	t.stop()
	r.end(t.channel, t.act)
}

// run is docs/architecture.md, "The request path".
func (r *Runtime) run(t *turn, req TurnRequest) (TurnResult, error) {
	sp := req.Binding.Speaker
	st := wire.SessionTurn{
		TurnID: t.id, Author: wire.SessionAuthor{ID: sp.ID, Name: sp.Name},
		Text: req.Text, Images: req.Images, Thinking: "low", // judged below
	}
	if st.Images == nil {
		st.Images = []wire.Image{}
	}
	if err := st.Validate(); err != nil {
		return TurnResult{}, err
	}
	profile := r.s.ProfileFor(t.channel)
	level, err := r.judgeAndStart(t, profile, req.Text)
	if err != nil {
		return TurnResult{}, err
	}
	if st.Room, err = r.diskGate(t); err != nil {
		return TurnResult{}, err
	}
	defer r.diskAfter(t)
	st.Thinking = level
	if st.Memory, st.MemoryVisibility, err = r.memory(t, req.Binding); err != nil {
		return TurnResult{}, err
	}
	if err := st.Validate(); err != nil {
		return TurnResult{}, err
	}
	deadline, _ := t.ctx.Deadline()
	sb := wire.SessionBinding{Binding: req.Binding, Profile: profile, Thinking: level, Deadline: deadline}
	out, err := r.execute(t, profile, sb, st)
	if err != nil {
		return TurnResult{}, err
	}
	return decode(t.id, out)
}

// execute runs the turn on the channel's worker (docs/architecture.md, "The request path"). A
// fault of the channel's container (watch.go) before any worker took the
// turn, heard before the attempt or cutting it while the turn waited
// undelivered, starts the worker again and runs the turn once more:
// nothing of it ran. A fault after the worker took it fails the turn with
// the fault (rtsandbox.ErrSandboxStopped), and the worker's last lines go
// to the operator log.
func (r *Runtime) execute(t *turn, profile string, sb wire.SessionBinding, st wire.SessionTurn) (wire.SessionResult, error) {
	for again := true; ; again = false {
		out, err := r.attempt(t, sb, st)
		if err == nil || !errors.Is(err, container.ErrSessionDown) {
			return out, err
		}
		if !again || !errors.Is(err, wire.ErrTurnUndelivered) {
			r.logWorker(t)
			return out, err
		}
		r.s.Logger.Info("session turn runs again: its container stopped serving before the worker took it",
			"channel", string(t.channel), "turn_id", t.id, "err", r.scrub(err.Error(), maxLogMessage))
		if err := r.start(t.ctx, t.channel, profile); err != nil {
			return wire.SessionResult{}, err
		}
	}
}

// attempt binds the channel's broker to the turn and executes it, under a
// context a fault of the channel's container cuts (the fault is then in
// the error, with the broker's).
func (r *Runtime) attempt(t *turn, sb wire.SessionBinding, st wire.SessionTurn) (wire.SessionResult, error) {
	actx, cut := context.WithCancelCause(t.ctx)
	defer cut(errTurnEnded)
	if fault := r.beginAttempt(t, cut); fault != nil {
		return wire.SessionResult{}, fmt.Errorf("%w: %w", fault, wire.ErrTurnUndelivered)
	}
	defer r.endAttempt(t)
	b, err := r.current(t.channel)
	if err != nil {
		return wire.SessionResult{}, err
	}
	// The binding's context ends before the binding is revoked (docs/architecture.md, "The request path"
	// step 15), so calls still in flight under this turn's scope end with
	// it rather than outlive it.
	bctx, unbind := context.WithCancel(actx)
	release, err := b.Bind(bctx, sb)
	if err != nil {
		unbind()
		return wire.SessionResult{}, fmt.Errorf("bind: %w", err)
	}
	defer func() { unbind(); release() }()
	out, err := b.Execute(actx, st)
	if fault := context.Cause(actx); err != nil && t.ctx.Err() == nil && errors.Is(fault, container.ErrSessionDown) {
		return out, fmt.Errorf("%w: %w", fault, err)
	}
	return out, err
}

// judgeAndStart runs the effort judge and the channel's start at once
// (docs/session.md, "Effort judge") and stores the judged level once both succeeded.
func (r *Runtime) judgeAndStart(t *turn, profile, text string) (string, error) {
	r.mu.Lock()
	previous := r.state(t.channel).level
	r.mu.Unlock()
	var level string
	var judgeErr error
	judged := make(chan struct{})
	go func() {
		defer close(judged)
		level, judgeErr = r.s.Judge.Judge(t.ctx, text, previous)
	}()
	startErr := r.start(t.ctx, t.channel, profile)
	<-judged
	if err := errors.Join(startErr, judgeErr); err != nil {
		return "", err
	}
	if !wire.ValidThinking(level) {
		return "", fmt.Errorf("effort judge answered %q, not a thinking level", level)
	}
	r.mu.Lock()
	r.state(t.channel).level = level
	r.mu.Unlock()
	return level, nil
}

// memory is the turn's prompt memory block and its visibility (docs/architecture.md, "The request path" step
// 5). A block without a visibility is private, so a host that forgot to
// say is never less careful than one that said.
func (r *Runtime) memory(t *turn, b rtsandbox.Binding) (string, string, error) {
	if r.s.Memory == nil {
		return "", "", nil
	}
	mem, visibility, err := r.s.Memory(t.ctx, b)
	switch {
	case err != nil:
		return "", "", fmt.Errorf("memory: %w", err)
	case rtsandbox.UTF16Len(mem) > rtsandbox.MaxSessionMemory:
		return "", "", ErrMemoryTooLarge
	case mem == "":
		return "", "", nil
	case visibility == "":
		return mem, wire.MemoryPrivate, nil
	case visibility != wire.MemoryShared && visibility != wire.MemoryPrivate:
		return "", "", fmt.Errorf("memory visibility %q is neither shared nor private: %w", visibility, wire.ErrTurnInput)
	}
	return mem, visibility, nil
}

// current is the channel's broker after a start.
func (r *Runtime) current(channel rtsandbox.ChannelKey) (Broker, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.state(channel).entry; e != nil {
		return e.broker, nil
	}
	return nil, errors.New("session broker gone after start")
}

// decode finishes a worker's result (docs/architecture.md, "The request path"): ok:false fails with
// ErrWorkerFailed (the container is kept); the reply files are validated
// again and decoded (attach.DecodeReplyFiles).
func decode(id string, out wire.SessionResult) (TurnResult, error) {
	if !out.OK {
		return TurnResult{}, fmt.Errorf("%w: %s", ErrWorkerFailed, out.Error)
	}
	files, err := attach.DecodeReplyFiles(out.Files)
	if err != nil {
		return TurnResult{}, err
	}
	return TurnResult{TurnID: id, Text: out.Text, Files: files}, nil
}

// failed is docs/architecture.md, "The request path": log the failure; when the turn signal ended,
// save the worker's last log lines and force-remove the exact container;
// return the reference's error text.
func (r *Runtime) failed(t *turn, err error) error {
	aborted := t.ctx.Err() != nil
	cause := context.Cause(t.ctx)
	if !aborted && t.pastDeadline() {
		// The deadline passed but its timer has not fired yet: the broker,
		// which ends the turn's calls at the same deadline on its own
		// timer, can make the worker fail first. That is still the
		// deadline's doing.
		aborted, cause = true, rtsandbox.ErrTurnTimeout
	}
	timedOut := aborted && errors.Is(cause, rtsandbox.ErrTurnTimeout)
	msg := r.scrub(err.Error(), maxLogMessage)
	// A stop or a shutdown is no fault to investigate: Info, not Warn.
	level := slog.LevelWarn
	if aborted && errors.Is(cause, rtsandbox.ErrEndedEarly) {
		level = slog.LevelInfo
	}
	r.s.Logger.Log(context.Background(), level, "sandbox turn failed", "channel", string(t.channel), "turn_id", t.id,
		"message", msg, "timed_out", timedOut, "cancelled", t.caller.Err() != nil)
	errs := []error{err}
	if aborted {
		errs = append(errs, cause)
		r.removeAborted(t)
	}
	if timedOut {
		return &turnError{msg: timedOutText, errs: errs}
	}
	return &turnError{msg: turnFailedText + msg, errs: errs}
}

// removeAborted waits for a pending start, saves the container's last
// LogLines lines to the operator log and force-removes it, within
// cleanupTimeout and whatever the turn's context says.
func (r *Runtime) removeAborted(t *turn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), cleanupTimeout)
	defer cancel()
	name := r.name(t.channel)
	if err := r.waitStart(ctx, t.channel); err != nil {
		r.s.Logger.Warn("session start still pending at removal", "channel", string(t.channel), "turn_id", t.id, "err", err)
	}
	r.saveLog(ctx, t, "sandbox worker log before removal")
	if err := r.s.Driver.Remove(ctx, name); err != nil {
		r.s.Logger.Error("session container removal failed", "channel", string(t.channel), "turn_id", t.id, "container", name, "err", err)
	}
}

// logWorker saves the last LogLines lines of a container whose fault
// failed the turn; the container is left to the next start, which keeps
// one Docker restarted healthy.
func (r *Runtime) logWorker(t *turn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), cleanupTimeout)
	defer cancel()
	r.saveLog(ctx, t, "sandbox worker log after its container stopped serving")
}

// saveLog writes the container's last LogLines lines, scrubbed, to the
// operator log as msg.
func (r *Runtime) saveLog(ctx context.Context, t *turn, msg string) {
	lines, err := r.s.Driver.Logs(ctx, r.name(t.channel), LogLines)
	if err != nil {
		r.s.Logger.Warn("sandbox worker log unavailable", "channel", string(t.channel), "turn_id", t.id, "err", r.scrub(err.Error(), maxLogMessage))
		return
	}
	r.s.Logger.Warn(msg, "channel", string(t.channel), "turn_id", t.id, "lines", r.scrub(strings.TrimSpace(lines), maxLogLines))
}

// scrub masks text for the operator log and bounds it to limit UTF-16
// units.
func (r *Runtime) scrub(text string, limit int) string {
	return rtsandbox.PrefixUTF16(r.s.Scrub(text), limit)
}

// newTurnID returns 16 random hex digits.
func newTurnID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes instead)
	return hex.EncodeToString(b[:])
}
