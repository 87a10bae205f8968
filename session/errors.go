package session

import (
	"errors"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// Refusals and failures of the runtime. Test them with errors.Is; the
// root kinds (rtsandbox.ErrBusy, ErrInvalid, ErrEndedEarly …) are wrapped
// too. The texts after the kind are the reference's (docs/architecture.md, "The two modes").
// The refusals and causes both modes share are the root's:
// rtsandbox.ErrChannelBusy, ErrChannelKey, rtsandbox.ErrSocketPath,
// ErrRuntimeClosed, ErrTurnTimeout (the deadline passed) and
// ErrTurnStopped (Stop, Remove or StartFresh ended the turn).
var (
	// ErrUnknownProfile refuses a channel whose profile is not configured.
	ErrUnknownProfile = fmt.Errorf("%w: Unknown profile", rtsandbox.ErrInvalid)
	// ErrMemoryTooLarge fails a turn whose memory block is over 100,000
	// UTF-16 units.
	ErrMemoryTooLarge = fmt.Errorf("%w: Memory context too large", rtsandbox.ErrInvalid)
	// ErrNotReady fails a start whose worker did not announce itself
	// (POST /worker/ready) within the start timeout.
	ErrNotReady error = textError("Worker did not become ready")
	// ErrWorkerFailed marks a worker that reported ok:false; its
	// container is kept.
	ErrWorkerFailed error = textError("Worker turn failed")
	// ErrSymlink refuses a channel directory that is, or lies under, a
	// symbolic link.
	ErrSymlink = fmt.Errorf("%w: Channel directory symlinks refused", rtsandbox.ErrRefused)
	// ErrRootSymlink refuses a channel root that is a symbolic link.
	ErrRootSymlink = fmt.Errorf("%w: Channel root symlink refused", rtsandbox.ErrRefused)
	// ErrAlias refuses a channel whose directory segment belongs to
	// another channel key (.channel-key).
	ErrAlias = fmt.Errorf("%w: Channel workspace alias refused", rtsandbox.ErrRefused)
)

// errTurnEnded cancels every turn's context when it ends, success
// included, so that broker calls still in flight end.
var errTurnEnded = errors.New("session turn ended")

// The texts of a failed turn (docs/architecture.md, "The request path").
const (
	timedOutText   = "Sandbox turn timed out"
	turnFailedText = "Sandbox turn failed: "
)

// turnError is what a failed turn returns: its text is exactly the
// reference's, and it wraps the original error and, for an aborted turn,
// the abort's cause.
type turnError struct {
	msg  string
	errs []error
}

func (e *turnError) Error() string   { return e.msg }
func (e *turnError) Unwrap() []error { return e.errs }

// textError is an error whose text is a reference text that starts with
// a capital letter.
type textError string

func (e textError) Error() string { return string(e) }

// setupError wraps a refusal of New in rtsandbox.ErrInvalid.
func setupError(format string, args ...any) error {
	return fmt.Errorf("%w: session setup: "+format, append([]any{rtsandbox.ErrInvalid}, args...)...)
}
