// The worker image must hold this binary's worker: turn, chat, demo and
// serve rebuild a missing or stale image at start and say so, instead of
// running a stale worker silently.

package main

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

// imageRefresh is what ensureImage did: the comparison made before any
// build, where the worker came from and how long a build took.
type imageRefresh struct {
	workerimage.Comparison
	source string
	took   time.Duration
}

// String says what happened for the operator; "" when the image was
// current and nothing was built.
func (r imageRefresh) String() string {
	switch r.State {
	case workerimage.Missing:
		return fmt.Sprintf("worker image %s was missing: built it from this binary's worker (%s) in %s",
			r.Tag, r.source, r.took.Round(time.Millisecond))
	case workerimage.Stale:
		return fmt.Sprintf("worker image %s held another worker (%s), not this binary's (sha256 %s): rebuilt it from %s in %s",
			r.Tag, shortDigest(r.Have), short(r.Want), r.source, r.took.Round(time.Millisecond))
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
func ensureImage(ctx context.Context, e *engine, tag string) (imageRefresh, error) {
	worker, source, err := workerimage.WorkerBinary(ctx)
	if err != nil {
		return imageRefresh{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, imageBuildTimeout)
	defer cancel()
	began := time.Now()
	c, err := workerimage.EnsureCurrent(ctx, e, tag, worker)
	return imageRefresh{Comparison: c, source: source, took: time.Since(began)}, err
}

// refreshImage is ensureImage on its own connection, for turn and chat:
// what it rebuilt is said through say.
func refreshImage(ctx context.Context, tag string, say func(string)) error {
	e, closeClient, err := dockerEngine()
	if err != nil {
		return err
	}
	defer closeClient()
	r, err := ensureImage(ctx, e, tag)
	if err != nil {
		return fmt.Errorf("worker image %s: %w", tag, err)
	}
	if msg := r.String(); msg != "" {
		say(msg)
	}
	return nil
}
