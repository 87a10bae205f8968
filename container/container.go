// Package container defines the sealed hardening profile of one turn's
// container (Spec), the Driver interface a sealed runtime uses to run a worker
// under it, and the validation of the worker's reply.
//
// The contract every Driver keeps: it runs exactly the profile described by a
// validated Spec (no network, read-only root, no capabilities, a non-root
// user, two dedicated bind mounts, bounded resources), it never pulls an
// image, it reads the reply only from the container's stdout, and it removes
// the container by its exact name before Run returns, whatever happened.
package container

import (
	"context"
	"errors"
	"time"

	"github.com/rtsandbox/rtsandbox"
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
	// ErrInvalidReply marks stdout that is not {ok: boolean, text: string}
	// with text of at most rtsandbox.MaxReplyText UTF-16 units.
	ErrInvalidReply = errors.New("invalid sandbox reply")
	// ErrOutputLimit marks a worker whose stdout or stderr overflowed its
	// limit; the container was killed.
	ErrOutputLimit = errors.New("sandbox output exceeded its limit")
	// ErrAborted marks a run whose context ended (turn stop or deadline).
	// The error also wraps context.Cause of the run's context.
	ErrAborted = errors.New("sandbox turn aborted")
	// ErrCleanup marks a container that could not be removed. It replaces
	// any other result of the run: the turn fails even if the worker
	// succeeded.
	ErrCleanup = errors.New("sandbox container cleanup failed; inspect this installation's containers")
	// ErrEngine marks any other failed call to the container engine.
	ErrEngine = errors.New("container engine call failed")
)

// Driver runs one sealed worker container per call.
type Driver interface {
	// Run validates spec (after canonicalising its mount paths), creates
	// the container, writes stdin to the worker, reads its reply from
	// stdout and removes the container. The container is gone when Run
	// returns, or Run returns ErrCleanup.
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
	// StderrBytes counts the worker's stderr; the contents are discarded so
	// that guest text never reaches the operator log unreviewed.
	StderrBytes int

	Began   time.Time // Run was called
	Created time.Time // the engine created the container
	Started time.Time // the engine started it
	Exited  time.Time // the engine reported its exit
	Removed time.Time // the last removal attempt finished successfully
}
