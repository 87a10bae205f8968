package workerimage

import (
	"context"
	"fmt"
)

// LabelReader reads an image's labels. ok is false, with a nil error, when
// the image does not exist; container/docker's image inspection satisfies
// it through a small adapter in the wiring.
type LabelReader interface {
	ImageLabels(ctx context.Context, ref string) (labels map[string]string, ok bool, err error)
}

// State says how an image relates to a worker binary.
type State int

const (
	// Current: the image's LabelWorkerSHA256 is the worker's Digest.
	Current State = iota
	// Missing: there is no image under the tag.
	Missing
	// Stale: the image exists but holds another worker, or carries no
	// worker label at all (built by hand or by an old version).
	Stale
)

func (s State) String() string {
	switch s {
	case Current:
		return "current"
	case Missing:
		return "missing"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Comparison is the outcome of Compare: the state, the digest the image
// carries (empty when missing or unlabelled) and the one it should carry.
type Comparison struct {
	State State
	Tag   string
	Have  string
	Want  string
}

// Compare reports whether tag holds worker, by the image's
// LabelWorkerSHA256 label. Only the label is compared: Build sets it from
// the very bytes it packages, and nothing else writes it. Errors come from
// r.
func Compare(ctx context.Context, r LabelReader, tag string, worker []byte) (Comparison, error) {
	c := Comparison{Tag: tag, Want: Digest(worker)}
	labels, ok, err := r.ImageLabels(ctx, tag)
	if err != nil {
		return c, fmt.Errorf("read labels of %s: %w", tag, err)
	}
	c.Have = labels[LabelWorkerSHA256]
	switch {
	case !ok:
		c.State = Missing
	case c.Have != c.Want:
		c.State = Stale
	}
	return c, nil
}

// Rebuilder can compare an image's labels and build it; the wiring's
// Docker adapter satisfies it.
type Rebuilder interface {
	Builder
	LabelReader
}

// EnsureCurrent builds tag from worker when it is missing or stale, and
// returns the comparison made before any build, so the caller can say
// why it built. A current image is left alone. Errors wrap ErrWorker or
// come from s.
func EnsureCurrent(ctx context.Context, s Rebuilder, tag string, worker []byte) (Comparison, error) {
	c, err := Compare(ctx, s, tag, worker)
	if err != nil || c.State == Current {
		return c, err
	}
	return c, BuildFrom(ctx, s, tag, worker)
}
