package docker

import (
	"context"
	"fmt"
	"time"

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
	b := newBudget(ctx, d.now())
	d.track(spec.Name)
	w := &warm{d: d, name: spec.Name}
	out, err := d.prestart(ctx, b, spec, w)
	if err == nil {
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

// warm is one prestarted container: its name, its engine ID and when it
// was created and started.
type warm struct {
	d                *Driver
	name, id         string
	created, started time.Time
}

func (w *warm) Name() string { return w.name }

// Run implements container.Warm: the claim attaches, waits for the
// container not to run (a worker that died while it waited answers at
// once), writes the turn and supervises it as a cold run is supervised;
// then the same finish.
func (w *warm) Run(ctx context.Context, input []byte) (rtcontainer.Result, error) {
	d := w.d
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
// remover.
func (w *warm) Discard(ctx context.Context) error {
	res := rtcontainer.Result{ExitCode: -1}
	b := newBudget(ctx, w.d.now())
	if err := w.d.settleRun(ctx, b, w.name, true, true, &res); err != nil {
		return fmt.Errorf("%w: %w", rtcontainer.ErrCleanup, err)
	}
	return nil
}

var _ rtcontainer.Prestarter = (*Driver)(nil)
