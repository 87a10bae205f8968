package session

import (
	"context"

	"github.com/rtsandbox/rtsandbox/wire"
)

// Broker is a channel's session broker (docs/protocol.md, "The session protocol"), listening on the
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
