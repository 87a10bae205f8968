package sealed

import (
	"context"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// Runtime runs sealed turns: at most one per channel, any number of
// channels at once. It is safe for concurrent use.
type Runtime struct {
	s      settings
	lock   *os.File // the run root's exclusive lock, held until Close
	unlock sync.Once
	slots  *slots // host-wide admission (MaxTurns, MaxQueueWait)
	pool   *pool  // warm workers; nil when PoolSize is 0
	starts sync.Once

	mu     sync.Mutex
	closed bool
	active map[rtsandbox.ChannelKey]context.CancelCauseFunc
	fresh  generations
	turns  sync.WaitGroup // admitted turns not yet ended; Close waits
}

// New checks opts (every setup refusal the reference's runtime tests name), creates the roots
// when missing and returns a Runtime. Errors wrap rtsandbox.ErrInvalid.
func New(opts Options) (*Runtime, error) {
	s, err := check(opts)
	if err != nil {
		return nil, err
	}
	if err := s.prepareRoots(); err != nil {
		return nil, err
	}
	if err := s.preflight(); err != nil {
		return nil, err
	}
	lock, err := LockRunRoot(s.RunRoot)
	if err != nil {
		return nil, err
	}
	if err := sweepRunRoot(s.RunRoot); err != nil {
		lock.Close()
		return nil, err
	}
	r := &Runtime{
		s:      s,
		lock:   lock,
		slots:  newSlots(s.MaxTurns, s.MaxQueueWait),
		active: map[rtsandbox.ChannelKey]context.CancelCauseFunc{},
		fresh:  generations{},
	}
	if s.PoolSize > 0 {
		r.pool = newPool(&r.s, s.Driver.(container.Prestarter))
	}
	return r, nil
}

// StartPool starts filling the warm pool (Options.PoolSize) in the
// background; turns claim its workers from then on. The host calls it
// after its startup reap, which would remove them. It does nothing when
// the pool is off, after Close, or the second time.
func (r *Runtime) StartPool() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool == nil || r.closed {
		return
	}
	r.starts.Do(r.pool.start)
}

// PoolStats reports the warm pool's size and idle workers.
func (r *Runtime) PoolStats() PoolStats { return r.pool.stats() }

// RunTurn runs one guest turn in b's channel, for b's speaker, and returns
// the worker's reply. b is what the router admitted; the broker binds every
// call of the turn to it, so credential getters and host tools see the
// same channel, speaker and tier.
// The reply may have OK false (the worker gave up within its limits);
// an error means the turn was refused, failed, timed out or was stopped,
// and its text is for the operator only.
//
// Refusals (nothing created): rtsandbox.ErrChannelKey, ErrPrincipal, ErrTooLarge,
// rtsandbox.ErrRuntimeClosed, rtsandbox.ErrChannelBusy, an error wrapping rtsandbox.ErrOverBudget
// (a daily budget is spent; also returned for a worker that failed on a
// daily-budget refusal of the broker), and after waiting for a slot ErrHostBusy or
// ErrAdmissionAborted. Failures wrap the driver's container.Err* classes;
// an aborted run also wraps its cause: rtsandbox.ErrTurnTimeout, rtsandbox.ErrTurnStopped, rtsandbox.ErrRuntimeClosed
// or the caller's context error. Do not call Close from a driver or
// OnTurn: it waits for the turn that calls it.
func (r *Runtime) RunTurn(ctx context.Context, b rtsandbox.Binding, text string) (rtsandbox.Reply, error) {
	return r.RunTurnText(ctx, b, text, nil)
}

var _ rtsandbox.Runtime = (*Runtime)(nil)

// Run runs a turn of the message's input (rtsandbox.Runtime): the sealed
// worker takes no attachments, so it runs RunTurnText on in.SealedText(),
// which tells the model the message had files it cannot see. The answer
// has no files.
func (r *Runtime) Run(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, onText func(answer int, delta string)) (rtsandbox.Answer, error) {
	reply, err := r.RunTurnText(ctx, b, in.SealedText(), onText)
	return rtsandbox.Answer{Reply: reply}, err
}

// Status names the sealed mode and the channel's profile; there is no
// container to report between turns.
func (r *Runtime) Status(_ context.Context, channel rtsandbox.ChannelKey) (rtsandbox.RuntimeStatus, error) {
	st := rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSealed, Profile: DefaultProfile}
	if r.s.ProfileFor != nil {
		st.Profile = r.s.ProfileFor(channel)
	}
	return st, nil
}

// Remove has nothing to remove: a sealed turn's container and run dir are
// gone when the turn ends, and the channel's memory and history are the
// state store's (kept across off and on, as the spec wants).
func (r *Runtime) Remove(context.Context, rtsandbox.ChannelKey) error { return nil }

// RunTurnText is RunTurn that also reports the text of the turn's
// streamed model answers, as the broker relays them, to onText (see
// broker.TextFunc): answer numbers the turn's streamed answers from 1 and
// delta is their next text, already past the reflection filter. onText
// runs on a broker call's goroutine and must not block; nil reports
// nothing. It is what the router's sandbox claim uses for previews.
func (r *Runtime) RunTurnText(ctx context.Context, b rtsandbox.Binding, text string, onText func(answer int, delta string)) (rtsandbox.Reply, error) {
	channel, speaker := b.Channel, b.Speaker
	if err := checkInput(channel, speaker, text); err != nil {
		return rtsandbox.Reply{}, err
	}
	at := time.Now()
	base, end, gen, err := r.admit(ctx, channel)
	if err != nil {
		return rtsandbox.Reply{}, err
	}
	defer r.release(channel)
	settle, err := r.reserveTurn(base, channel, speaker)
	if err != nil {
		return rtsandbox.Reply{}, err
	}
	var slotted time.Time
	defer func() { settle(slotted) }()
	releaseSlot, err := r.slots.acquire(base)
	if err != nil {
		return rtsandbox.Reply{}, err
	}
	var settled <-chan struct{}
	defer func() { r.afterSettled(settled, releaseSlot) }()
	slotted = time.Now()
	// The deadline starts with the slot: waiting does not eat a turn's
	// time, and MaxQueueWait bounds the wait on its own.
	turnCtx, stopTimer := context.WithTimeoutCause(base, r.s.TurnTimeout, rtsandbox.ErrTurnTimeout)
	defer stopTimer()
	t := &turn{
		s: &r.s, pool: r.pool, ctx: turnCtx, end: end, binding: b, text: text,
		reset: gen > 0, onText: onText, stats: TurnStats{Channel: channel, Admitted: at, Slotted: time.Now()},
	}
	t.onReply = func(reply rtsandbox.Reply) {
		if reply.OK {
			r.clearFresh(channel, gen)
		}
	}
	reply, err := t.run()
	settled = t.stats.Settled
	return reply, err
}

// afterSettled frees a turn's slot, and lets the warm pool refill, once
// the turn's container is gone. An early reply's container is still being
// removed when the turn returns (container.Result.Settled): its slot keeps
// counting it, so the host never has more than pool + MaxTurns turn
// containers, and the pool's next create does not run beside that
// removal. Close waits for it as for the turn.
func (r *Runtime) afterSettled(settled <-chan struct{}, release func()) {
	done := func() {
		release()
		r.pool.poke()
	}
	if settled == nil {
		done()
		return
	}
	r.turns.Add(1) // the turn's own count is still held: Close cannot have passed its Wait
	go func() {
		defer r.turns.Done()
		<-settled
		done()
	}()
}

// checkInput applies the refusals that need no state (docs/sealed-turn.md, "The sealed turn").
func checkInput(channel rtsandbox.ChannelKey, speaker rtsandbox.Speaker, text string) error {
	if !channel.Valid() {
		return rtsandbox.ErrChannelKey
	}
	if speaker.PrincipalID == "" {
		return ErrPrincipal
	}
	if rtsandbox.UTF16Len(text) > rtsandbox.MaxTextLen || speaker.Validate() != nil {
		return ErrTooLarge
	}
	return nil
}

// admit marks channel active and snapshots its fresh-start generation in
// one critical section, so that neither a second turn nor a concurrent
// StartFresh can slip in between (docs/sealed-turn.md, "Decisions where the issue was silent"). The returned
// context is cancelled by Stop and Close, also while the turn waits
// for a slot.
func (r *Runtime) admit(ctx context.Context, channel rtsandbox.ChannelKey) (context.Context, context.CancelCauseFunc, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, 0, rtsandbox.ErrRuntimeClosed
	}
	if r.active[channel] != nil {
		return nil, nil, 0, rtsandbox.ErrChannelBusy
	}
	base, end := context.WithCancelCause(ctx)
	r.active[channel] = end
	r.turns.Add(1)
	return base, end, r.fresh[channel], nil
}

// release ends the turn: its context is cancelled even after a success, so
// host-tool callbacks still running end; then the channel is free again.
func (r *Runtime) release(channel rtsandbox.ChannelKey) {
	r.mu.Lock()
	end := r.active[channel]
	delete(r.active, channel)
	r.mu.Unlock()
	end(errTurnEnded)
	r.turns.Done()
}

// Stop aborts the channel's running turn and reports whether there was
// one. Other channels are untouched.
func (r *Runtime) Stop(channel rtsandbox.ChannelKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.active[channel]
	if end != nil {
		end(rtsandbox.ErrTurnStopped)
	}
	return end != nil
}

// Busy returns the channels with a running turn, sorted.
func (r *Runtime) Busy() []rtsandbox.ChannelKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]rtsandbox.ChannelKey, 0, len(r.active))
	for k := range r.active {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Close refuses new turns, aborts the running ones (cause
// rtsandbox.ErrRuntimeClosed) and waits until all of them have ended
// (containers removed, run dirs deleted), then removes the warm pool's
// idle workers and releases the run root. When
// ctx ends first it returns ctx's cause: the turns still end on their own,
// within their deadline, and a later Close waits for them again. It may
// be called more than once; the session runtime's Close has the same
// shape.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	for _, end := range r.active {
		end(rtsandbox.ErrRuntimeClosed)
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.turns.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	// No turn claims a worker any more: the idle ones go, with their run
	// dirs, before the run root is released.
	r.pool.close()
	// The run root may now serve another runtime.
	r.unlock.Do(func() { r.lock.Close() })
	return nil
}
