package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/wait"
)

// cleanup force-removes the container by its exact name (docs/sealed-turn.md, "The container" "finally")
// within the run's budget. An aborted run is SIGKILLed first. When the run
// was aborted or failed (an exit code other than 0, a kill after a stream
// overflow, an engine error), a second removal follows after 100 ms: a
// create request still in flight when the context ended may make the
// container appear after the first removal. Cleanup ignores the run's
// cancellation, because an aborted turn must still clean up, but not its
// budget: an error means the container was not confirmed gone in time, and
// the caller queues it for the background remover.
//
// Names are exact: Validate refuses all-hex names, so the engine cannot
// resolve a name that is already gone as a prefix of another container's id.
func (d *Driver) cleanup(ctx context.Context, b budget, name string, aborted, failed bool) error {
	ctx, cancel := b.bounded(ctx, d.now(), cleanupBudget)
	defer cancel()
	if aborted {
		// Force removal kills too; the kill comes first as in docs/sealed-turn.md, "The container", with
		// at most half the time, so that a hung kill leaves time to try
		// the removal.
		kctx, kcancel := context.WithTimeout(ctx, remaining(ctx)/2)
		d.kill(kctx, name)
		kcancel()
	}
	if err := d.removeUntil(ctx, name, 0); err != nil {
		return err
	}
	if aborted || failed {
		if !wait.Sleep(ctx, secondRemovalGap) {
			return fmt.Errorf("remove %s again: %w", name, context.Cause(ctx))
		}
		return d.removeUntil(ctx, name, 0)
	}
	return nil
}

// removeUntil force-removes ref until the engine confirms it gone (removed,
// or "no such container"), retrying any error with backoff: a conflict
// ("removal already in progress"), a timeout, an unreachable engine. Each
// attempt has its own deadline of at most removeTimeout. It stops with the
// last error when ctx ends or after maxAttempts attempts (0: no limit).
func (d *Driver) removeUntil(ctx context.Context, ref string, maxAttempts int) error {
	for attempt := 0; ; attempt++ {
		err := d.removeOnce(ctx, ref)
		if err == nil {
			return nil
		}
		if (maxAttempts > 0 && attempt+1 >= maxAttempts) || !d.retry.wait(ctx, attempt, nil) {
			return fmt.Errorf("remove %s (attempt %d): %w", ref, attempt+1, err)
		}
	}
}

// removeOnce is one force removal; "no such container" counts as done.
func (d *Driver) removeOnce(ctx context.Context, ref string) error {
	actx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	_, err := d.api.ContainerRemove(actx, ref, client.ContainerRemoveOptions{Force: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// kill sends SIGKILL: SIGTERM would go to a PID 1 that may ignore it.
// Errors are ignored because the force-removal that always follows is
// authoritative. The caller bounds ctx.
func (d *Driver) kill(ctx context.Context, ref string) {
	_, _ = d.api.ContainerKill(ctx, ref, client.ContainerKillOptions{Signal: "KILL"})
}

// remaining is the time left before ctx's deadline; ctx must have one.
func remaining(ctx context.Context) time.Duration {
	deadline, _ := ctx.Deadline()
	return time.Until(deadline)
}

// Reap implements container.OneShot: it force-removes every container,
// running or not, labelled as a turn container of this installation, each
// in up to reapAttempts attempts with backoff, within ctx.
func (d *Driver) Reap(ctx context.Context, installation string) (int, error) {
	list, err := d.listTurns(ctx, installation)
	if err != nil {
		return 0, err
	}
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	return removeEach(ids, func(id string) error { return d.removeUntil(ctx, id, reapAttempts) })
}

// removeEach removes every container of ids with remove and counts those
// removed; the failures, all tried, come back joined under ErrCleanup.
func removeEach(ids []string, remove func(id string) error) (int, error) {
	removed, errs := 0, []error(nil)
	for _, id := range ids {
		if err := remove(id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("%w: %w", rtcontainer.ErrCleanup, errors.Join(errs...))
	}
	return removed, nil
}

// listTurns lists this installation's turn containers, running or not.
func (d *Driver) listTurns(ctx context.Context, installation string) ([]container.Summary, error) {
	labels, err := rtcontainer.TurnLabels(installation)
	if err != nil {
		return nil, err
	}
	filters := client.Filters{}
	for k, v := range labels {
		filters.Add("label", k+"="+v)
	}
	list, err := d.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return nil, engineErr("list", err)
	}
	// The daemon filtered already; checking again keeps a filter bug from
	// removing someone else's container.
	return slices.DeleteFunc(list.Items, func(c container.Summary) bool {
		return c.Labels[rtcontainer.InstallationLabel] != installation || c.Labels[rtcontainer.RoleLabel] != rtcontainer.RoleTurn
	}), nil
}
