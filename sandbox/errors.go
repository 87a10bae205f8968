package sandbox

import (
	"errors"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// Refusals of RunTurn. They are decided before any directory, socket or
// container exists. Test them with errors.Is; the root classes
// (rtsandbox.ErrBusy, ErrRefused, ErrInvalid) are wrapped too.
var (
	// ErrDisposed refuses turns on a disposed runtime. It is also the cause
	// of the context of a turn that Dispose aborted.
	ErrDisposed = fmt.Errorf("%w: %w: sandbox is stopped", rtsandbox.ErrRefused, rtsandbox.ErrEndedEarly)
	// ErrChannelBusy refuses a second turn on a channel that runs one.
	ErrChannelBusy = fmt.Errorf("sandbox: %w", rtsandbox.ErrBusy)
	// ErrPrincipal refuses a speaker without the principal it was admitted as.
	ErrPrincipal = fmt.Errorf("%w: a sandbox turn needs the principal its speaker was admitted as", rtsandbox.ErrInvalid)
	// ErrTooLarge refuses text over 32,000 or a speaker field over 256
	// UTF-16 units.
	ErrTooLarge = fmt.Errorf("%w: sandbox message too large", rtsandbox.ErrInvalid)
	// ErrChannel refuses a channel key that does not match the key rule.
	ErrChannel = fmt.Errorf("%w: invalid sandbox channel key", rtsandbox.ErrInvalid)
)

// Causes of an aborted turn, wrapped (through container.ErrAborted) in the
// error RunTurn returns when the driver was cut short.
var (
	// ErrTimeout is the cause when the turn deadline passed.
	ErrTimeout = fmt.Errorf("sandbox: %w", rtsandbox.ErrTurnTimeout)
	// ErrStopped is the cause when Stop ended the turn.
	ErrStopped = fmt.Errorf("sandbox: %w", rtsandbox.ErrTurnStopped)
	// errTurnEnded cancels the turn context after every turn, success
	// included, so that host-tool calls still in flight end.
	errTurnEnded = errors.New("sandbox turn ended")
)

// ErrSocketPath fails a turn whose broker socket path would exceed the Unix
// socket limit of 100 characters.
var ErrSocketPath = fmt.Errorf("%w: sandbox broker socket path is too long", rtsandbox.ErrInvalid)

// setupError wraps a setup refusal of New in rtsandbox.ErrInvalid.
func setupError(format string, args ...any) error {
	return fmt.Errorf("%w: sandbox setup: "+format, append([]any{rtsandbox.ErrInvalid}, args...)...)
}
