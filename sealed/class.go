package sealed

import (
	"context"
	"errors"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// errState marks a failure of the state store, either way.
var errState = errors.New("sandbox state")

// classify derives a turn's class from its error and the worker's failure
// class (empty when the worker wrote none). Earlier checks win: a
// container possibly left behind needs the operator whatever else
// happened, a full disk is named as such, and an aborted turn is the
// abort's cause, never a failure of the parts it cut short.
func classify(err error, workerClass string) string {
	switch {
	case err == nil:
		return rtsandbox.ClassOK
	case errors.Is(err, container.ErrCleanup):
		return rtsandbox.ClassEngine
	case errors.Is(err, syscall.ENOSPC):
		return rtsandbox.ClassDiskFull
	case errors.Is(err, rtsandbox.ErrRuntimeClosed):
		return rtsandbox.ClassShutdown
	case errors.Is(err, rtsandbox.ErrTurnStopped):
		return rtsandbox.ClassStopped
	case errors.Is(err, rtsandbox.ErrTurnTimeout):
		return rtsandbox.ClassTimeout
	case errors.Is(err, container.ErrAborted), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return rtsandbox.ClassCancelled
	case errors.Is(err, errState):
		return rtsandbox.ClassState
	case errors.Is(err, container.ErrWorkerFailed):
		switch workerClass {
		case container.WorkerUpstreamFailed, container.WorkerModelOverloaded, container.WorkerModelStream:
			return rtsandbox.ClassUpstream
		case container.WorkerBudgetExhausted, container.WorkerContextBudget, container.WorkerToolListBudget:
			return rtsandbox.ClassBudget
		}
		return rtsandbox.ClassWorker
	case errors.Is(err, container.ErrInvalidReply), errors.Is(err, container.ErrOutputLimit):
		return rtsandbox.ClassInvalidReply
	case errors.Is(err, container.ErrEngine), errors.Is(err, container.ErrImageMissing):
		return rtsandbox.ClassEngine
	}
	return rtsandbox.ClassInternal
}

// endedEarly reports whether class is a turn cut short on purpose rather
// than a failure: the operator log records it at Info.
func endedEarly(class string) bool {
	return class == rtsandbox.ClassStopped || class == rtsandbox.ClassShutdown || class == rtsandbox.ClassCancelled
}
