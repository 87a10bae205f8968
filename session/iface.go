package session

import (
	"context"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Broker is a channel's session broker (spec §2), listening on the
// channel's socket from the moment Options.NewBroker returns it.
type Broker interface {
	// Bind binds the broker to one turn; ctx is the turn's signal. It
	// fails when a turn is already bound. release revokes the binding if
	// it is still current.
	Bind(ctx context.Context, b wire.SessionBinding) (release func(), err error)
	// Execute queues the turn for the worker's long poll and returns its
	// result, or an error when ctx ends or the turn is refused (the
	// privacy capability gate).
	Execute(ctx context.Context, t wire.SessionTurn) (wire.SessionResult, error)
	// Ready reports whether the worker has announced itself
	// (POST /worker/ready) to this broker.
	Ready() bool
	// Close stops listening, force-closes the connections and ends the
	// long poll.
	Close() error
}

// Driver runs the session containers (*docker.SessionDriver).
type Driver interface {
	// Status reports the container name: missing, running or stopped,
	// with its image, profile and spec labels when known.
	Status(ctx context.Context, name string) (container.SessionStatus, error)
	// EnsureRunning keeps a running container that matches spec exactly
	// and otherwise force-removes what is there and creates and starts
	// spec. The runtime calls it on a context detached from the turn's
	// signal and removes the container after it returned when the turn
	// was aborted meanwhile; it must return only once the engine answered
	// the requests it made, and leave no container it made when ctx ends.
	EnsureRunning(ctx context.Context, spec container.SessionSpec) error
	// Remove force-removes the container name; a missing one is fine.
	Remove(ctx context.Context, name string) error
	// Logs returns the last n lines of the container's output; "" when it
	// is missing.
	Logs(ctx context.Context, name string, n int) (string, error)
	// Watch follows the running container name until ctx ends (the
	// container package's watch contract): it fails with an error
	// wrapping container.ErrSessionDown when the container does not run,
	// and its channel then receives one such error as soon as that
	// container exits, is removed, paused, stopped or restarted. A lost
	// engine connection is no fault.
	Watch(ctx context.Context, name string) (<-chan error, error)
}
