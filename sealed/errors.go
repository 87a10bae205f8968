package sealed

import (
	"errors"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// Refusals of RunTurn. They are decided before any directory, socket or
// container exists. Test them with errors.Is; the root classes
// (rtsandbox.ErrBusy, ErrRefused, ErrInvalid) are wrapped too. The
// refusals and causes both modes share are the root's:
// rtsandbox.ErrChannelBusy, ErrChannelKey, ErrSocketPath,
// ErrRuntimeClosed, ErrTurnTimeout and ErrTurnStopped.
var (
	// ErrPrincipal refuses a speaker without the principal it was admitted as.
	ErrPrincipal = fmt.Errorf("%w: a sandbox turn needs the principal its speaker was admitted as", rtsandbox.ErrInvalid)
	// ErrTooLarge refuses text over 32,000 or a speaker field over 256
	// UTF-16 units.
	ErrTooLarge = fmt.Errorf("%w: sandbox message too large", rtsandbox.ErrInvalid)
)

// errTurnEnded cancels the turn context after every turn, success
// included, so that host-tool calls still in flight end.
var errTurnEnded = errors.New("sandbox turn ended")

// setupError wraps a setup refusal of New in rtsandbox.ErrInvalid.
func setupError(format string, args ...any) error {
	return fmt.Errorf("%w: sandbox setup: "+format, append([]any{rtsandbox.ErrInvalid}, args...)...)
}
