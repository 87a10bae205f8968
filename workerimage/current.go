package workerimage

import (
	"context"
	"errors"
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
	// Stale: the image is this project's (Ours) but holds another
	// worker, or, built by a version before the worker label, names none.
	Stale
	// Foreign: the image carries no label of this project: something
	// other than a worker lives under the tag (a typo in sandbox.image
	// naming the operator's ubuntu:22.04), which EnsureCurrent never
	// replaces unless the tag is this project's by name.
	Foreign
)

// ErrForeign refuses to replace an image this project did not build
// (State Foreign).
var ErrForeign = errors.New("the image under the tag is not one rtsandbox built")

func (s State) String() string {
	switch s {
	case Current:
		return "current"
	case Missing:
		return "missing"
	case Stale:
		return "stale"
	case Foreign:
		return "foreign"
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
// the very bytes it packages, and nothing else writes it. An image without
// any label of this project (Ours) is Foreign. Errors come from r.
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
	case !Ours(labels):
		c.State = Foreign
	case c.Have != c.Want:
		c.State = Stale
	}
	return c, nil
}

// Ours reports whether an image's labels are those of an image this
// project built: LabelWorkerSHA256, or LabelTitle with this project's
// value, which images of versions before the worker label carry.
func Ours(labels map[string]string) bool {
	_, worker := labels[LabelWorkerSHA256]
	return worker || labels[LabelTitle] == title
}

// Rebuilder can compare an image's labels and build it; the wiring's
// Docker adapter satisfies it.
type Rebuilder interface {
	Builder
	LabelReader
}

// EnsureCurrent builds tag from worker when it is missing or stale, and
// returns the comparison made before any build, so the caller can say
// why it built. A current image is left alone. A Foreign one is refused
// with ErrForeign before anything is built, unless ownTag says the tag is
// this project's by name (the default tag), where an image without
// labels can only be a worker built by hand: it is rebuilt like a stale
// one. Errors wrap ErrWorker or ErrForeign or come from s.
func EnsureCurrent(ctx context.Context, s Rebuilder, tag string, worker []byte, ownTag bool) (Comparison, error) {
	c, err := Compare(ctx, s, tag, worker)
	switch {
	case err != nil || c.State == Current:
		return c, err
	case c.State == Foreign && !ownTag:
		return c, fmt.Errorf("%s: %w", tag, ErrForeign)
	}
	return c, BuildFrom(ctx, s, tag, worker)
}
