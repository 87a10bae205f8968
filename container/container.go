// Package container defines the sealed hardening profile of one turn's
// container (Spec), the Driver interface a sealed runtime uses to run a worker
// under it, and the validation of the worker's reply.
//
// The contract every Driver keeps: it runs exactly the profile described by a
// validated Spec (no network, read-only root, no capabilities, a non-root
// user, two dedicated bind mounts, bounded resources), it never pulls an
// image, it reads the reply only from the container's stdout, and it never
// forgets a container: when Run returns, the container is gone, or it is
// queued for removal by the driver (Result.CleanupPending), which retries
// until the engine confirms it gone, or Run fails with ErrCleanup.
//
// Run keeps the context's deadline: the worker's share of the run ends a
// little before it, so that killing and removing the container fit, and
// Run returns at most about a second after it even when the engine hangs.
// A removal the engine did not confirm in that time goes on in the
// background; it never holds the turn.
package container

import (
	"context"
	"errors"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Error classes of this package and its drivers. Test them with errors.Is;
// the texts of the driver classes are the reference's operator messages.
var (
	// ErrInvalidSpec marks a Spec that Validate refuses. The error's text is
	// the reference message of the rule that failed.
	ErrInvalidSpec = errors.New("invalid container spec")
	// ErrImageMissing marks a run refused because the image is not present
	// locally. Drivers never pull; the operator builds the image.
	ErrImageMissing = errors.New("sandbox image is missing; run `rtsandbox image build`")
	// ErrWorkerFailed marks a worker that exited with a code other than 0,
	// even when it printed a well-formed {"ok":false} reply.
	ErrWorkerFailed = errors.New("sandbox worker failed")
	// ErrInvalidReply marks stdout that wire.ParseReply refuses; it
	// is the root's class, so errors.Is works with either name.
	ErrInvalidReply = wire.ErrInvalidReply
	// ErrOutputLimit marks a worker whose stdout or stderr overflowed its
	// limit; the container was killed.
	ErrOutputLimit = errors.New("sandbox output exceeded its limit")
	// ErrAborted marks a run whose context ended (turn stop or deadline).
	// The error also wraps context.Cause of the run's context.
	ErrAborted = errors.New("sandbox turn aborted")
	// ErrCleanup marks a container that may be left behind: Run could
	// neither confirm its removal nor queue it for background removal
	// (the driver was closed), or Reap could not remove everything. It is
	// never the outcome of a run whose container is merely queued (see
	// Result.CleanupPending); the run's own error, if any, is wrapped too.
	ErrCleanup = errors.New("sandbox container cleanup failed; inspect this installation's containers")
	// ErrEngine marks any other failed call to the container engine.
	ErrEngine = errors.New("container engine call failed")
)

// Driver runs one sealed worker container per call.
type Driver interface {
	// Run validates spec (after canonicalising its mount paths), creates
	// the container, writes stdin to the worker, reads its reply from
	// stdout and removes the container. When Run returns, the container is
	// gone, or Result.CleanupPending is set and the driver keeps removing
	// it in the background, or Run returns ErrCleanup. A pending removal
	// does not change the outcome: a worker that exited 0 with a valid
	// reply still yields it (its process has ended; only its stopped
	// container remains for a while).
	//
	// If ctx has a deadline, Run returns by that deadline plus at most
	// about a second, whatever the engine does.
	//
	// Errors: ErrInvalidSpec, ErrImageMissing, ErrAborted, ErrOutputLimit,
	// ErrWorkerFailed, ErrInvalidReply, ErrEngine, ErrCleanup. The Result's
	// timestamps are filled as far as the run got, even on error.
	Run(ctx context.Context, spec Spec, stdin []byte) (Result, error)

	// Reap force-removes every container, running or not, that carries
	// this installation's labels (InstallationLabel=installation,
	// RoleLabel=RoleTurn) and nothing else. It returns how many it
	// removed. Errors: ErrInvalidSpec (bad installation id), ErrEngine,
	// ErrCleanup.
	Reap(ctx context.Context, installation string) (removed int, err error)
}

// Result is what one Run produced. Reply is set only when Run returns a nil
// error. The timestamps measure the phases for benchmarks and the operator
// log; a zero time means the phase was not reached.
type Result struct {
	Reply rtsandbox.Reply
	// ExitCode is the worker's exit code, or -1 when it is unknown
	// (not started, aborted before it exited).
	ExitCode int
	// StderrBytes counts the worker's stderr.
	StderrBytes int
	// StderrTail is the end (at most a few KiB) of the stderr of a run
	// that failed; nil after a success. It is raw container output, which
	// a compromised worker controls: never log it. ParseWorkerFailure
	// extracts the worker's vetted failure class from it.
	StderrTail []byte
	// CleanupPending reports that the container was not confirmed removed
	// before Run returned; the driver is removing it in the background.
	CleanupPending bool

	Began   time.Time // Run was called
	Created time.Time // the engine created the container
	Started time.Time // the engine started it
	Exited  time.Time // the engine reported its exit
	Removed time.Time // removal confirmed (zero while CleanupPending)
}
