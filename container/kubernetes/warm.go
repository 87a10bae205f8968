package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/rtsandbox/rtsandbox/container"
)

var _ container.Prestarter = (*Sealed)(nil)

// Prestart implements container.Prestarter: a running worker is got as
// Run gets one (a claim on the agent-sandbox warm pool when the pool
// serves spec, else a Pod of its own), and its attach is opened before
// Prestart returns, with stdin a pipe the worker reads nothing from until
// the claim writes the turn. So a claim costs no API round trip: neither
// the pool's claim (about 110 ms) nor the attach's upgrade (about 70 ms)
// is in the turn. The Pod's end is followed by a watch from now on
// (Warm.Exited). ctx bounds the start and the wait for the attach; the
// attach itself lives until Run or Discard. Errors: as Run's before the
// worker's input.
func (e *Sealed) Prestart(ctx context.Context, spec container.Spec) (container.Warm, error) {
	pod, err := SealedPod(spec, e.pods.o)
	if err != nil {
		return nil, err
	}
	if err := e.track(spec.Name); err != nil {
		return nil, err
	}
	w, err := e.start(ctx, spec, pod)
	w.name = spec.Name
	res := container.Result{ExitCode: -1}
	if w.pod != nil {
		res.Created = w.pod.CreationTimestamp.Time
	}
	if err != nil {
		return nil, e.unstarted(w, res, err)
	}
	res.Started = time.Now()
	a := e.open(context.WithoutCancel(ctx), w.pod)
	if err := a.await(ctx); err != nil {
		return nil, e.unstarted(w, res, err)
	}
	return &warm{e: e, w: w, a: a, image: spec.Image, runDir: spec.RunDir, res: res}, nil
}

// unstarted removes a worker whose prestart failed, as a run that failed
// before its input is cleaned up, and ends its tracking.
func (e *Sealed) unstarted(w turnPod, res container.Result, cause error) error {
	defer e.removing.Done()
	_, err := e.cleanup(w, res, cause)
	return err
}

// await returns once a's stream is up, or why it will never be: the Pod
// or the stream ended first (lost), or ctx ended (container.ErrAborted);
// a is stopped then.
func (a *attachment) await(ctx context.Context) error {
	select {
	case <-a.opened:
		return nil
	case <-a.ended:
		return lost(a.stop())
	case <-ctx.Done():
		a.stop()
		return fmt.Errorf("%w: waiting for the worker's attach: %w", container.ErrAborted, context.Cause(ctx))
	}
}

// lost is why a worker that had no turn yet can take none: its Pod's end
// as the watch saw it (gone: container.ErrEngine; ended:
// container.ErrWorkerFailed), else its attach's end (container.ErrEngine:
// the engine can no longer hand it a turn).
func lost(stream attachEnd, end exitEnd) error {
	switch {
	case end.err != nil && !errors.Is(end.err, container.ErrAborted):
		return end.err
	case end.code >= 0:
		return fmt.Errorf("%w: the worker exited (code %d) before its turn", container.ErrWorkerFailed, end.code)
	}
	return errors.Join(fmt.Errorf("%w: the worker's attach ended before its turn", container.ErrEngine), stream.err)
}

// ImageID implements container.Prestarter. The kubelet resolves images on
// its node, where the engine cannot see a local image's ID: the identity
// is ref itself. So a tag rebuilt in place is not noticed on Kubernetes
// (the pool keeps workers of the older build until they are used); pin
// the image by digest to have every build noticed. Errors:
// container.ErrImageMissing (not an image reference).
func (e *Sealed) ImageID(_ context.Context, ref string) (string, error) {
	if ref == "" || strings.HasPrefix(ref, "-") || strings.ContainsFunc(ref, unicode.IsSpace) {
		return "", fmt.Errorf("%w: %q is not an image reference", container.ErrImageMissing, ref)
	}
	return ref, nil
}

// warm is one prestarted worker: its Pod (and claim), its open attach,
// its image and run directory, and the prestart's timestamps.
type warm struct {
	e      *Sealed
	w      turnPod
	a      *attachment
	image  string
	runDir string
	res    container.Result // Created, Started
}

func (w *warm) Name() string  { return w.w.name }
func (w *warm) Image() string { return w.image }

// Exited is closed once the Pod's watch reported its end or deletion, or
// the attach ended: either way the engine cannot hand the worker a turn.
// Run and Discard end both, so it closes after them too; the contract
// gives it no meaning then.
func (w *warm) Exited() <-chan struct{} { return w.a.ended }

// Run implements container.Warm: the token is issued now, the hello and
// the turn go down the open attach, and the turn finishes as a cold one
// (Sealed.turn). A worker lost while it waited fails at once.
func (w *warm) Run(ctx context.Context, input []byte) (container.Result, error) {
	e := w.e
	defer e.removing.Done()
	res := w.res
	res.Began = time.Now()
	select {
	case <-w.a.ended:
		return e.cleanup(w.w, res, lost(w.a.stop()))
	default:
	}
	if ctx.Err() != nil {
		w.a.stop()
		return e.cleanup(w.w, res, fmt.Errorf("%w: before the worker's turn: %w", container.ErrAborted, context.Cause(ctx)))
	}
	stdin, end, err := e.turnInput(ctx, w.runDir, input)
	if err != nil {
		w.a.stop()
		return e.cleanup(w.w, res, err)
	}
	defer end()
	// The attach was opened before the turn, on the prestart's context:
	// turn cuts it when ctx ends, as every one of its waits hears ctx.
	w.a.send(stdin)
	return e.turn(ctx, w.w, w.a, res)
}

// Discard implements container.Warm: the attach ends and the worker is
// removed as a failed run's is (its claim released, its Pod deleted by
// UID), in the background past removeWait.
func (w *warm) Discard(context.Context) error {
	defer w.e.removing.Done()
	w.a.stop()
	_, err := w.e.cleanup(w.w, container.Result{}, nil)
	return err
}
