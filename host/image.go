// The worker image must hold this binary's worker: turn, chat, demo and
// serve rebuild a missing or stale image at start and say so, instead of
// running a stale worker silently. They rebuild only an image this project
// built (its labels) or the default tag: any other image under the
// configured tag is refused before anything is built (issue 21), so a
// typo in sandbox.image never replaces an image of the operator's.

package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// ImageKey is the config key that names the worker image, for errors.
const ImageKey = "sandbox.image"

// ownTag reports whether tag is this project's by name, so that an image
// under it that carries none of our labels is a worker built by hand (or
// by an old version) and is rebuilt: the default tag only.
func ownTag(tag string) bool { return tag == config.DefaultImage }

// foreignImage is the refusal of a foreign image under tag, which key
// (sandbox.image, or demo's --image) named: the key, the rule and the two
// ways out. It wraps workerimage.ErrForeign.
func foreignImage(key, tag string) error {
	return fmt.Errorf("%s: %w: %s carries no %s label; rtsandbox rebuilds only an image it built or the default tag %s, so it leaves this one alone. "+
		"Name a tag of the worker's own in %s, or replace the image on purpose with `rtsandbox image build --tag %s`",
		key, workerimage.ErrForeign, tag, workerimage.LabelWorkerSHA256, config.DefaultImage, key, tag)
}

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
	// Pruned are the old untagged worker images a build removed
	// (PruneWorkerImages); PruneErr is why some could not be.
	Pruned   []docker.PrunedImage
	PruneErr error
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
	case workerimage.Foreign:
		return fmt.Sprintf("worker image %s held an image without rtsandbox's labels: replaced it with this binary's worker (sha256 %s, %s) in %s",
			r.Tag, short(r.Want), r.Source, r.Took.Round(time.Millisecond))
	}
	return ""
}

// PruneText says which old worker images a build removed, and which it
// could not; "" when it removed none and failed at none.
func (r ImageRefresh) PruneText() string {
	var b strings.Builder
	if len(r.Pruned) > 0 {
		b.WriteString(PrunedText(r.Pruned))
	}
	if r.PruneErr != nil {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "old untagged worker images not removed: %v", r.PruneErr)
	}
	return b.String()
}

// PrunedText names removed images with their sizes.
func PrunedText(pruned []docker.PrunedImage) string {
	parts := make([]string, len(pruned))
	var total int64
	for i, p := range pruned {
		parts[i] = fmt.Sprintf("%s (%s)", shortID(p.ID), megabytes(p.Size))
		total += p.Size
	}
	return fmt.Sprintf("removed %d old untagged worker image(s) no container uses, %s in all: %s",
		len(pruned), megabytes(total), strings.Join(parts, ", "))
}

func shortID(id string) string {
	hexID := strings.TrimPrefix(id, "sha256:")
	return "sha256:" + hexID[:min(len(hexID), 12)]
}

func megabytes(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// PruneWorkerImages removes the untagged worker images (by
// workerimage.LabelWorkerSHA256, of any installation: an image no tag
// names and no container uses serves nobody) created before before, the
// start of the build that replaced them; never a tagged image, one a
// container uses, one without the label or a build's intermediate layer
// (docker.ImageSelector).
func PruneWorkerImages(ctx context.Context, before time.Time) ([]docker.PrunedImage, error) {
	e, closeClient, err := dockerEngine()
	if err != nil {
		return nil, err
	}
	defer closeClient()
	return pruneWorkerImages(ctx, e, before)
}

// PruneMinAge is how old an image must be for reap to prune it: any
// build that made it, of any installation on the engine, has tagged it by
// then (a build prunes only images older than its own start).
const PruneMinAge = time.Minute

func pruneWorkerImages(ctx context.Context, e *engine, before time.Time) ([]docker.PrunedImage, error) {
	return e.PruneImages(ctx, docker.ImageSelector{Label: workerimage.LabelWorkerSHA256, Entrypoint: workerimage.Entrypoint(), Before: before})
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
// or stale, and refuses (foreignImage, naming key) an image under it that
// this project did not build, unless tag is the default one.
func ensureImage(ctx context.Context, e *engine, tag, key string) (ImageRefresh, error) {
	worker, source, err := workerimage.WorkerBinary(ctx)
	if err != nil {
		return ImageRefresh{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, ImageBuildTimeout)
	defer cancel()
	began := time.Now()
	c, err := workerimage.EnsureCurrent(ctx, e, tag, worker, ownTag(tag))
	if errors.Is(err, workerimage.ErrForeign) {
		err = foreignImage(key, tag)
	}
	r := ImageRefresh{Comparison: c, Source: source, Took: time.Since(began)}
	if err == nil && c.State != workerimage.Current {
		r.Pruned, r.PruneErr = pruneWorkerImages(ctx, e, began)
	}
	return r, err
}

// EnsureImage is ensureImage on its own connection to the engine; key
// names where tag came from (ImageKey, or a command's flag).
func EnsureImage(ctx context.Context, tag, key string) (ImageRefresh, error) {
	e, closeClient, err := dockerEngine()
	if err != nil {
		return ImageRefresh{}, err
	}
	defer closeClient()
	return ensureImage(ctx, e, tag, key)
}

// RefreshImage is EnsureImage for turn, chat and serve, whose tag is
// sandbox.image: what it rebuilt is said through say.
func RefreshImage(ctx context.Context, tag string, say func(string)) error {
	r, err := EnsureImage(ctx, tag, ImageKey)
	if err != nil {
		return fmt.Errorf("worker image %s: %w", tag, err)
	}
	if msg := r.String(); msg != "" {
		say(msg)
	}
	if msg := r.PruneText(); msg != "" {
		say(msg)
	}
	return nil
}

// ImageBuildTimeout caps `image build`; compiling the worker from source
// and the daemon's build together take seconds, not minutes.
const ImageBuildTimeout = 10 * time.Minute

// BuildImage builds (or rebuilds) the worker image tag from this binary's
// worker, within ImageBuildTimeout: the comparison made before the build
// (a Foreign state says it replaced an image rtsandbox had not built),
// where the worker came from and how long it took. key names the config
// key tag came from: then a foreign image under it is refused as at
// serve's start (foreignImage), before anything is built. "" is a tag the
// operator named on the command line (image build --tag), which may
// replace any image: that is the command's explicit purpose.
func BuildImage(ctx context.Context, tag, key string) (ImageRefresh, error) {
	e, closeClient, err := dockerEngine()
	if err != nil {
		return ImageRefresh{}, err
	}
	defer closeClient()
	worker, source, err := workerimage.WorkerBinary(ctx)
	if err != nil {
		return ImageRefresh{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, ImageBuildTimeout)
	defer cancel()
	began := time.Now()
	c, err := workerimage.Compare(ctx, e, tag, worker)
	switch {
	case err != nil:
		return ImageRefresh{}, err
	case c.State == workerimage.Foreign && key != "" && !ownTag(tag):
		return ImageRefresh{Comparison: c}, foreignImage(key, tag)
	}
	err = workerimage.BuildFrom(ctx, e, tag, worker)
	r := ImageRefresh{Comparison: c, Source: source, Took: time.Since(began)}
	if err == nil {
		r.Pruned, r.PruneErr = pruneWorkerImages(ctx, e, began)
	}
	return r, err
}
