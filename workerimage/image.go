package workerimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Labels set on the worker image. They name the image's purpose and the
// worker it holds, so an operator (or a later check) can tell a stale image
// from a current one. They deliberately avoid the rtsandbox.installation and
// rtsandbox.role keys: images pass their labels on to containers, and those
// keys are what Reap selects turn containers by.
const (
	LabelTitle        = "org.opencontainers.image.title"
	LabelWorkerSHA256 = "rtsandbox.worker.sha256"
	title             = "rtsandbox-worker"
)

// User is the image's default user, nobody:nogroup. The runtime always
// overrides it with the configured uid:gid; the default only keeps an
// accidental plain `docker run` from running the worker as root.
const User = "65534:65534"

// Builder is the part of the container engine a build needs;
// container/docker.Driver implements it.
type Builder interface {
	BuildImage(ctx context.Context, tag string, files map[string][]byte) error
}

// Store is a Builder that can also tell whether an image exists.
type Store interface {
	Builder
	ImageExists(ctx context.Context, ref string) (bool, error)
}

// Context returns the build context for worker: the binary at WorkerFile
// and a Dockerfile that copies it into an empty image. It does not check
// worker; Build does.
func Context(worker []byte) map[string][]byte {
	return map[string][]byte{
		"Dockerfile": []byte(Dockerfile(worker)),
		WorkerFile:   worker,
	}
}

// Entrypoint is the worker image's entrypoint: what tells a finished
// build from the intermediate layers of one (which carry its labels too),
// for pruning.
func Entrypoint() []string { return []string{"/" + WorkerFile} }

// Dockerfile returns the Dockerfile of Context. There is no shell in the
// image, so ENTRYPOINT uses the exec form.
func Dockerfile(worker []byte) string {
	return fmt.Sprintf(`FROM scratch
LABEL %s=%q %s=%q
COPY %s /%s
USER %s
ENTRYPOINT [%q]
`, LabelTitle, title, LabelWorkerSHA256, Digest(worker), WorkerFile, WorkerFile, User, Entrypoint()[0])
}

// Digest is the hex SHA-256 of worker: the value of LabelWorkerSHA256 on
// an image built from it.
func Digest(worker []byte) string {
	sum := sha256.Sum256(worker)
	return hex.EncodeToString(sum[:])
}

// Build finds the worker (WorkerBinary), checks it and builds tag from it.
// It returns the worker's source for the operator. Errors wrap ErrWorker or
// come from b.
func Build(ctx context.Context, b Builder, tag string) (source string, err error) {
	worker, source, err := WorkerBinary(ctx)
	if err != nil {
		return "", err
	}
	return source, BuildFrom(ctx, b, tag, worker)
}

// BuildFrom builds tag from a given worker binary after checking it with
// CheckWorker.
func BuildFrom(ctx context.Context, b Builder, tag string, worker []byte) error {
	if err := CheckWorker(worker); err != nil {
		return err
	}
	if err := b.BuildImage(ctx, tag, Context(worker)); err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	return nil
}

// EnsureBuilt builds tag only if the store does not have it yet, and
// reports whether it built. It never replaces an existing image, current
// or not; EnsureCurrent also rebuilds a stale one.
func EnsureBuilt(ctx context.Context, s Store, tag string) (built bool, err error) {
	ok, err := s.ImageExists(ctx, tag)
	if err != nil {
		return false, fmt.Errorf("check image %s: %w", tag, err)
	}
	if ok {
		return false, nil
	}
	if _, err := Build(ctx, s, tag); err != nil {
		return false, err
	}
	return true, nil
}
