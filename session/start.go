package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// startCall is a start in flight; err is set before done is closed.
type startCall struct {
	profile string
	done    chan struct{}
	err     error
}

// start makes sure channel's worker runs under profile with a ready
// broker (docs/session.md, "Session runtime" start). Starts are deduplicated: when one is in flight,
// start waits for it and returns if it succeeded with the same profile;
// otherwise it starts again. ctx (the turn's signal) cancels the wait,
// the engine calls and the readiness poll.
func (r *Runtime) start(ctx context.Context, channel rtsandbox.ChannelKey, profile string) error {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return rtsandbox.ErrRuntimeClosed
		}
		cs := r.state(channel)
		if p := cs.start; p != nil {
			r.mu.Unlock()
			select {
			case <-p.done:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if p.err == nil && p.profile == profile {
				return nil
			}
			continue
		}
		call := &startCall{profile: profile, done: make(chan struct{})}
		cs.start = call
		r.mu.Unlock()
		call.err = r.startOnce(ctx, channel, profile)
		r.mu.Lock()
		cs.start = nil
		r.mu.Unlock()
		close(call.done)
		return call.err
	}
}

// startOnce is one start: directories; nothing more for a warm channel
// (its container watched since a start from the same spec, its worker
// ready); otherwise the recreate decision, a new broker when needed, the
// container, the worker's readiness and a new watch of the container.
func (r *Runtime) startOnce(ctx context.Context, channel rtsandbox.ChannelKey, profile string) error {
	p, ok := r.s.Profiles[profile]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownProfile, profile)
	}
	d, err := r.s.prepare(ctx, channel)
	if err != nil {
		return err
	}
	spec := r.s.spec(channel, profile, p, d)
	if err := spec.Validate(); err != nil {
		return err
	}
	if r.warm(channel, profile, spec.Digest()) {
		return nil
	}
	st, err := r.s.Driver.Status(ctx, spec.Name)
	if err != nil {
		return err
	}
	recreate := st.Stale(spec)
	broker, removed, err := r.broker(ctx, channel, profile, spec.Digest(), d, recreate)
	if err != nil {
		return err
	}
	if !st.Current(spec) { // EnsureRunning creates the container
		if removed {
			st.State = container.StateMissing
		}
		if err := r.prepareSkills(ctx, spec.Name, st, p, d); err != nil {
			return err
		}
	}
	if err := r.ensureRunning(ctx, spec); err != nil {
		return err
	}
	if err := r.awaitReady(ctx, broker); err != nil {
		return err
	}
	return r.startWatch(ctx, channel, spec.Name, spec.Digest())
}

// warm reports whether channel's start has nothing to do and needs no
// engine call: its container is watched with no fault since it was
// started from this spec, and the channel's broker, made for this
// profile and spec, has a ready worker.
func (r *Runtime) warm(channel rtsandbox.ChannelKey, profile, digest string) bool {
	if !r.watching(channel, digest) {
		return false
	}
	r.mu.Lock()
	e := r.state(channel).entry
	r.mu.Unlock()
	return e != nil && e.profile == profile && e.digest == digest && e.broker.Ready()
}

// ensureRunning runs the driver's EnsureRunning to its end whatever the
// turn's signal says, within cleanupTimeout: the engine finishes a create
// whose caller went away, so an aborted turn whose removal ran while the
// create was still under way would find nothing to remove and leave the
// container behind. When the signal ended meanwhile, the start fails with
// its cause and the aborted turn removes the container (docs/architecture.md, "The request path"),
// which the create has then made if it was going to.
func (r *Runtime) ensureRunning(ctx context.Context, spec container.SessionSpec) error {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := r.s.Driver.EnsureRunning(ectx, spec)
	if ctx.Err() != nil {
		return errors.Join(context.Cause(ctx), err)
	}
	return err
}

// broker returns the channel's broker for profile, replacing the current
// one when there is none, it serves another profile or container spec, or
// the container must be recreated (docs/session.md, "Session runtime" "New broker"): the old container
// is removed first (when there was a broker and recreate holds; removed
// reports it), the old broker is closed, a stale socket file removed and
// the new broker made.
func (r *Runtime) broker(ctx context.Context, channel rtsandbox.ChannelKey, profile, digest string, d dirs, recreate bool) (b Broker, removed bool, err error) {
	r.mu.Lock()
	cs := r.state(channel)
	old := cs.entry
	r.mu.Unlock()
	if old != nil && old.profile == profile && old.digest == digest && !recreate {
		return old.broker, false, nil
	}
	sock := d.socket()
	if len(sock) > maxSocketPath {
		return nil, false, fmt.Errorf("%w: %s", rtsandbox.ErrSocketPath, sock)
	}
	if old != nil {
		if recreate {
			if err := r.s.Driver.Remove(ctx, r.name(channel)); err != nil {
				return nil, false, err
			}
			removed = true
		}
		r.mu.Lock()
		cs.entry = nil
		r.mu.Unlock()
		if err := old.broker.Close(); err != nil {
			r.s.Logger.Warn("session broker close failed", "channel", string(channel), "err", err)
		}
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, removed, fmt.Errorf("remove stale broker socket: %w", err)
	}
	b, err = r.s.NewBroker(channel, profile, sock)
	if err != nil {
		return nil, removed, fmt.Errorf("session broker: %w", err)
	}
	if err := r.s.handOver(sock); err != nil {
		return nil, removed, errors.Join(err, b.Close())
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, removed, errors.Join(rtsandbox.ErrRuntimeClosed, b.Close())
	}
	cs.entry = &brokerEntry{profile: profile, digest: digest, broker: b}
	r.mu.Unlock()
	return b, removed, nil
}

// awaitReady polls the broker every ReadyPoll until the worker announced
// itself, ctx ends or StartTimeout passes (ErrNotReady).
func (r *Runtime) awaitReady(ctx context.Context, b Broker) error {
	if b.Ready() {
		return nil
	}
	timeout := time.NewTimer(r.s.StartTimeout)
	defer timeout.Stop()
	tick := time.NewTicker(ReadyPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-timeout.C:
			return ErrNotReady
		case <-tick.C:
			if b.Ready() {
				return nil
			}
		}
	}
}
