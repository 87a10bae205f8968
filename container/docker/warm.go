package docker

import (
	"context"
	"fmt"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// Prestart implements container.Prestarter: the container is created by
// the one createOptions (so a warm worker is confined exactly as a cold
// one) and started without an attach. Its stdin stays open (OpenStdin)
// until the claim's attach writes the turn and closes it (StdinOnce); the
// worker reads nothing before. The create is not cut by ctx, as a cold
// run's is not (Driver.create).
func (d *Driver) Prestart(ctx context.Context, spec rtcontainer.Spec) (rtcontainer.Warm, error) {
	spec, err := canonical(spec)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, aborted(ctx)
	}
	// The image is named before the create: the container runs it or a
	// later build, so a changed ID at the claim is never missed.
	image, err := d.ImageID(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	b := newBudget(ctx, d.now())
	d.track(spec.Name)
	w := &warm{d: d, name: spec.Name, image: image, exited: make(chan struct{})}
	out, err := d.prestart(ctx, b, spec, w)
	if err == nil {
		w.follow()
		return w, nil
	}
	// The same cleanup as a run that failed before its worker's input.
	_, err = d.finish(ctx, b, spec.Name, out, err, rtcontainer.Result{ExitCode: -1})
	return nil, err
}

// prestart creates and starts the container, filling w.
func (d *Driver) prestart(ctx context.Context, b budget, spec rtcontainer.Spec, w *warm) (run, error) {
	created, err := d.create(ctx, b, spec)
	if err != nil {
		return failed(ctx, "create", err)
	}
	w.id, w.created = created.ID, d.now()
	if ctx.Err() != nil {
		return run{aborted: true}, aborted(ctx)
	}
	if _, err := d.api.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return failed(ctx, "start", err)
	}
	w.started = d.now()
	return run{}, nil
}

// ImageID implements container.Prestarter: the ID ref names locally.
func (d *Driver) ImageID(ctx context.Context, ref string) (string, error) {
	img, err := d.api.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return img.ID, nil
	case cerrdefs.IsNotFound(err):
		return "", fmt.Errorf("%w: %w", rtcontainer.ErrImageMissing, err)
	}
	return "", engineErr("inspect image", err)
}

// warm is one prestarted container: its name, its engine ID, its image,
// when it was created and started, and the wait that follows it while it
// waits for its claim.
type warm struct {
	d                *Driver
	name, id, image  string
	created, started time.Time
	exited           chan struct{} // closed when the follow wait ended on its own
	unfollow         func()        // ends the follow wait; idempotent
}

func (w *warm) Name() string            { return w.name }
func (w *warm) Image() string           { return w.image }
func (w *warm) Exited() <-chan struct{} { return w.exited }

// follow waits, until Run or Discard, for the container not to run: one
// long-poll wait request per idle worker, as cheap for the engine as the
// wait every run makes. Any answer but the follow's own cancellation (an
// exit, a removal, a broken connection) closes exited: a pool cannot vouch
// for a worker it lost sight of.
func (w *warm) follow() {
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Add(1)
	exit := awaitExit(w.d.api.ContainerWait(ctx, w.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning}))
	go func() {
		defer done.Done()
		select {
		case <-exit:
			if ctx.Err() == nil {
				close(w.exited)
			}
		case <-ctx.Done():
			<-exit // the client ends the wait once ctx is cancelled
		}
	}()
	var once sync.Once
	w.unfollow = func() { once.Do(func() { cancel(); done.Wait() }) }
}

// Run implements container.Warm: the claim attaches, waits for the
// container not to run (a worker that died while it waited answers at
// once), writes the turn and supervises it as a cold run is supervised;
// then the same finish.
func (w *warm) Run(ctx context.Context, input []byte) (rtcontainer.Result, error) {
	d := w.d
	w.unfollow()
	res := rtcontainer.Result{ExitCode: -1, Began: d.now(), Created: w.created, Started: w.started}
	if ctx.Err() != nil {
		return d.finish(ctx, budget{}, w.name, run{aborted: true}, aborted(ctx), res)
	}
	b := newBudget(ctx, res.Began)
	runCtx, cancel := b.runContext(ctx)
	defer cancel()
	out, runErr := d.claim(runCtx, b, w.id, container.WaitConditionNotRunning, input, &res, nil)
	return d.finish(ctx, b, w.name, out, runErr, res)
}

// Discard implements container.Warm: the container is removed as a failed
// run's is (killed, removed, removed again), or handed to the background
// remover; then Discard waits, until ctx ends, for the remover to confirm
// it gone, so a pool that counts it until Discard returns counts it while
// it exists.
func (w *warm) Discard(ctx context.Context) error {
	w.unfollow()
	res := rtcontainer.Result{ExitCode: -1}
	b := newBudget(ctx, w.d.now())
	if err := w.d.settleRun(ctx, b, w.name, true, true, &res); err != nil {
		return fmt.Errorf("%w: %w", rtcontainer.ErrCleanup, err)
	}
	if res.Settled != nil {
		select {
		case <-res.Settled:
		case <-ctx.Done(): // queued: the remover goes on, the reaper after it
		}
	}
	return nil
}

var _ rtcontainer.Prestarter = (*Driver)(nil)
