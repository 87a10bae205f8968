package sealed

import (
	"context"
	"errors"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// Outcome classes of an admitted turn: TurnStats.Class and the "class" of
// the turn's operator log record. Each names who or what to look at; the
// error in the same record has the detail.
const (
	// ClassOK: the worker replied (the reply may still be ok:false).
	ClassOK = "ok"
	// ClassUpstream: the model endpoint failed (the broker answered 502, the
	// upstream stayed rate limited or overloaded, or its stream broke).
	ClassUpstream = "upstream"
	// ClassBudget: a call budget was spent (the broker answered 429), or
	// the worker's context or tool-list budget was exceeded.
	ClassBudget = "budget"
	// ClassWorker: the worker failed otherwise; TurnStats.WorkerClass (the
	// log's worker_class) says how.
	ClassWorker = "worker"
	// ClassEngine: the container engine failed or the image is missing, or
	// a container may have been left behind (container.ErrCleanup).
	ClassEngine = "engine"
	// ClassTimeout: the turn deadline passed.
	ClassTimeout = "timeout"
	// ClassStopped: Stop ended the turn.
	ClassStopped = "stopped"
	// ClassShutdown: Close ended the turn.
	ClassShutdown = "shutdown"
	// ClassCancelled: the caller's context ended the turn.
	ClassCancelled = "cancelled"
	// ClassInvalidReply: the worker's stdout was not a valid reply, or its
	// output overflowed a limit.
	ClassInvalidReply = "invalid_reply"
	// ClassState: the channel's stored state could not be read (corrupt
	// data: memstore.ErrCorrupt) or the returned one could not be kept.
	ClassState = "state"
	// ClassDiskFull: a write failed for lack of space (ENOSPC).
	ClassDiskFull = "disk_full"
	// ClassInternal: anything else (a broker socket that would not listen,
	// a run dir that could not be made).
	ClassInternal = "internal"
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
		return ClassOK
	case errors.Is(err, container.ErrCleanup):
		return ClassEngine
	case errors.Is(err, syscall.ENOSPC):
		return ClassDiskFull
	case errors.Is(err, rtsandbox.ErrRuntimeClosed):
		return ClassShutdown
	case errors.Is(err, rtsandbox.ErrTurnStopped):
		return ClassStopped
	case errors.Is(err, rtsandbox.ErrTurnTimeout):
		return ClassTimeout
	case errors.Is(err, container.ErrAborted), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassCancelled
	case errors.Is(err, errState):
		return ClassState
	case errors.Is(err, container.ErrWorkerFailed):
		switch workerClass {
		case container.WorkerUpstreamFailed, container.WorkerModelOverloaded, container.WorkerModelStream:
			return ClassUpstream
		case container.WorkerBudgetExhausted, container.WorkerContextBudget, container.WorkerToolListBudget:
			return ClassBudget
		}
		return ClassWorker
	case errors.Is(err, container.ErrInvalidReply), errors.Is(err, container.ErrOutputLimit):
		return ClassInvalidReply
	case errors.Is(err, container.ErrEngine), errors.Is(err, container.ErrImageMissing):
		return ClassEngine
	}
	return ClassInternal
}

// endedEarly reports whether class is a turn cut short on purpose rather
// than a failure: the operator log records it at Info.
func endedEarly(class string) bool {
	return class == ClassStopped || class == ClassShutdown || class == ClassCancelled
}
