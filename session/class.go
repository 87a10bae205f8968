package session

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Classes lists every class, in the order above; a new slice on every
// call.
func Classes() []string {
	return []string{rtsandbox.ClassOK, rtsandbox.ClassBudget, rtsandbox.ClassWorker, rtsandbox.ClassEngine, rtsandbox.ClassTimeout, rtsandbox.ClassStopped,
		rtsandbox.ClassShutdown, rtsandbox.ClassCancelled, rtsandbox.ClassInvalidReply, rtsandbox.ClassDiskFull, rtsandbox.ClassInternal}
}

// TurnStats is what the runtime reports of one admitted turn
// (Options.OnTurn): a turn refused before admission (busy channel,
// invalid key, closed runtime) has none.
type TurnStats struct {
	Channel  rtsandbox.ChannelKey
	Admitted time.Time // the channel was taken for the turn
	Ended    time.Time // the turn returned, its channel free again
	Err      error     // what Turn returned; nil on a result
	Class    string    // from Err (classify)
}

// classify derives a turn's class from its error. Earlier checks win, as
// in the sealed runtime: a container possibly left behind needs the
// operator whatever else happened, a full disk is named as such, and an
// aborted turn is its abort's cause (failed wraps it), never a failure
// of the parts it cut short.
func classify(err error) string {
	switch {
	case err == nil:
		return rtsandbox.ClassOK
	case errors.Is(err, container.ErrCleanup):
		return rtsandbox.ClassEngine
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, rtsandbox.ErrWorkspaceFull):
		return rtsandbox.ClassDiskFull
	case errors.Is(err, rtsandbox.ErrRuntimeClosed), errors.Is(err, rtsandbox.ErrStopping):
		return rtsandbox.ClassShutdown // the runtime's Close, or the host's drain cutting the turn
	case errors.Is(err, rtsandbox.ErrTurnStopped):
		return rtsandbox.ClassStopped
	case errors.Is(err, rtsandbox.ErrTurnTimeout):
		return rtsandbox.ClassTimeout
	case errors.Is(err, rtsandbox.ErrSandboxStopped):
		return rtsandbox.ClassWorker // its container's fault cut the turn, whatever the broker's wait then said
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return rtsandbox.ClassCancelled
	case errors.Is(err, rtsandbox.ErrOverBudget):
		return rtsandbox.ClassBudget
	case errors.Is(err, ErrSymlink), errors.Is(err, ErrRootSymlink), errors.Is(err, ErrAlias), errors.Is(err, ErrDiskMount):
		return rtsandbox.ClassInternal // the channel's directory refused, before any worker ran
	case errors.Is(err, ErrWorkerFailed), errors.Is(err, ErrNotReady), errors.Is(err, rtsandbox.ErrRefused):
		return rtsandbox.ClassWorker
	case errors.Is(err, container.ErrEngine), errors.Is(err, container.ErrImageMissing):
		return rtsandbox.ClassEngine
	case errors.Is(err, wire.ErrInvalidReply):
		return rtsandbox.ClassInvalidReply
	}
	return rtsandbox.ClassInternal
}

// report hands an admitted turn's stats to Options.OnTurn.
func (r *Runtime) report(t *turn, admitted time.Time, err error) {
	if r.s.OnTurn == nil {
		return
	}
	r.s.OnTurn(TurnStats{Channel: t.channel, Admitted: admitted, Ended: time.Now(), Err: err, Class: classify(err)})
}

// Active returns the number of turns admitted and not yet ended (the
// turn metrics' active gauge); a channel held for stop, off or fresh is
// not a turn.
func (r *Runtime) Active() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, cs := range r.chans {
		if cs.active != nil && cs.active.cancel != nil {
			n++
		}
	}
	return n
}
