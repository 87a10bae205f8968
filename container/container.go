// Package container is the engine side of both modes: the sealed hardening
// profile of a worker's container as data (Spec for a sealed turn,
// SessionSpec for a channel's long-lived worker), the validation of the
// worker's reply, and the two lifecycle interfaces a mode needs of a
// container engine:
//
//   - OneShot runs one sealed worker to completion (the sealed mode);
//   - LongLived keeps one long-lived worker per channel (the session mode).
//
// An engine implements both; container/docker is the one today. Every
// engine keeps the same guarantees, whatever its means (docs/engines.md
// maps each one to Docker and to a Kubernetes engine):
//
//   - the sealed profile, exactly as the validated spec describes it: no
//     network, a read-only root, no capabilities and no new privileges, a
//     non-root user, bounded memory, CPU, processes and open files, and
//     exactly the dedicated storage the spec names (its run directory
//     read-only, its workspace read-write, a private /tmp), no credential
//     in the container's environment, labels or storage;
//   - it never pulls an image: a missing one is ErrImageMissing;
//   - it never forgets a container (OneShot.Run's removal rule, and
//     reaping by InstallationLabel and RoleLabel after a crash);
//   - it keeps the caller's deadline (OneShot.Run);
//   - it hears a long-lived worker's fault at once (LongLived.Watch);
//   - its failures are the Err classes below, tested with errors.Is.
//
// The interfaces name what a worker receives, not how: a turn's input is
// bytes the engine hands the worker once (Docker: its stdin), and the
// broker endpoint is the spec's run directory, which holds the broker's
// Unix socket on the host (Docker: a read-only bind mount). An engine
// whose workers cannot share the host's filesystem or stdin delivers both
// its own way (for Kubernetes, a network stream on which the worker
// presents a per-turn token: to a relay in front of that socket, or to the
// broker's own network listener, whose endpoint the spec would then carry
// beside RunDir), without a change to these interfaces' methods.
//
// Package container/enginetest is the conformance suite every engine
// passes.
package container

import (
	"errors"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Error classes of this package and its engines. Test them with errors.Is;
// the texts of the engine classes are the reference's operator messages. An
// engine wraps its own detail in them (fmt.Errorf("%w: ...")), and the
// modes decide on the class alone: which guest text a failure gets, and
// whether a container is removed, kept or reported.
var (
	// ErrInvalidSpec marks a Spec that Validate refuses. The error's text is
	// the reference message of the rule that failed.
	ErrInvalidSpec = errors.New("invalid container spec")
	// ErrImageMissing marks a run refused because the image is not present
	// locally. Engines never pull; the operator builds the image.
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
	// (the engine was closed), or Reap could not remove everything. It is
	// never the outcome of a run whose container is merely queued (see
	// Result.CleanupPending); the run's own error, if any, is wrapped too.
	ErrCleanup = errors.New("sandbox container cleanup failed; inspect this installation's containers")
	// ErrEngine marks any other failed call to the container engine.
	ErrEngine = errors.New("container engine call failed")
)

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
	// before Run returned; the engine is removing it in the background.
	CleanupPending bool
	// Settled is non-nil when Run returned before the engine confirmed
	// the container gone: at the reply's end mark, before the container's
	// exit (the early reply: OneShot.Run), or with its removal pending
	// (CleanupPending). It is closed once the engine confirmed the
	// container gone, or gave up on it at Close (the reaper removes it
	// then). A caller that bounds how many containers exist (the sealed
	// runtime's turn slots, its warm pool) holds its place until then.
	Settled <-chan struct{}

	Began   time.Time // Run was called
	Created time.Time // the engine created the container
	Started time.Time // the engine started it
	Replied time.Time // the worker's reply ended with its end mark
	Exited  time.Time // the engine reported its exit (zero after an early reply)
	Removed time.Time // removal confirmed (zero while CleanupPending or not Settled)
}
