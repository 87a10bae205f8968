package docker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Run implements container.OneShot. The order follows docs/sealed-turn.md, "The container": canonicalise and
// validate, refuse an already-ended context, create, attach, wait-register,
// start, write stdin, read both streams and the exit concurrently; then
// always remove, and only then judge the reply.
//
// Time follows the budget (budget.go): the worker's run is cut shortly
// before ctx's deadline, kill and removal get the rest plus at most
// overrun, and a container not confirmed gone by then is queued for the
// background remover (Result.CleanupPending). A run cut by its reserve
// waits for ctx's own end, so it reports the turn's cause (deadline, stop)
// as any aborted run does.
func (d *Driver) Run(ctx context.Context, spec rtcontainer.Spec, input []byte) (rtcontainer.Result, error) {
	res := rtcontainer.Result{ExitCode: -1, Began: d.now()}
	spec, err := canonical(spec)
	if err != nil {
		return res, err
	}
	if ctx.Err() != nil {
		return res, aborted(ctx)
	}
	b := newBudget(ctx, res.Began)
	runCtx, cancel := b.runContext(ctx)
	defer cancel()
	d.track(spec.Name)
	out, runErr := d.execute(runCtx, b, spec, input, &res)
	return d.finish(ctx, b, spec.Name, out, runErr, res)
}

// finish ends a run that execute (cold) or a warm claim drove: it settles
// the container (removal, or the background remover), then judges the
// outcome and the reply. One path for both, so a warm run ends exactly as
// a cold one.
func (d *Driver) finish(ctx context.Context, b budget, name string, out run, runErr error, res rtcontainer.Result) (rtcontainer.Result, error) {
	if out.notOurs {
		d.untrack(name)
		return res, runErr
	}
	if out.early && runErr == nil {
		// Past here an early reply is one that does not parse: runErr.
		if res.Reply, runErr = wire.ParseReply(out.stdout); runErr == nil {
			return d.settleAfter(name, res)
		}
	}
	// A run that failed before judging the reply (a kill after a stream
	// overflow, an engine error, an early reply that does not parse) is
	// cleaned up like a non-zero exit.
	failed := runErr != nil || res.ExitCode != 0
	if !failed {
		res.StderrTail = nil
	}
	if err := d.settleRun(ctx, b, name, out.aborted, failed, &res); err != nil {
		// Neither removed nor queued: the container may stay. The run's
		// own error stays in the chain.
		if runErr != nil {
			return res, fmt.Errorf("%w: %w (run error: %w)", rtcontainer.ErrCleanup, err, runErr)
		}
		return res, fmt.Errorf("%w: %w", rtcontainer.ErrCleanup, err)
	}
	if out.aborted {
		// Cut by the reserve, ctx ends within it; otherwise it ended.
		<-ctx.Done()
		return res, aborted(ctx)
	}
	if runErr != nil {
		return res, runErr
	}
	if res.ExitCode != 0 {
		return res, fmt.Errorf("%w: exit code %d", rtcontainer.ErrWorkerFailed, res.ExitCode)
	}
	var err error
	res.Reply, err = wire.ParseReply(out.stdout)
	return res, err
}

// settleAfter returns an early reply's result and removes its container
// after (Result.Settled): the worker is done, and the engine's handling of
// its exit and the removal need not delay the answer. The removal has the
// cleanup's own budget; one not confirmed in it goes to the background
// remover, and Settled closes when that one confirms it. Once Close has
// begun it removes in the foreground instead.
func (d *Driver) settleAfter(name string, res rtcontainer.Result) (rtcontainer.Result, error) {
	settled := make(chan struct{})
	remove := func(res *rtcontainer.Result) error {
		return d.settleRun(context.Background(), budget{}, name, false, false, res)
	}
	d.mu.Lock()
	closed := d.closed
	if !closed {
		res.Settled = settled
		d.wg.Go(func() {
			defer close(settled)
			var after rtcontainer.Result
			if err := remove(&after); err != nil {
				d.log.Warn("an answered turn's container was not removed; the next reap removes it", "container", name, "err", err)
			}
			if after.Settled != nil {
				<-after.Settled
			}
		})
	}
	d.mu.Unlock()
	if closed {
		if err := remove(&res); err != nil {
			return res, fmt.Errorf("%w: %w", rtcontainer.ErrCleanup, err)
		}
	}
	return res, nil
}

// settleRun removes the run's container in the foreground budget, or
// queues it for the background remover (CleanupPending, and Settled closes
// once the remover confirms it gone). It fails only when neither happened
// (Close has begun).
func (d *Driver) settleRun(ctx context.Context, b budget, name string, aborted, failed bool, res *rtcontainer.Result) error {
	err := d.cleanup(ctx, b, name, aborted, failed)
	if err == nil {
		d.untrack(name)
		res.Removed = d.now()
		return nil
	}
	if gone := d.enqueue(name, true); gone != nil {
		res.CleanupPending, res.Settled = true, gone
		return nil
	}
	d.untrack(name)
	return err
}

// canonical resolves symlinks in the mount paths so an operator path cannot
// redirect a mount, validating before (so relative or injected input is
// refused as given) and after (so a symlink cannot lead to "/" or nest the
// two mounts).
func canonical(spec rtcontainer.Spec) (rtcontainer.Spec, error) {
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	var err error
	if spec.RunDir, err = realpath(spec.RunDir); err != nil {
		return spec, err
	}
	if spec.WorkspaceDir != "" {
		if spec.WorkspaceDir, err = realpath(spec.WorkspaceDir); err != nil {
			return spec, err
		}
	}
	return spec, spec.Validate()
}

func realpath(p string) (string, error) {
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: resolve mount path: %w", rtcontainer.ErrInvalidSpec, err)
	}
	return filepath.Abs(resolved)
}

// run is what execute learned for the cleanup and the reply check.
type run struct {
	stdout  []byte
	early   bool // the reply ended with its end mark before the exit came
	aborted bool // the context ended; the container is killed before removal
	notOurs bool // create failed because the name is taken: nothing to clean up
}

// execute drives one container from create to exit. It records the phase
// timestamps and exit code in res; it never removes the container.
func (d *Driver) execute(ctx context.Context, b budget, spec rtcontainer.Spec, stdin []byte, res *rtcontainer.Result) (run, error) {
	created, err := d.create(ctx, b, spec)
	if err != nil {
		return failed(ctx, "create", err)
	}
	res.Created = d.now()
	if ctx.Err() != nil {
		return run{aborted: true}, aborted(ctx)
	}
	// Register the wait before start, so a worker that exits at once
	// cannot be missed.
	return d.claim(ctx, b, created.ID, container.WaitConditionNextExit, stdin, res, func() error {
		if _, err := d.api.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			return err
		}
		res.Started = d.now()
		return nil
	})
}

// create makes spec's container by the one createOptions. The create is
// not cut by the turn's end: the engine finishes a create the client gave
// up on, maybe after the cleanup looked for the container by name (a stop
// under load left such containers until the periodic reap). Within the
// budget the create answers, and then the container is known and the
// cleanup removes it.
func (d *Driver) create(ctx context.Context, b budget, spec rtcontainer.Spec) (client.ContainerCreateResult, error) {
	cctx, cancel := b.bounded(ctx, d.now(), createTimeout)
	defer cancel()
	return d.api.ContainerCreate(cctx, createOptions(spec))
}

// claim attaches to the container id, registers the wait for its exit
// (cond), runs start when the container is not started yet (nil for a
// warm one), hands the worker stdin and supervises it to the end.
func (d *Driver) claim(ctx context.Context, b budget, id string, cond container.WaitCondition, stdin []byte, res *rtcontainer.Result, start func() error) (run, error) {
	att, err := d.api.ContainerAttach(ctx, id, client.ContainerAttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return failed(ctx, "attach", err)
	}
	st := startStreams(att.HijackedResponse)
	defer func() {
		st.close() // the demultiplexer is done: the tail is stable
		res.StderrBytes, res.StderrTail = st.stderr.Len(), st.stderr.Tail()
	}()
	waitCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	exited := awaitExit(d.api.ContainerWait(waitCtx, id, client.ContainerWaitOptions{Condition: cond}))
	if start != nil {
		if err := start(); err != nil {
			return failed(ctx, "start", err)
		}
	}
	st.send(stdin)
	return d.supervise(ctx, b, id, st, exited, res)
}

// supervise waits for both the end of the output and the exit. An ended
// context or an overflowing stream kills the container at once.
func (d *Driver) supervise(ctx context.Context, b budget, id string, st *streams, exited <-chan exitStatus, res *rtcontainer.Result) (run, error) {
	killNow := func() {
		kctx, cancel := b.bounded(ctx, d.now(), killTimeout)
		defer cancel()
		d.kill(kctx, id)
	}
	output := st.done
	var drained <-chan time.Time // armed by the exit: the output must end soon after
	replied := st.stdout.Ended()
	if d.afterExit != nil {
		replied = nil // a test inspects the exited container
	}
	for output != nil || exited != nil {
		select {
		case <-ctx.Done():
			return run{aborted: true}, aborted(ctx)
		case <-replied:
			// The early reply: the worker is done; its exit would only
			// cost the engine's exit handling (container.OneShot).
			res.Replied = d.now()
			return run{stdout: st.stdout.Reply(), early: true}, nil
		case <-drained:
			// The engine keeps a stream open after the exit: a container
			// that ended before a warm claim attached, say. Not a hang
			// until the deadline: the run fails now.
			return run{}, engineErr("attach stream", fmt.Errorf("open %v after the worker exited", exitDrain))
		case err := <-output:
			output = nil
			if err != nil {
				killNow()
				return run{}, streamErr(err)
			}
		case s := <-exited:
			exited = nil
			if s.err != nil {
				killNow()
				return failed(ctx, "wait", s.err)
			}
			res.Exited, res.ExitCode = d.now(), s.code
			drained = time.After(exitDrain)
		}
	}
	if d.afterExit != nil {
		d.afterExit(id)
	}
	if st.stdout.Reply() != nil {
		// Whatever followed the end mark is not the reply.
		return run{stdout: st.stdout.Reply()}, nil
	}
	return run{stdout: st.stdout.Bytes()}, nil
}

type exitStatus struct {
	code int
	err  error
}

// awaitExit folds the client's two wait channels into one buffered channel.
// The goroutine ends once either channel yields, which the client guarantees
// once the wait's context is cancelled; it never blocks on sending.
func awaitExit(w client.ContainerWaitResult) <-chan exitStatus {
	out := make(chan exitStatus, 1)
	go func() {
		select {
		case r := <-w.Result:
			if r.Error != nil && r.Error.Message != "" {
				out <- exitStatus{code: -1, err: errors.New(r.Error.Message)}
				return
			}
			out <- exitStatus{code: int(r.StatusCode)}
		case err := <-w.Error:
			out <- exitStatus{code: -1, err: err}
		}
	}()
	return out
}

// failed classifies an engine error: an ended context wins, a missing image
// on create is the operator's to fix, anything else is ErrEngine.
func failed(ctx context.Context, op string, err error) (run, error) {
	switch {
	case ctx.Err() != nil:
		return run{aborted: true}, aborted(ctx)
	case op == "create" && cerrdefs.IsNotFound(err):
		// Create never pulls, so "not found" can only be the image.
		return run{}, fmt.Errorf("%w: %w", rtcontainer.ErrImageMissing, err)
	case op == "create" && cerrdefs.IsConflict(err):
		// The name belongs to a container we did not create (a 1-in-2^32
		// clash of the random part): removing "ours" would remove it.
		return run{notOurs: true}, engineErr(op, err)
	}
	return run{}, engineErr(op, err)
}

func streamErr(err error) error {
	if errors.Is(err, rtcontainer.ErrOutputLimit) {
		return err
	}
	return engineErr("attach stream", err)
}

func aborted(ctx context.Context) error {
	return fmt.Errorf("%w: %w", rtcontainer.ErrAborted, context.Cause(ctx))
}

func engineErr(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", rtcontainer.ErrEngine, op, err)
}
