package session

import (
	"context"
	"errors"
	"sync"

	"github.com/rtsandbox/rtsandbox"
)

// Runtime runs session turns: one worker container and one broker per
// channel, at most one turn per channel, any number of channels at once.
// It is safe for concurrent use.
type Runtime struct {
	s settings

	mu      sync.Mutex
	closed  bool
	chans   map[rtsandbox.ChannelKey]*channelState
	watches map[string]*watchState // by container name (watch.go)

	watchers   sync.WaitGroup    // the watches' followers
	afterFault func(name string) // tests: a fault was handled
}

// channelState is what the runtime holds per channel (docs/architecture.md, "The two modes"). Guarded by
// Runtime.mu.
type channelState struct {
	active *activity    // the running turn or lifecycle operation
	start  *startCall   // the start in flight
	entry  *brokerEntry // the channel's broker
	level  string       // the last judged thinking level
}

// activity holds a channel: a turn (cancel set) or a lifecycle operation
// (Remove, StartFresh). done is closed when it ends. A turn's attempt and
// fault are guarded by Runtime.mu (watch.go).
type activity struct {
	cancel  context.CancelCauseFunc
	done    chan struct{}
	attempt context.CancelCauseFunc // the turn's bind and execute under way
	fault   error                   // its container's fault, heard before an attempt
}

// brokerEntry is a channel's broker and what it was made for.
type brokerEntry struct {
	profile string
	digest  string // the container spec it serves
	broker  Broker
}

// Status is what Inspect reports of a channel.
type Status struct {
	// Mode is always "session".
	Mode string
	// Profile is the channel's configured profile.
	Profile string
	// Container is container.StateMissing, StateRunning or StateStopped;
	// Image and ContainerProfile are what the engine reports ("" when
	// unknown).
	Container        string
	Image            string
	ContainerProfile string
	// Busy reports a running turn; Ready a broker whose worker announced
	// itself.
	Busy, Ready bool
	// Workspace is the workspace's use against its disk bound; nil
	// without a bound or before the channel's first turn.
	Workspace *rtsandbox.WorkspaceUsage
}

// Mode is Status.Mode.
const Mode = rtsandbox.ModeSession

// New checks opts (every setup refusal: missing parts, profiles whose
// container spec is invalid, a root worker, a party dir that is not
// private, timeouts out of range), creates the party dir when missing and
// returns a Runtime. Errors wrap rtsandbox.ErrInvalid.
func New(opts Options) (*Runtime, error) {
	s, err := check(opts)
	if err != nil {
		return nil, err
	}
	r := &Runtime{s: s, chans: map[rtsandbox.ChannelKey]*channelState{}, watches: map[string]*watchState{}}
	r.s.Driver = watchedDriver{LongLived: s.Driver, unwatch: r.unwatch}
	return r, nil
}

// state returns channel's state, creating it. r.mu must be held.
func (r *Runtime) state(channel rtsandbox.ChannelKey) *channelState {
	cs := r.chans[channel]
	if cs == nil {
		cs = &channelState{}
		r.chans[channel] = cs
	}
	return cs
}

// Stop aborts the channel's running turn, which then saves the worker's
// log and removes its container, and reports whether there was one.
func (r *Runtime) Stop(channel rtsandbox.ChannelKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := r.chans[channel]
	if cs == nil || cs.active == nil || cs.active.cancel == nil {
		return false
	}
	cs.active.cancel(rtsandbox.ErrTurnStopped)
	return true
}

// hold takes channel for a lifecycle operation: a running turn is
// stopped and waited for, and no turn is admitted until the returned
// release is called. Errors: rtsandbox.ErrRuntimeClosed, rtsandbox.ErrChannelKey, the cause of ctx.
func (r *Runtime) hold(ctx context.Context, channel rtsandbox.ChannelKey) (release func(), err error) {
	if err := checkChannel(channel); err != nil {
		return nil, err
	}
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, rtsandbox.ErrRuntimeClosed
		}
		cs := r.state(channel)
		if a := cs.active; a != nil {
			if a.cancel != nil {
				a.cancel(rtsandbox.ErrTurnStopped)
			}
			r.mu.Unlock()
			select {
			case <-a.done:
				continue
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		a := &activity{done: make(chan struct{})}
		cs.active = a
		r.mu.Unlock()
		return func() { r.end(channel, a) }, nil
	}
}

// end frees channel from a.
func (r *Runtime) end(channel rtsandbox.ChannelKey, a *activity) {
	r.mu.Lock()
	if cs := r.chans[channel]; cs != nil && cs.active == a {
		cs.active = nil
	}
	r.mu.Unlock()
	close(a.done)
}

// Remove is the reference's stop(channel) (docs/session.md, "Session runtime"), for the owner commands
// `off` and `channels off`: it stops a running turn, waits for a pending
// start, force-removes the channel's container, closes its broker,
// forgets the broker and the judged level, and unmounts the workspace's
// image (hard disk bound) once nothing runs on it.
func (r *Runtime) Remove(ctx context.Context, channel rtsandbox.ChannelKey) error {
	root, release, err := r.clear(ctx, channel)
	if err != nil {
		return err
	}
	defer release()
	return r.s.detachWorkspace(root)
}

// clear takes the channel (hold), removes its container and broker
// (teardown) and returns its root, for Remove and StartFresh; the caller
// calls release once done with the root.
func (r *Runtime) clear(ctx context.Context, channel rtsandbox.ChannelKey) (root string, release func(), err error) {
	release, err = r.hold(ctx, channel)
	if err != nil {
		return "", nil, err
	}
	if err = r.teardown(ctx, channel); err == nil {
		root, err = r.s.channelRoot(channel)
	}
	if err != nil {
		release()
		return "", nil, err
	}
	return root, release, nil
}

// teardown removes the channel's container and broker; the caller holds
// the channel.
func (r *Runtime) teardown(ctx context.Context, channel rtsandbox.ChannelKey) error {
	if err := r.waitStart(ctx, channel); err != nil {
		return err
	}
	err := r.s.Driver.Remove(ctx, r.name(channel))
	r.mu.Lock()
	cs := r.state(channel)
	entry := cs.entry
	cs.entry, cs.level = nil, ""
	r.mu.Unlock()
	if entry != nil {
		err = errors.Join(err, entry.broker.Close())
	}
	return err
}

// waitStart waits until no start of channel is in flight.
func (r *Runtime) waitStart(ctx context.Context, channel rtsandbox.ChannelKey) error {
	for {
		r.mu.Lock()
		call := r.state(channel).start
		r.mu.Unlock()
		if call == nil {
			return nil
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// name is the channel's container name.
func (r *Runtime) name(channel rtsandbox.ChannelKey) string {
	return r.s.name(channel)
}

// Status reports the channel's mode, profile, container state and
// workspace for the owner's status command (rtsandbox.Runtime).
func (r *Runtime) Status(ctx context.Context, channel rtsandbox.ChannelKey) (rtsandbox.RuntimeStatus, error) {
	st, err := r.Inspect(ctx, channel)
	if err != nil {
		// The mode and profile stand; the container is not known.
		return rtsandbox.RuntimeStatus{Mode: Mode, Profile: r.s.ProfileFor(channel)}, err
	}
	return rtsandbox.RuntimeStatus{Mode: st.Mode, Profile: st.Profile, Container: st.Container, Workspace: st.Workspace}, nil
}

// Inspect reports the channel's mode, profile and container state, with
// what the engine says of its container and whether a turn runs.
func (r *Runtime) Inspect(ctx context.Context, channel rtsandbox.ChannelKey) (Status, error) {
	if err := checkChannel(channel); err != nil {
		return Status{}, err
	}
	st, err := r.s.Driver.Status(ctx, r.name(channel))
	if err != nil {
		return Status{}, err
	}
	out := Status{
		Mode: Mode, Profile: r.s.ProfileFor(channel),
		Container: st.State, Image: st.Image, ContainerProfile: st.Profile,
	}
	// The container's state stands without the workspace's figures.
	if out.Workspace, err = r.s.workspaceUsage(channel); err != nil {
		r.s.Logger.Warn("session workspace not measured for status", "channel", string(channel), "err", err)
	}
	r.mu.Lock()
	if cs := r.chans[channel]; cs != nil {
		out.Busy = cs.active != nil && cs.active.cancel != nil
		out.Ready = cs.entry != nil && cs.entry.broker.Ready()
	}
	r.mu.Unlock()
	return out, nil
}

// Close is the reference's stopBrokers (docs/session.md, "Session runtime"), for host shutdown: it
// refuses new work, aborts every running turn (cause rtsandbox.ErrRuntimeClosed), waits
// for the turns, starts and lifecycle operations to end (at most until
// ctx ends), then ends the containers' watches and closes every broker.
// Containers keep running: they survive the host's restart. It may be
// called more than once.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	var waits []chan struct{}
	for _, cs := range r.chans {
		if a := cs.active; a != nil {
			if a.cancel != nil {
				a.cancel(rtsandbox.ErrRuntimeClosed)
			}
			waits = append(waits, a.done)
		}
		if cs.start != nil {
			waits = append(waits, cs.start.done)
		}
	}
	r.mu.Unlock()
	var err error
	for _, done := range waits {
		select {
		case <-done:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		if err != nil {
			break
		}
	}
	r.unwatchAll()
	r.mu.Lock()
	var brokers []Broker
	for _, cs := range r.chans {
		if cs.entry != nil {
			brokers = append(brokers, cs.entry.broker)
			cs.entry = nil
		}
	}
	r.mu.Unlock()
	for _, b := range brokers {
		err = errors.Join(err, b.Close())
	}
	return err
}
