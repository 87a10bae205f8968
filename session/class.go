package session

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// Outcome classes of an admitted session turn: TurnStats.Class, and the
// class label of the turn metrics with mode="session". They are the
// sealed runtime's words (package sealed's Class*) for the same
// outcomes, so a dashboard reads both modes alike.
const (
	// ClassOK: the worker answered, or the message held nothing to run.
	ClassOK = "ok"
	// ClassBudget: the turn ended after a daily budget refused a call.
	ClassBudget = "budget"
	// ClassWorker: the worker failed (ok:false), never announced itself,
	// lacks a privacy capability the turn needs (the broker's refusal,
	// rtsandbox.ErrRefused), or its container stopped serving during the
	// turn (rtsandbox.ErrSandboxStopped).
	ClassWorker = "worker"
	// ClassEngine: the container engine failed or the image is missing,
	// or a container may have been left behind.
	ClassEngine = "engine"
	// ClassTimeout: the turn deadline passed.
	ClassTimeout = "timeout"
	// ClassStopped: stop, off or fresh ended the turn.
	ClassStopped = "stopped"
	// ClassShutdown: the runtime's Close, or the host's drain
	// (rtsandbox.ErrStopping as the caller's cause), ended the turn.
	ClassShutdown = "shutdown"
	// ClassCancelled: the caller's context ended the turn.
	ClassCancelled = "cancelled"
	// ClassInvalidReply: the worker's result broke a rule of the
	// protocol.
	ClassInvalidReply = "invalid_reply"
	// ClassDiskFull: the channel's workspace or the host's disk is full.
	ClassDiskFull = "disk_full"
	// ClassInternal: anything else.
	ClassInternal = "internal"
)

// Classes lists every class, in the order above; a new slice on every
// call.
func Classes() []string {
	return []string{ClassOK, ClassBudget, ClassWorker, ClassEngine, ClassTimeout, ClassStopped,
		ClassShutdown, ClassCancelled, ClassInvalidReply, ClassDiskFull, ClassInternal}
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
		return ClassOK
	case errors.Is(err, container.ErrCleanup):
		return ClassEngine
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, rtsandbox.ErrWorkspaceFull):
		return ClassDiskFull
	case errors.Is(err, rtsandbox.ErrRuntimeClosed), errors.Is(err, rtsandbox.ErrStopping):
		return ClassShutdown // the runtime's Close, or the host's drain cutting the turn
	case errors.Is(err, rtsandbox.ErrTurnStopped):
		return ClassStopped
	case errors.Is(err, rtsandbox.ErrTurnTimeout):
		return ClassTimeout
	case errors.Is(err, rtsandbox.ErrSandboxStopped):
		return ClassWorker // its container's fault cut the turn, whatever the broker's wait then said
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassCancelled
	case errors.Is(err, rtsandbox.ErrOverBudget):
		return ClassBudget
	case errors.Is(err, ErrSymlink), errors.Is(err, ErrRootSymlink), errors.Is(err, ErrAlias), errors.Is(err, ErrDiskMount):
		return ClassInternal // the channel's directory refused, before any worker ran
	case errors.Is(err, ErrWorkerFailed), errors.Is(err, ErrNotReady), errors.Is(err, rtsandbox.ErrRefused):
		return ClassWorker
	case errors.Is(err, container.ErrEngine), errors.Is(err, container.ErrImageMissing):
		return ClassEngine
	case errors.Is(err, rtsandbox.ErrInvalidReply):
		return ClassInvalidReply
	}
	return ClassInternal
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
