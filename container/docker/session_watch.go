package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// watchRetry is the pause before a watch reconnects to an engine that
// ended its event stream (a restarting or unreachable daemon).
const watchRetry = time.Second

// restartWait bounds how long Status waits for Docker to restart a
// container whose process exited: the restart policy's first delay is
// 100 ms, doubling while the container keeps dying within 10 s of its
// start, so a worker crashing in a loop is not waited for.
const restartWait = 2 * time.Second

// awaitRestart waits, at most restartWait, for the container id, which
// Docker is restarting after an exit at finishedAt, to start again (or to
// die or go): the engine's events since the exit, so a start between the
// inspect and the subscription is replayed.
func (d *SessionDriver) awaitRestart(ctx context.Context, id, finishedAt string) {
	ctx, cancel := context.WithTimeout(ctx, restartWait)
	defer cancel()
	filters := client.Filters{}.Add("type", string(events.ContainerEventType)).Add("container", id).
		Add("event", string(events.ActionStart), string(events.ActionDestroy))
	res := d.api.Events(ctx, client.EventsListOptions{Since: eventsSince(finishedAt), Filters: filters})
	for {
		select {
		case m := <-res.Messages:
			if m.Actor.ID == id {
				return
			}
		case <-res.Err:
			return
		case <-ctx.Done():
			return
		}
	}
}

// eventsSince is an engine timestamp (RFC 3339) as an events "since"
// (seconds.nanoseconds); "" when it does not parse.
func eventsSince(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// faultActions are the events of a watched container that end its
// service. A kill is not one (the process may ignore the signal); the
// die that follows a fatal one is. An OOM event is not either: the
// kernel may have killed another process than the worker. Nor is a
// restart: every restart of a running container begins with its die, and
// the restart event itself comes after the new start, so a watch of the
// restarted container would take it for a fault of its own.
var faultActions = []events.Action{events.ActionDie, events.ActionDestroy, events.ActionPause, events.ActionStop}

// watched is the container a watch follows: its id and the start its
// process runs since.
type watched struct {
	name, id  string
	startedAt string // as the engine reports it
	since     string // startedAt as an events "since" (seconds.nanoseconds)
}

// Watch follows the running container name (the rtcontainer watch
// contract): it inspects it (ErrSessionDown unless it runs, not paused or
// restarting; ErrEngine), then follows the engine's events of that
// container id from its start on, so a fault between the inspect and the
// subscription is replayed, not missed. The channel gets one error
// wrapping ErrSessionDown at the first die, destroy, pause or stop (a
// restart begins with a die). When the engine ends the stream, the watch reconnects every
// watchRetry until ctx ends and inspects again: a container gone, not
// running or started anew meanwhile is a fault too.
func (d *SessionDriver) Watch(ctx context.Context, name string) (<-chan error, error) {
	c, err := d.watchable(ctx, name)
	if err != nil {
		return nil, err
	}
	faults := make(chan error, 1)
	go d.follow(ctx, c, faults)
	return faults, nil
}

// watchable inspects name and returns it when it runs.
func (d *SessionDriver) watchable(ctx context.Context, name string) (watched, error) {
	ictx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	res, err := d.api.ContainerInspect(ictx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return watched{}, fmt.Errorf("%w: %s is missing", rtcontainer.ErrSessionDown, name)
	}
	if err != nil {
		return watched{}, engineErr("inspect "+name, err)
	}
	s := res.Container.State
	if !serving(s) {
		status := "unknown"
		if s != nil {
			status = string(s.Status)
		}
		return watched{}, fmt.Errorf("%w: %s is %s", rtcontainer.ErrSessionDown, name, status)
	}
	return watched{name: name, id: res.Container.ID, startedAt: s.StartedAt, since: eventsSince(s.StartedAt)}, nil
}

// serving reports whether a container's process runs and can answer:
// Docker reports a paused container, and one it is restarting, as
// running too.
func serving(s *container.State) bool {
	return s != nil && s.Running && !s.Paused && !s.Restarting
}

// follow sends c's first fault to faults, reconnecting when the engine
// ends the stream; it returns when ctx ends or after the fault.
func (d *SessionDriver) follow(ctx context.Context, c watched, faults chan<- error) {
	for {
		fault, err := d.stream(ctx, c)
		if fault != nil {
			faults <- fault
			return
		}
		if ctx.Err() != nil {
			return
		}
		_ = err // the engine ended the stream: not the container's fault
		t := time.NewTimer(watchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now, err := d.watchable(ctx, c.name)
		switch {
		case errors.Is(err, rtcontainer.ErrSessionDown):
			faults <- err
			return
		case err != nil:
			continue // still out of reach: the stream's own error says when it answers
		case now.id != c.id || now.startedAt != c.startedAt:
			faults <- fmt.Errorf("%w: %s started anew while the engine was out of reach", rtcontainer.ErrSessionDown, c.name)
			return
		}
	}
}

// stream follows c's fault events until the first (returned as a fault),
// ctx's end (nil, nil) or the stream's end (its error).
func (d *SessionDriver) stream(ctx context.Context, c watched) (fault, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	filters := client.Filters{}.Add("type", string(events.ContainerEventType)).Add("container", c.id)
	for _, a := range faultActions {
		filters = filters.Add("event", string(a))
	}
	res := d.api.Events(sctx, client.EventsListOptions{Since: c.since, Filters: filters})
	for {
		select {
		case m := <-res.Messages:
			if m.Actor.ID != c.id || !slices.Contains(faultActions, m.Action) {
				continue // the daemon filtered already; a filter bug must not end a healthy turn
			}
			return fmt.Errorf("%w: %s: %s", rtcontainer.ErrSessionDown, c.name, m.Action), nil
		case err, ok := <-res.Err:
			if !ok || err == nil {
				err = io.EOF
			}
			return nil, err
		case <-ctx.Done():
			return nil, nil
		}
	}
}
