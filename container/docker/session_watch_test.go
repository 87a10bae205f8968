package docker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// watchEngine scripts what a watch sees: the container's inspect (id,
// start, state) and one event stream per subscription, which the test
// feeds or ends.
type watchEngine struct {
	*fakeSessionEngine
	mu      sync.Mutex
	state   *container.State // nil: the container is missing
	id      string
	streams chan watchStream // each subscription, as it is made
}

// watchStream is one subscription: feed its messages, end it with err.
type watchStream struct {
	opts client.EventsListOptions
	msgs chan events.Message
	errs chan error
}

func newWatchEngine() *watchEngine {
	return &watchEngine{
		fakeSessionEngine: newFakeSessionEngine(), id: "c1", streams: make(chan watchStream, 4),
		state: &container.State{Status: "running", Running: true, StartedAt: "2026-12-04T16:00:00.5Z"},
	}
}

func (e *watchEngine) set(id string, s *container.State) {
	e.mu.Lock()
	e.id, e.state = id, s
	e.mu.Unlock()
}

func (e *watchEngine) ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == nil {
		return client.ContainerInspectResult{}, errNotFound
	}
	s := *e.state
	return client.ContainerInspectResult{Container: container.InspectResponse{ID: e.id, State: &s}}, nil
}

func (e *watchEngine) Events(ctx context.Context, o client.EventsListOptions) client.EventsResult {
	s := watchStream{opts: o, msgs: make(chan events.Message), errs: make(chan error, 1)}
	e.streams <- s
	return client.EventsResult{Messages: s.msgs, Err: s.errs}
}

// TestSessionWatchFaults (issue 22 item 1): the watch refuses a container
// that is missing, stopped, paused or restarting; it follows the events
// of its container's id from its start (a fault between inspect and
// subscription is replayed) and reports the first fault, ignoring other
// containers; an engine that ends the stream is no fault: the watch
// reconnects after watchRetry, and only a container gone, stopped or
// started anew meanwhile is reported.
func TestSessionWatchFaults(t *testing.T) {
	die := func(id string) events.Message {
		return events.Message{Type: events.ContainerEventType, Action: events.ActionDie, Actor: events.Actor{ID: id}}
	}
	t.Run("refused", func(t *testing.T) {
		for _, s := range []*container.State{nil, {Status: "exited"}, {Status: "paused", Running: true, Paused: true},
			{Status: "restarting", Running: true, Restarting: true}} {
			e := newWatchEngine()
			e.set("c1", s)
			if _, err := newSessionDriver(e).Watch(context.Background(), "w"); !errors.Is(err, rtcontainer.ErrSessionDown) {
				t.Errorf("Watch of %+v = %v; want ErrSessionDown", s, err)
			}
		}
	})
	t.Run("event", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newWatchEngine()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			faults, err := newSessionDriver(e).Watch(ctx, "w")
			if err != nil {
				t.Fatal(err)
			}
			s := <-e.streams
			if s.opts.Since != "1796400000.500000000" || !s.opts.Filters["container"]["c1"] || !s.opts.Filters["event"]["pause"] {
				t.Errorf("subscription %+v; want c1's fault events since its start", s.opts)
			}
			s.msgs <- die("other") // another container: ignored
			s.msgs <- die("c1")
			if err := <-faults; !errors.Is(err, rtcontainer.ErrSessionDown) || !strings.Contains(err.Error(), "die") {
				t.Errorf("fault = %v", err)
			}
		})
	})
	for _, tt := range []struct {
		name  string
		id    string
		state *container.State
		want  string // "" for no fault: the watch goes on
	}{
		{"outage, same container", "c1", &container.State{Status: "running", Running: true, StartedAt: "2026-12-04T16:00:00.5Z"}, ""},
		{"outage, restarted", "c1", &container.State{Status: "running", Running: true, StartedAt: "2026-12-04T16:05:00Z"}, "started anew"},
		{"outage, replaced", "c2", &container.State{Status: "running", Running: true, StartedAt: "2026-12-04T16:00:00.5Z"}, "started anew"},
		{"outage, removed", "", nil, "missing"},
		{"outage, exited", "c1", &container.State{Status: "exited"}, "exited"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newWatchEngine()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				faults, err := newSessionDriver(e).Watch(ctx, "w")
				if err != nil {
					t.Fatal(err)
				}
				s := <-e.streams
				e.set(tt.id, tt.state)
				began := time.Now()
				s.errs <- errors.New("unexpected EOF") // the daemon went away
				if tt.want != "" {
					err := <-faults
					if !errors.Is(err, rtcontainer.ErrSessionDown) || !strings.Contains(err.Error(), tt.want) {
						t.Errorf("fault = %v; want ErrSessionDown, %q", err, tt.want)
					}
					if waited := time.Since(began); waited != watchRetry {
						t.Errorf("reconnected after %v; want %v", waited, watchRetry)
					}
					return
				}
				s2 := <-e.streams // reconnected, no fault
				synctest.Wait()
				select {
				case err := <-faults:
					t.Fatalf("fault %v after an outage of the engine only", err)
				default:
				}
				s2.msgs <- die("c1")
				if err := <-faults; !errors.Is(err, rtcontainer.ErrSessionDown) {
					t.Errorf("fault after the reconnect = %v", err)
				}
			})
		})
	}
}

// TestSessionStatusNotServing (issue 22): Status calls a paused container
// stopped (Docker reports it running); a container Docker is restarting
// is waited for on the engine's events: running once it started again,
// stopped when it did not within restartWait.
func TestSessionStatusNotServing(t *testing.T) {
	running := &container.State{Status: "running", Running: true, StartedAt: "2026-12-04T16:05:00Z"}
	restarting := &container.State{Status: "restarting", Running: true, Restarting: true, FinishedAt: "2026-12-04T16:04:59Z"}
	t.Run("paused", func(t *testing.T) {
		e := newWatchEngine()
		e.set("c1", &container.State{Status: "paused", Running: true, Paused: true})
		if st, err := newSessionDriver(e).Status(context.Background(), "w"); err != nil || st.State != rtcontainer.StateStopped {
			t.Errorf("Status = %+v, %v; want stopped", st, err)
		}
	})
	t.Run("restarted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newWatchEngine()
			e.set("c1", restarting)
			got := make(chan rtcontainer.SessionStatus, 1)
			go func() {
				st, _ := newSessionDriver(e).Status(context.Background(), "w")
				got <- st
			}()
			s := <-e.streams
			if s.opts.Since != "1796400299.000000000" || !s.opts.Filters["event"]["start"] {
				t.Errorf("subscription %+v; want c1's start since its exit", s.opts)
			}
			e.set("c1", running)
			s.msgs <- events.Message{Type: events.ContainerEventType, Action: events.ActionStart, Actor: events.Actor{ID: "c1"}}
			if st := <-got; st.State != rtcontainer.StateRunning {
				t.Errorf("Status = %+v; want running after the restart", st)
			}
		})
	})
	t.Run("restart too slow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newWatchEngine()
			e.set("c1", restarting)
			began := time.Now()
			st, err := newSessionDriver(e).Status(context.Background(), "w")
			if err != nil || st.State != rtcontainer.StateStopped || time.Since(began) != restartWait {
				t.Errorf("Status = %+v, %v after %v; want stopped after %v", st, err, time.Since(began), restartWait)
			}
		})
	})
}
