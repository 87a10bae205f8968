package container

import "context"

// OneShot runs one sealed worker to completion per call: the engine of the
// sealed mode (*docker.Driver). It is safe for concurrent use; each Run
// owns one container.
type OneShot interface {
	// Run validates spec (after canonicalising its run and workspace
	// paths), creates the worker's container under exactly spec's
	// profile, hands the worker input once and whole, reads its reply
	// and removes the container. input is the turn's JSON; the engine
	// delivers it however it can (Docker: on the container's stdin,
	// closed after it), never in the container's environment, labels or
	// storage. The worker reaches its broker through spec.RunDir, the
	// directory holding the broker's socket on the host (Docker: bound
	// read-only at /broker). The reply is the worker's output
	// (Docker: stdout), bounded, checked by rtsandbox.ParseReply.
	//
	// The early reply: a worker that succeeded ends its reply with
	// wire.ReplyEnd. Run takes the reply there, without waiting for the
	// exit (the engine's exit handling costs tens of milliseconds a turn),
	// and removes the container after it returns: Result.Settled is set
	// and closed once the engine confirmed the container gone.
	// The end mark stands for exit code 0; a reply without it counts only
	// with exit code 0, as before. Whatever follows the mark is never read.
	//
	// The removal rule: when Run returns, the container is gone, or
	// Result.CleanupPending is set and the engine keeps removing it in the
	// background until it confirms it gone (Result.Settled closes then, or
	// when the engine gives up at its Close), or Run returns ErrCleanup. A
	// pending removal does not change the outcome: a worker that exited 0
	// with a valid reply still yields it (its process has ended; only its
	// stopped container remains for a while), as does an early reply.
	//
	// The deadline rule: if ctx has a deadline, Run returns by that
	// deadline plus at most about a second, whatever the worker or the
	// engine does; the worker's share ends a little before it so that
	// killing and removing the container fit, and a removal the engine did
	// not confirm in that time goes on in the background.
	//
	// Errors: ErrInvalidSpec, ErrImageMissing (never pulled), ErrAborted
	// (wrapping ctx's cause), ErrOutputLimit, ErrWorkerFailed (an exit code
	// other than 0), ErrInvalidReply, ErrEngine, ErrCleanup. The Result's
	// timestamps are filled as far as the run got, even on error.
	Run(ctx context.Context, spec Spec, input []byte) (Result, error)

	// Reap force-removes every container, running or not, that carries
	// this installation's labels (InstallationLabel=installation,
	// RoleLabel=RoleTurn) and nothing else: what a crash of the host or
	// the engine left. It returns how many it removed. Errors:
	// ErrInvalidSpec (bad installation id), ErrEngine, ErrCleanup.
	Reap(ctx context.Context, installation string) (removed int, err error)
}

// Prestarter is a OneShot engine that can also start a sealed worker
// before its turn exists, for a warm pool (docs/engines.md, "Warm
// workers"): the container is created under exactly the profile Run
// gives it and started, and the worker waits for its input; a turn later
// claims it. *docker.Driver implements it.
type Prestarter interface {
	OneShot
	// Prestart validates spec as Run does, creates the worker's container
	// under exactly spec's profile and starts it without its input: the
	// worker waits for it. Nothing of a turn may be in spec (the caller
	// names the container and its run directory for the slot, not for a
	// channel). The engine tracks the container as Run's (Reap, the
	// background remover, Close). ctx bounds the start only. Errors: as
	// Run's before the worker's input (ErrInvalidSpec, ErrImageMissing,
	// ErrAborted, ErrEngine, ErrCleanup).
	Prestart(ctx context.Context, spec Spec) (Warm, error)
	// ImageID is the local image ref names now (Docker: its "sha256:…"
	// ID), never pulled: a pool compares it with Warm.Image before a
	// claim, so an image rebuilt under the same tag drains the pool.
	// Errors: ErrImageMissing, ErrEngine.
	ImageID(ctx context.Context, ref string) (string, error)
}

// Warm is one started sealed worker that has not had its turn. Exactly
// one of Run and Discard is called, once.
type Warm interface {
	// Name is the container's name.
	Name() string
	// Image is the image ID spec.Image named just before the container
	// was created: the container runs that image or one built later
	// under the same name, never an older one. A pool that finds
	// ImageID(spec.Image) changed discards the worker (a false alarm
	// costs one start; a stale worker never serves a turn).
	Image() string
	// Exited is closed once the engine reports the waiting container no
	// longer running (killed, crashed, removed) or can no longer vouch
	// for it (the engine's answer broke off): a pool replaces such a
	// worker without waiting for a claim. It is followed until Run or
	// Discard is called; a channel still open then means nothing.
	Exited() <-chan struct{}
	// Run hands the waiting worker input and finishes as OneShot.Run
	// does from there: the same removal rule, deadline rule, errors and
	// Result (Created and Started are the prestart's). A worker that ended
	// while it waited fails at once (ErrEngine or ErrWorkerFailed), never
	// at the deadline, and its container is removed.
	Run(ctx context.Context, input []byte) (Result, error)
	// Discard removes the unclaimed container as a failed run's cleanup
	// does (in the background when the engine is slow). Errors:
	// ErrCleanup.
	Discard(ctx context.Context) error
}

// LongLived keeps one long-lived worker per channel, named by its
// SessionSpec: the engine of the session mode (*docker.SessionDriver). The
// container keeps running between turns and across host restarts; the
// engine restarts a worker that crashed. It is safe for concurrent use.
// Every call but Watch is bounded in time by the engine (15 s per engine
// call in Docker's), whatever ctx allows.
type LongLived interface {
	// Status reports the container name: StateMissing when the engine does
	// not know it, StateRunning when its worker runs and can answer,
	// StateStopped otherwise (exited, paused, being restarted after a
	// crash past a short wait), with its image, profile and spec digest
	// when known (SessionStatus). Errors wrap ErrEngine.
	Status(ctx context.Context, name string) (SessionStatus, error)

	// EnsureRunning keeps a running container that matches spec exactly
	// (SessionStatus.Current: the same image, profile and spec digest)
	// and otherwise force-removes what is there and creates and starts
	// spec's. The runtime calls it on a context detached from the turn's
	// signal and removes the container after it returned when the turn
	// was aborted meanwhile; so it must return only once the engine
	// answered the requests it made, and leave no container it made when
	// ctx ends. Errors: ErrInvalidSpec, ErrImageMissing (never pulled),
	// ErrEngine, ErrAborted (ctx ended before the container ran).
	EnsureRunning(ctx context.Context, spec SessionSpec) error

	// Remove force-removes the container name, by that exact name; a
	// missing one is fine. It returns once the engine reports it gone, so
	// the name is free for the next create. Errors wrap ErrEngine.
	Remove(ctx context.Context, name string) error

	// Logs returns the last n (at least 1) lines of the worker's output,
	// bounded in bytes (1 MiB in Docker's); "" when the container is
	// missing. The text is the worker's, untrusted: for a scrubbed
	// operator log only. Errors wrap ErrEngine.
	Logs(ctx context.Context, name string, n int) (string, error)

	// Watch follows the running container name until ctx ends. It
	// inspects the container and fails with an error wrapping
	// ErrSessionDown unless it runs (StateRunning); otherwise the channel
	// it returns receives at most one error, wrapping ErrSessionDown, as
	// soon as that very container (not a later one under the same name)
	// exits, is paused, restarted, stopped or removed: the runtime cuts the
	// turn it serves at once, not at the turn's deadline. A lost
	// connection to the engine is not a fault: the watch reconnects until
	// ctx ends and then checks that the same container still runs since
	// the same start, reporting ErrSessionDown otherwise. The watch holds
	// its resources until ctx ends. (Docker follows the engine's event
	// stream; a Kubernetes engine watches the pod's phase, its container's
	// restart count and its deletion the same way.)
	Watch(ctx context.Context, name string) (<-chan error, error)
}
