package session

import (
	"context"
	"errors"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// A channel's container is watched from the start that made it run and
// its worker ready until it stops serving (Driver.Watch, the container
// package's watch contract), or until the runtime itself removes or
// replaces it. The watch does two things:
//
//   - a fault (the container exited, was removed, paused or restarted)
//     cuts the running turn's attempt at once (turn.go, execute) instead
//     of leaving the guest to wait for the turn deadline. A turn its
//     worker had taken fails with the fault; one no worker had taken yet
//     (the fault raced the turn's start) runs once more on a worker
//     started anew. The container is left to the start, which keeps one
//     that Docker restarted and recreates one gone, stopped or paused;
//   - while it holds, a warm turn's start needs no engine call: the
//     broker's readiness and the watch together say that the worker runs.

// watchState is a channel's watch on its container.
type watchState struct {
	channel rtsandbox.ChannelKey
	digest  string // the spec the container was started from
	cancel  context.CancelFunc
}

// watching reports whether channel's container is watched, with no fault
// since, and runs spec digest.
func (r *Runtime) watching(channel rtsandbox.ChannelKey, digest string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.watches[r.name(channel)]
	return w != nil && w.digest == digest
}

// startWatch watches channel's container name, which the start just found
// running with a ready worker. A container that is down already fails the
// start (ErrSessionDown); an engine that cannot watch leaves the channel
// unwatched (its turns then start by asking the engine, and wait for the
// deadline when the worker dies), with an operator line.
func (r *Runtime) startWatch(ctx context.Context, channel rtsandbox.ChannelKey, name, digest string) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	faults, err := r.s.Driver.Watch(wctx, name)
	if err != nil {
		cancel()
		if errors.Is(err, container.ErrSessionDown) {
			return err
		}
		r.s.Logger.Warn("session container not watched", "channel", string(channel), "container", name, "err", err)
		return nil
	}
	w := &watchState{channel: channel, digest: digest, cancel: cancel}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		return rtsandbox.ErrRuntimeClosed
	}
	if old := r.watches[name]; old != nil {
		old.cancel()
	}
	r.watches[name] = w
	r.watchers.Go(func() { r.follow(wctx, name, w, faults) })
	r.mu.Unlock()
	return nil
}

// follow waits for w's fault and cuts the channel's running turn with it.
// A watch ended first (unwatch, Close) does nothing.
func (r *Runtime) follow(ctx context.Context, name string, w *watchState, faults <-chan error) {
	var fault error
	select {
	case <-ctx.Done():
		return
	case fault = <-faults:
	}
	r.mu.Lock()
	if r.watches[name] != w {
		r.mu.Unlock()
		return
	}
	delete(r.watches, name)
	var cut context.CancelCauseFunc
	turn := false
	if cs := r.chans[w.channel]; cs != nil && cs.active != nil && cs.active.cancel != nil {
		turn = true
		if cut = cs.active.attempt; cut == nil {
			cs.active.fault = fault // the turn's attempt, when it comes, starts the worker again
		}
	}
	r.mu.Unlock()
	w.cancel()
	r.s.Logger.Warn("session container stopped serving", "channel", string(w.channel), "container", name,
		"err", r.scrub(fault.Error(), maxLogMessage), "turn_running", turn)
	if cut != nil {
		cut(fault)
	}
	if r.afterFault != nil {
		r.afterFault(name)
	}
}

// unwatch ends the watch of the container name, before the runtime
// removes or replaces it: its own removal is no fault.
func (r *Runtime) unwatch(name string) {
	r.mu.Lock()
	w := r.watches[name]
	delete(r.watches, name)
	r.mu.Unlock()
	if w != nil {
		w.cancel()
	}
}

// unwatchAll ends every watch (Close) and waits for their followers.
func (r *Runtime) unwatchAll() {
	r.mu.Lock()
	for name, w := range r.watches {
		w.cancel()
		delete(r.watches, name)
	}
	r.mu.Unlock()
	r.watchers.Wait()
}

// watchedDriver is the runtime's engine: every removal or replacement of
// a container the runtime asks for first ends that container's watch,
// wherever in the package it is asked for.
type watchedDriver struct {
	container.LongLived
	unwatch func(name string)
}

func (d watchedDriver) EnsureRunning(ctx context.Context, spec container.SessionSpec) error {
	d.unwatch(spec.Name)
	return d.LongLived.EnsureRunning(ctx, spec)
}

func (d watchedDriver) Remove(ctx context.Context, name string) error {
	d.unwatch(name)
	return d.LongLived.Remove(ctx, name)
}

// beginAttempt registers cut as the turn's attempt, which a fault of the
// channel's container cuts; it returns the fault heard since the turn
// began instead, if any (and forgets it).
func (r *Runtime) beginAttempt(t *turn, cut context.CancelCauseFunc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fault := t.act.fault; fault != nil {
		t.act.fault = nil
		return fault
	}
	t.act.attempt = cut
	return nil
}

// endAttempt ends the turn's attempt: a later fault cuts nothing.
func (r *Runtime) endAttempt(t *turn) {
	r.mu.Lock()
	t.act.attempt = nil
	r.mu.Unlock()
}
