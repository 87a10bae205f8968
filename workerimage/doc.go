// Package workerimage produces the sealed worker image: FROM scratch, holding only
// the static rtsandbox-worker binary, built through the Engine API from an
// in-memory context, so no registry and no base image are ever involved.
//
// The contract:
//
//   - WorkerBinary finds the worker binary without network access, in this
//     order: embedded in the host binary at build time (build tag
//     embedworker, produced by `make build`); a file named rtsandbox-worker
//     next to the running executable; compiled with the Go toolchain when
//     the working directory is inside a checkout of this module, once per
//     checkout for the life of the process.
//   - Every candidate must be a static Linux ELF executable (no program
//     interpreter, no dynamic section) built from this module's worker
//     package. Anything else is refused with ErrWorker, never packaged:
//     the image has no libc and no shell, so a dynamic binary could not
//     start, and a wrong binary would run with the broker socket in reach.
//   - Context returns the build context for a worker binary; the same
//     binary always gives the same context bytes.
//   - Build and EnsureBuilt take the engine through small interfaces
//     (Builder, Store) that container/docker.Driver satisfies.
//   - Every image carries LabelWorkerSHA256, the Digest of the worker it
//     holds. Compare reads it (through LabelReader) and tells a Current
//     image from a Missing or Stale one, or a Foreign one that carries no
//     label of this project; EnsureCurrent rebuilds a missing or stale
//     image from the given worker, so a host never runs a worker other
//     than its own without saying so, and refuses a foreign one
//     (ErrForeign) before building anything, so an image of the
//     operator's that a tag names by mistake is never replaced; only
//     under a tag that is this project's by name (the caller says so) is
//     a foreign image rebuilt.
package workerimage
