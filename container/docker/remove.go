package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// cleanup always force-removes the container by its exact name (§3.3
// "finally"). An aborted run is SIGKILLed first. When the run was aborted or
// failed (an exit code other than 0, a kill after a stream overflow, an
// engine error), a second removal follows after 100 ms: a
// create request still in flight when the context ended may make the
// container appear after the first removal. Cleanup runs on a context that
// ignores the run's cancellation, because an aborted turn must still clean
// up; each engine call has its own deadline.
//
// Names are exact: Validate refuses all-hex names, so the engine cannot
// resolve a name that is already gone as a prefix of another container's id.
func (d *Driver) cleanup(ctx context.Context, name string, aborted, failed bool) error {
	ctx = context.WithoutCancel(ctx)
	if aborted {
		d.kill(ctx, name)
	}
	if err := d.remove(ctx, name); err != nil {
		return err
	}
	if aborted || failed {
		time.Sleep(secondRemovalGap)
		return d.remove(ctx, name)
	}
	return nil
}

// remove force-removes ref in up to three attempts of at most 5 s each
// (§3.4). "No such container" means done. A conflict is the engine's
// "removal already in progress" (a racing removal of the same container):
// wait 100 ms, then 200 ms, and try again. Anything else fails at once.
func (d *Driver) remove(ctx context.Context, ref string) error {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, removeTimeout)
		_, err := d.api.ContainerRemove(actx, ref, client.ContainerRemoveOptions{Force: true})
		cancel()
		switch {
		case err == nil, cerrdefs.IsNotFound(err):
			return nil
		case cerrdefs.IsConflict(err) && attempt < removeAttempts-1:
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
		default:
			return fmt.Errorf("remove %s (attempt %d): %w", ref, attempt+1, err)
		}
	}
}

// Reap implements container.Driver: it force-removes every container,
// running or not, labelled as a turn container of this installation.
func (d *Driver) Reap(ctx context.Context, installation string) (int, error) {
	labels, err := rtcontainer.TurnLabels(installation)
	if err != nil {
		return 0, err
	}
	filters := client.Filters{}
	for k, v := range labels {
		filters.Add("label", k+"="+v)
	}
	list, err := d.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return 0, engineErr("list", err)
	}
	removed, errs := 0, []error(nil)
	for _, c := range list.Items {
		// The daemon filtered already; checking again keeps a filter bug
		// from removing someone else's container.
		if c.Labels[rtcontainer.InstallationLabel] != installation || c.Labels[rtcontainer.RoleLabel] != rtcontainer.RoleTurn {
			continue
		}
		if err := d.remove(ctx, c.ID); err != nil {
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
