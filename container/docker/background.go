package docker

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// A Driver owns a container name from before its create request until the
// engine confirms the container gone: first as running (a Run uses it),
// then, if the run's own cleanup did not finish, as queued (the background
// remover retries it). The reaper never touches an owned name, and an owned
// name is never dropped unconfirmed, except by Close after its deadline,
// which reports it.

// track marks name as used by a Run. A name still queued stays queued:
// its create will fail on the name and remove nothing.
func (d *Driver) track(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owned[name] == 0 {
		d.owned[name] = running
	}
}

// untrack forgets a Run's name: its container is gone (or was never ours).
func (d *Driver) untrack(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owned[name] == running {
		delete(d.owned, name)
	}
}

// Pending returns how many containers the background remover has yet to
// see removed, for readiness checks and metrics.
func (d *Driver) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queued
}

// enqueue hands name to the background remover, which retries its force
// removal with backoff until the engine confirms it gone. The returned
// channel closes then, or when Close gives up on it. It returns nil,
// queuing nothing, once Close has begun, or when name is already queued
// (reapers racing) or used by a Run (unless run is set: the Run itself
// hands over its own container).
func (d *Driver) enqueue(name string, run bool) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	state := d.owned[name]
	if d.closed || state == queued || (state == running && !run) {
		return nil
	}
	if d.bg == nil {
		d.bg, d.stopBG = context.WithCancel(context.Background())
	}
	d.owned[name] = queued
	d.queued++
	done := make(chan struct{})
	d.wg.Go(func() {
		defer close(done)
		d.converge(name)
	})
	return done
}

// converge removes name with backoff until the engine confirms it gone or
// Close gives up. At most maxRemovals removals run at once.
func (d *Driver) converge(name string) {
	ctx := d.bg
	for attempt := 0; ; attempt++ {
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		err := d.removeOnce(ctx, name)
		<-d.slots
		if err == nil {
			d.settle(name)
			if attempt > 0 {
				d.log.Info("queued container removed", "container", name, "attempts", attempt+1)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		// Loud at the first failures, then ever more rarely (attempts
		// 1, 2, 4, 8, …): the backoff caps at seconds, the log should not.
		if bits.OnesCount(uint(attempt+1)) == 1 {
			d.log.Warn("container removal failed; retrying", "container", name, "attempts", attempt+1, "err", err)
		}
		if !d.retry.wait(ctx, attempt, d.wake()) {
			return
		}
	}
}

// settle forgets a queued name whose container is gone.
func (d *Driver) settle(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.owned[name] == queued {
		delete(d.owned, name)
		d.queued--
	}
}

// wake returns the channel that the next nudge closes.
func (d *Driver) wake() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nudged
}

// nudge cuts every queued removal's backoff short: the engine just
// answered, so it is worth trying now.
func (d *Driver) nudge() {
	d.mu.Lock()
	defer d.mu.Unlock()
	close(d.nudged)
	d.nudged = make(chan struct{})
}

// Close stops the Driver's background work: no removal is queued any more
// (a Run whose container is not confirmed gone then fails with
// container.ErrCleanup), queued removals go on until they succeed or ctx
// ends, then the remover stops. Call it after the runtime has ended its
// turns, and stop ReapEvery's context first. Closing twice is harmless.
// Errors wrap container.ErrCleanup and name the containers still queued
// when ctx ended; they remain for the next Reap.
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	stop := d.stopBG
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if stop != nil {
			stop()
		}
		<-done
	}
	if stop != nil {
		stop()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var left []string
	for name, state := range d.owned {
		if state == queued {
			left = append(left, name)
		}
	}
	if len(left) == 0 {
		return nil
	}
	slices.Sort(left)
	return fmt.Errorf("%w: %d container(s) still queued for removal: %s: %w",
		rtcontainer.ErrCleanup, len(left), strings.Join(left, ", "), context.Cause(ctx))
}
