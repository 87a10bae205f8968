package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/client"
)

// ImageSelector says which untagged images PruneImages may remove: only
// images that carry Label (a key; any value), whose entrypoint is
// Entrypoint (a finished build, never one of a build's intermediate
// layers) and that were created before Before (never the image of a
// build that may still be tagging it).
type ImageSelector struct {
	Label      string
	Entrypoint []string
	Before     time.Time
}

// PrunedImage is an image PruneImages removed.
type PrunedImage struct {
	ID   string
	Size int64 // bytes, as the engine lists it
}

// PruneImages removes the engine's untagged images that sel selects and
// no container (running or not) uses, and returns them. An image the
// engine refuses to remove (a container took it meanwhile: conflict) is
// left, never forced; other errors are joined and the rest still tried.
// Errors wrap container.ErrEngine.
func (d *Driver) PruneImages(ctx context.Context, sel ImageSelector) ([]PrunedImage, error) {
	if sel.Label == "" || len(sel.Entrypoint) == 0 || sel.Before.IsZero() {
		return nil, fmt.Errorf("prune images: a label, an entrypoint and a time are required")
	}
	filters := client.Filters{}
	filters.Add("dangling", "true")
	filters.Add("label", sel.Label)
	list, err := d.api.ImageList(ctx, client.ImageListOptions{Filters: filters})
	if err != nil {
		return nil, engineErr("list images", err)
	}
	used, err := d.imagesInUse(ctx)
	if err != nil {
		return nil, err
	}
	var out []PrunedImage
	var errs []error
	for _, im := range list.Items {
		if !d.prunable(ctx, im, sel, used) {
			continue
		}
		_, err := d.api.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{PruneChildren: true})
		switch {
		case err == nil:
			out = append(out, PrunedImage{ID: im.ID, Size: im.Size})
		case cerrdefs.IsConflict(err), cerrdefs.IsNotFound(err):
		default:
			errs = append(errs, engineErr("remove image "+im.ID, err))
		}
	}
	return out, errors.Join(errs...)
}

// prunable checks im against sel again (the engine filtered already; a
// filter bug must not remove someone's image) and against the
// containers: untagged, labelled, older than sel.Before, unused, and
// with sel's entrypoint.
func (d *Driver) prunable(ctx context.Context, im image.Summary, sel ImageSelector, used map[string]bool) bool {
	if _, ok := im.Labels[sel.Label]; !ok || used[im.ID] || im.Created > sel.Before.Unix() {
		return false
	}
	if slices.ContainsFunc(im.RepoTags, func(t string) bool { return t != "<none>:<none>" }) {
		return false
	}
	// The list's time is in whole seconds; the inspection's is exact.
	res, err := d.api.ImageInspect(ctx, im.ID)
	if err != nil || res.Config == nil || !slices.Equal(res.Config.Entrypoint, sel.Entrypoint) {
		return false
	}
	created, err := time.Parse(time.RFC3339Nano, res.Created)
	return err == nil && created.Before(sel.Before)
}

// imagesInUse are the image IDs of every container of the engine.
func (d *Driver) imagesInUse(ctx context.Context) (map[string]bool, error) {
	list, err := d.api.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, engineErr("list containers", err)
	}
	used := make(map[string]bool, len(list.Items))
	for _, c := range list.Items {
		used[c.ImageID] = true
	}
	return used, nil
}
