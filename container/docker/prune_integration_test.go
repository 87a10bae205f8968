package docker

import (
	"context"
	"fmt"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// TestIntegrationPruneImages: after two builds under one tag, the first
// (untagged now, ours by label) is removed; an untagged image without
// our label, an untagged one of ours that a stopped container uses, one
// of ours with another entrypoint (a build's intermediate layer) and
// the tagged one are kept. The label key is random, so images of other
// tests running on the daemon are never selected.
func TestIntegrationPruneImages(t *testing.T) {
	needDocker(t)
	ctx := context.Background()
	d := newDriver(integ.cli)
	label := "rtsandbox.test.prune-" + randomHex(4)
	// run marks every image the test builds, foreign ones included.
	run := "rtsandbox.test.prune-run=" + randomHex(8)
	// Registered first, so it runs last: no image of this test is left,
	// the builds' intermediate images included.
	t.Cleanup(func() {
		left, err := integ.cli.ImageList(context.Background(), client.ImageListOptions{All: true, Filters: client.Filters{}.Add("label", run)})
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range left.Items {
			t.Errorf("image %s (labels %v) left by the test", im.ID, im.Labels)
		}
	})
	build := func(tag, labelKey, entrypoint string) string {
		t.Helper()
		dockerfile := fmt.Sprintf("FROM scratch\nLABEL %s %s=%q\nENTRYPOINT [%q]\n", run, labelKey, randomHex(8), entrypoint)
		if err := d.BuildImage(ctx, tag, map[string][]byte{"Dockerfile": []byte(dockerfile)}); err != nil {
			t.Fatal(err)
		}
		res, err := integ.cli.ImageInspect(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		// By the driver's removal, which prunes the untagged parents a
		// classic build leaves (the LABEL step's image): a removal
		// without them left one dangling image per build.
		t.Cleanup(func() {
			if err := d.RemoveImage(context.Background(), res.ID); err != nil {
				t.Errorf("remove image %s: %v", res.ID, err)
			}
		})
		return res.ID
	}
	ours := "rtsandbox-test-prune:" + randomHex(4)
	oldOurs := build(ours, label, "/worker")
	foreignTag := "rtsandbox-test-prune-foreign:" + randomHex(4)
	oldForeign := build(foreignTag, "other.label."+randomHex(4), "/worker")
	build(foreignTag, "other.label."+randomHex(4), "/worker")
	usedTag := "rtsandbox-test-prune-used:" + randomHex(4)
	used := build(usedTag, label, "/worker")
	name := "rtsandbox-prune-" + randomHex(4)
	if _, err := integ.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: &container.Config{Image: used},
		HostConfig: &container.HostConfig{NetworkMode: "none", LogConfig: container.LogConfig{Type: "none"}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = integ.cli.ContainerRemove(context.Background(), name, client.ContainerRemoveOptions{Force: true})
	})
	build(usedTag, label, "/worker")
	otherEntry := "rtsandbox-test-prune-layer:" + randomHex(4)
	layer := build(otherEntry, label, "/not-the-worker")
	build(otherEntry, label, "/not-the-worker")
	before := time.Now()
	current := build(ours, label, "/worker")

	got, err := d.PruneImages(ctx, ImageSelector{Label: label, Entrypoint: []string{"/worker"}, Before: before})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != oldOurs {
		t.Fatalf("pruned = %+v; want only the old image of ours %s", got, oldOurs)
	}
	if _, err := integ.cli.ImageInspect(ctx, oldOurs); !cerrdefs.IsNotFound(err) {
		t.Errorf("old image of ours after the prune: %v; want it gone", err)
	}
	for what, id := range map[string]string{"the foreign untagged image": oldForeign, "the image a stopped container uses": used,
		"the image of another entrypoint": layer, "the tagged image": current} {
		if _, err := integ.cli.ImageInspect(ctx, id); err != nil {
			t.Errorf("%s (%s) after the prune: %v; want it kept", what, id, err)
		}
	}
	// A time before every build selects nothing.
	if got, err := d.PruneImages(ctx, ImageSelector{Label: label, Entrypoint: []string{"/worker"}, Before: time.Unix(1, 0)}); err != nil || len(got) != 0 {
		t.Errorf("prune of images created before 1970 = %+v, %v; want none", got, err)
	}
}
