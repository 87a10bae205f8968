package rtsandbox

// Outcome classes of an admitted turn, in either mode: the class of the
// turn's operator log record and the class label of the turn metrics
// (rtsandbox_turns_total{class, mode}). Each names who or what to look at;
// the error in the same record has the detail. One set for both modes, so
// a dashboard reads them alike; each runtime's classify says which of its
// errors falls in which class, and a mode may never use some of them (the
// session runtime has no ClassUpstream or ClassState).
const (
	// ClassOK: the worker replied (the reply may still be ok:false), or
	// the message held nothing to run.
	ClassOK = "ok"
	// ClassUpstream: the model endpoint failed (the broker answered 502,
	// the upstream stayed rate limited or overloaded, or its stream broke).
	ClassUpstream = "upstream"
	// ClassBudget: a call budget or a daily budget was spent, or the
	// worker's context or tool-list budget was exceeded.
	ClassBudget = "budget"
	// ClassWorker: the worker failed otherwise (ok:false, never announced
	// itself, lacks a capability the turn needs, or its container stopped
	// serving during the turn).
	ClassWorker = "worker"
	// ClassEngine: the container engine failed or the image is missing,
	// or a container may have been left behind.
	ClassEngine = "engine"
	// ClassTimeout: the turn deadline passed.
	ClassTimeout = "timeout"
	// ClassStopped: the owner's stop (or off, or fresh) ended the turn.
	ClassStopped = "stopped"
	// ClassShutdown: the runtime's Close, or the host's drain, ended the
	// turn.
	ClassShutdown = "shutdown"
	// ClassCancelled: the caller's context ended the turn.
	ClassCancelled = "cancelled"
	// ClassInvalidReply: the worker's reply or result broke a rule of the
	// protocol, or its output overflowed a limit.
	ClassInvalidReply = "invalid_reply"
	// ClassState: the channel's stored state could not be read or the
	// returned one could not be kept.
	ClassState = "state"
	// ClassDiskFull: a write failed for lack of space: the host's disk or
	// a session channel's workspace.
	ClassDiskFull = "disk_full"
	// ClassInternal: anything else.
	ClassInternal = "internal"
)
