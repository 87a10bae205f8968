package rtsandbox

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// Kind classifies an error by what the caller can do about it. Every error
// of this module that crosses a package boundary wraps one of the kind
// sentinels below (ErrInvalid, ErrRefused …) or is an *Error; callers test
// with errors.Is and map a kind to a status, a metric or, through
// GuestText, to the one fixed text a guest sees. Details stay in the error
// for the operator log.
type Kind int

// Error kinds. KindFailed is the zero value: anything not classified.
const (
	// KindFailed: an internal failure; the log has the details.
	KindFailed Kind = iota
	// KindInvalid: bad configuration or input, refused before any work.
	KindInvalid
	// KindRefused: refused by policy (not an owner, a locked directory).
	KindRefused
	// KindBusy: a channel already runs a turn, or the host had no free
	// turn slot for the whole queue wait.
	KindBusy
	// KindUpstream: a call to a model, tool or MCP endpoint failed.
	KindUpstream
	// KindEndedEarly: work ended on purpose before it finished (an owner's
	// stop, the host shutting down): not a failure to investigate.
	KindEndedEarly
	// KindOverBudget: a daily budget (calls, upstream tokens or turn
	// seconds of a speaker, a channel or the installation) is spent.
	KindOverBudget
	// KindStopping: the host is shutting down and takes no new work.
	KindStopping
	// KindQueueFull: a channel already holds its bound of messages.
	KindQueueFull
	// KindDiskFull: a write failed for lack of space (ENOSPC).
	KindDiskFull
	// KindWorkspaceFull: a session channel's workspace is over its disk
	// bound (session.disk), so its turn was refused before it ran.
	KindWorkspaceFull
	// KindCredential: something about to leave for a guest held a
	// credential of the host in some form, and was replaced or withheld
	// at the door (the last check before any surface).
	KindCredential
	// KindStore: a state database of the host (the usage database) could
	// not be written, and its policy (budgets.on_store_error: deny)
	// refuses new turns until it can.
	KindStore
	// KindSandboxStopped: a session turn's container stopped serving while
	// the turn ran (it exited, was removed, paused or restarted, or its
	// worker announced itself again); the channel recovers on its next
	// turn.
	KindSandboxStopped
)

// String is the kind's short text, which is also the text of its sentinel.
func (k Kind) String() string {
	switch k {
	case KindInvalid:
		return "invalid"
	case KindRefused:
		return "refused"
	case KindBusy:
		return "channel is busy"
	case KindUpstream:
		return "upstream failed"
	case KindEndedEarly:
		return "ended early"
	case KindOverBudget:
		return "daily budget exhausted"
	case KindStopping:
		return "the host is shutting down"
	case KindQueueFull:
		return "channel queue is full"
	case KindDiskFull:
		return "disk full"
	case KindWorkspaceFull:
		return "workspace over its disk bound"
	case KindCredential:
		return "credential at the door"
	case KindStore:
		return "state database unavailable"
	case KindSandboxStopped:
		return "sandbox stopped during the turn"
	}
	return "failed"
}

// Error is an error of a kind: Op names the operation that failed, Err the
// cause (either may be empty). An *Error matches its kind's sentinel under
// errors.Is, so errors.Is(err, ErrBusy) holds for &Error{Kind: KindBusy}.
type Error struct {
	Kind Kind
	Op   string
	Err  error
}

func (e *Error) Error() string {
	s := e.Kind.String()
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel of e's kind (an *Error without Op and Err).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Err == nil && t.Kind == e.Kind
}

// The kind sentinels. Wrap them with fmt.Errorf("…: %w") or build an
// *Error; test with errors.Is.
var (
	// ErrInvalid marks bad configuration or input, refused before any work.
	ErrInvalid error = &Error{Kind: KindInvalid}
	// ErrRefused marks a request refused by policy.
	ErrRefused error = &Error{Kind: KindRefused}
	// ErrBusy marks a channel that already runs a turn, or a host without
	// a free turn slot.
	ErrBusy error = &Error{Kind: KindBusy}
	// ErrUpstream marks a failed call to a model, tool or MCP endpoint.
	ErrUpstream error = &Error{Kind: KindUpstream}
	// ErrEndedEarly marks work that was ended on purpose before it
	// finished (an owner's stop, the host shutting down): not a failure
	// to investigate.
	ErrEndedEarly error = &Error{Kind: KindEndedEarly}
	// ErrOverBudget marks work refused because a daily budget is spent.
	// Guests get BudgetText; the scope and kind are for the operator only.
	ErrOverBudget error = &Error{Kind: KindOverBudget}
	// ErrStopping marks work refused because the host is shutting down.
	ErrStopping error = &Error{Kind: KindStopping}
	// ErrQueueFull marks a message beyond its channel's queue bound.
	ErrQueueFull error = &Error{Kind: KindQueueFull}
	// ErrWorkspaceFull marks a session turn refused because the channel's
	// workspace is over its disk bound. Guests get WorkspaceFullText;
	// which bound is for the operator log only.
	ErrWorkspaceFull error = &Error{Kind: KindWorkspaceFull}
	// ErrCredential marks what the door withheld because it held a
	// credential of the host in some form. Guests get the fixed failure
	// text; which credential is for the operator log only (by its config
	// key, never its value).
	ErrCredential error = &Error{Kind: KindCredential}
	// ErrStore marks a turn refused because a state database of the host
	// cannot be written (budgets.on_store_error: deny). Guests get
	// StoreText; the file is named in the operator log.
	ErrStore error = &Error{Kind: KindStore}
	// ErrSandboxStopped marks a session turn cut because its container
	// stopped serving while it ran. Guests get SandboxStoppedText; what
	// stopped it is for the operator log only.
	ErrSandboxStopped error = &Error{Kind: KindSandboxStopped}
)

// Refusals both modes' runtimes share. The texts after the kind are the
// reference's (docs/architecture.md, "The two modes").
var (
	// ErrChannelBusy refuses a turn on a channel that already runs one.
	ErrChannelBusy = fmt.Errorf("%w: Channel is busy", ErrBusy)
	// ErrChannelKey refuses a channel key that ChannelKey.Valid refuses.
	ErrChannelKey = fmt.Errorf("%w: invalid channel key", ErrInvalid)
	// ErrSocketPath refuses a broker socket path over the Unix socket
	// limit of 100 bytes.
	ErrSocketPath = fmt.Errorf("%w: Broker socket path too long", ErrInvalid)
	// ErrRuntimeClosed refuses work on a closed runtime, and is the cause
	// of the turns its Close aborted: the host is stopping, so the guest
	// is told to send the message again later.
	ErrRuntimeClosed = fmt.Errorf("%w: %w: runtime is closed", ErrStopping, ErrEndedEarly)
)

// Causes of a turn cut short, in either mode: the runtime's error wraps
// them (the sealed mode through container.ErrAborted), so the router and
// the metrics tell a deadline from a stop without knowing the mode.
var (
	// ErrTurnTimeout is the cause when the turn's deadline passed.
	ErrTurnTimeout = errors.New("turn deadline exceeded")
	// ErrTurnStopped is the cause when the owner's stop ended the turn.
	ErrTurnStopped = fmt.Errorf("%w: turn stopped", ErrEndedEarly)
)

// KindOf returns err's kind. Where err carries several (a stop during
// shutdown is refused and ended early), the one a guest is told about wins,
// in this order: credential, workspace full, disk full, stopping, queue full, over budget, store, busy,
// sandbox stopped, ended early (or a cancelled context), upstream, refused, invalid. nil and
// unclassified errors are KindFailed.
func KindOf(err error) Kind {
	switch {
	case err == nil:
		return KindFailed
	case errors.Is(err, ErrCredential):
		return KindCredential
	case errors.Is(err, ErrWorkspaceFull):
		return KindWorkspaceFull
	case errors.Is(err, syscall.ENOSPC):
		return KindDiskFull
	case errors.Is(err, ErrStopping):
		return KindStopping
	case errors.Is(err, ErrQueueFull):
		return KindQueueFull
	case errors.Is(err, ErrOverBudget):
		return KindOverBudget
	case errors.Is(err, ErrStore):
		return KindStore
	case errors.Is(err, ErrBusy):
		return KindBusy
	case errors.Is(err, ErrSandboxStopped):
		return KindSandboxStopped
	case errors.Is(err, ErrEndedEarly), errors.Is(err, context.Canceled):
		return KindEndedEarly
	case errors.Is(err, ErrUpstream):
		return KindUpstream
	case errors.Is(err, ErrRefused):
		return KindRefused
	case errors.Is(err, ErrInvalid):
		return KindInvalid
	}
	return KindFailed
}

// GuestText is the fixed text a guest sees for a sandbox turn that ended
// with err: the one table from an error kind to guest text. Everything
// without a text of its own is "failed or stopped"; the details go to the
// operator log only.
func GuestText(err error) string {
	switch KindOf(err) {
	case KindBusy:
		return BusyText
	case KindOverBudget:
		return BudgetText
	case KindStopping:
		return RestartingText
	case KindQueueFull:
		return QueueFullText
	case KindWorkspaceFull:
		return WorkspaceFullText
	case KindStore:
		return StoreText
	case KindSandboxStopped:
		return SandboxStoppedText
	}
	return TurnFailedOrStoppedText
}
