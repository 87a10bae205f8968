package docker

import (
	"context"
	"fmt"
	"strings"
	"time"

	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// ReapEvery removes, every interval until ctx ends, each container labelled
// as a turn container of installation that nobody owns: not a container a
// Run of this Driver is using or has queued, and not one for which live
// (nil: none) reports true. Live lets another owner of the installation's
// containers (a second driver, a session runtime) protect its own. Orphans
// go to the background remover, so they are retried until gone; a pass in
// which the engine answers also wakes every queued removal, so cleanup
// converges within about one interval of the engine's return.
//
// It returns nil when ctx ends, and at once an error wrapping
// container.ErrInvalidSpec for a bad installation id or an interval ≤ 0.
// Run it in its own goroutine; cancel ctx before Close.
func (d *Driver) ReapEvery(ctx context.Context, installation string, interval time.Duration, live func(name string) bool) error {
	if _, err := rtcontainer.TurnLabels(installation); err != nil {
		return err
	}
	if interval <= 0 {
		return fmt.Errorf("%w: reap interval %v", rtcontainer.ErrInvalidSpec, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := d.reapOnce(ctx, installation, listTimeout, live)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			d.log.Warn("container reaper cannot list containers", "installation", installation, "err", err)
		case err == nil && failing:
			d.log.Info("container reaper reaches the engine again", "installation", installation)
		}
		failing = err != nil
		if n > 0 {
			d.log.Warn("orphan containers queued for removal", "installation", installation, "count", n)
		}
	}
}

// reapOnce is one reaper pass: list within timeout, wake queued removals,
// queue the orphans. It returns how many it queued.
func (d *Driver) reapOnce(ctx context.Context, installation string, timeout time.Duration, live func(string) bool) (int, error) {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list, err := d.listTurns(lctx, installation)
	if err != nil {
		return 0, err
	}
	d.nudge()
	n := 0
	for _, c := range list {
		name := containerName(c.Names)
		if name == "" || (live != nil && live(name)) {
			continue
		}
		// enqueue skips what a Run of this Driver uses or already queued.
		if d.enqueue(name, false) != nil {
			n++
		}
	}
	return n, nil
}

// containerName is the engine's name of a container without its leading
// slash; "" when it has none.
func containerName(names []string) string {
	for _, n := range names {
		if n = strings.TrimPrefix(n, "/"); n != "" && !strings.Contains(n, "/") {
			return n
		}
	}
	return ""
}
