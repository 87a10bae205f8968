// The worker image must hold this binary's worker: turn, chat, demo and
// serve rebuild a missing or stale image at start and say so, instead of
// running a stale worker silently.

package host

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// engine is the local Docker daemon as the image checks need it: the
// driver builds, the client reads versions and labels (container/docker
// has no label read).
type engine struct {
	*docker.Driver
	cli *client.Client
}

// dockerEngine connects like dockerDriver (DOCKER_HOST and friends).
func dockerEngine() (*engine, func(), error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, nil, fmt.Errorf("docker client: %w", err)
	}
	return &engine{Driver: docker.New(cli), cli: cli}, func() { cli.Close() }, nil
}

// ImageLabels implements workerimage.LabelReader.
func (e *engine) ImageLabels(ctx context.Context, ref string) (map[string]string, bool, error) {
	res, err := e.cli.ImageInspect(ctx, ref)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("inspect image %s: %w", ref, err)
	case res.Config == nil:
		return map[string]string{}, true, nil
	}
	return res.Config.Labels, true, nil
}

// ImageRefresh is what ensureImage did: the comparison made before any
// build, where the worker came from and how long a build took.
type ImageRefresh struct {
	workerimage.Comparison
	Source string        // where the worker binary came from
	Took   time.Duration // how long a build took
}

// String says what happened for the operator; "" when the image was
// current and nothing was built.
func (r ImageRefresh) String() string {
	switch r.State {
	case workerimage.Missing:
		return fmt.Sprintf("worker image %s was missing: built it from this binary's worker (%s) in %s",
			r.Tag, r.Source, r.Took.Round(time.Millisecond))
	case workerimage.Stale:
		return fmt.Sprintf("worker image %s held another worker (%s), not this binary's (sha256 %s): rebuilt it from %s in %s",
			r.Tag, shortDigest(r.Have), short(r.Want), r.Source, r.Took.Round(time.Millisecond))
	}
	return ""
}

// shortDigest names an image's worker label for messages.
func shortDigest(have string) string {
	if have == "" {
		return "no " + workerimage.LabelWorkerSHA256 + " label"
	}
	return "sha256 " + short(have)
}

func short(digest string) string { return digest[:min(len(digest), 12)] }

// ensureImage rebuilds tag from this binary's worker when it is missing
// or stale.
func ensureImage(ctx context.Context, e *engine, tag string) (ImageRefresh, error) {
	worker, source, err := workerimage.WorkerBinary(ctx)
	if err != nil {
		return ImageRefresh{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, ImageBuildTimeout)
	defer cancel()
	began := time.Now()
	c, err := workerimage.EnsureCurrent(ctx, e, tag, worker)
	return ImageRefresh{Comparison: c, Source: source, Took: time.Since(began)}, err
}

// EnsureImage is ensureImage on its own connection to the engine.
func EnsureImage(ctx context.Context, tag string) (ImageRefresh, error) {
	e, closeClient, err := dockerEngine()
	if err != nil {
		return ImageRefresh{}, err
	}
	defer closeClient()
	return ensureImage(ctx, e, tag)
}

// RefreshImage is EnsureImage for turn and chat: what it rebuilt is said
// through say.
func RefreshImage(ctx context.Context, tag string, say func(string)) error {
	r, err := EnsureImage(ctx, tag)
	if err != nil {
		return fmt.Errorf("worker image %s: %w", tag, err)
	}
	if msg := r.String(); msg != "" {
		say(msg)
	}
	return nil
}

// ImageBuildTimeout caps `image build`; compiling the worker from source
// and the daemon's build together take seconds, not minutes.
const ImageBuildTimeout = 10 * time.Minute

// BuildImage builds (or rebuilds) the worker image tag from this binary's
// worker, within ImageBuildTimeout: where the worker came from and how
// long it took.
func BuildImage(ctx context.Context, tag string) (source string, took time.Duration, err error) {
	d, closeClient, err := DockerDriver(nil)
	if err != nil {
		return "", 0, err
	}
	defer closeClient()
	ctx, cancel := context.WithTimeout(ctx, ImageBuildTimeout)
	defer cancel()
	began := time.Now()
	source, err = workerimage.Build(ctx, d, tag)
	return source, time.Since(began), err
}
