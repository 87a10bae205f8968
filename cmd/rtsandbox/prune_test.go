package main

import (
	"context"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
)

// TestImageBuildPrunesOldWorkerImage: `rtsandbox image build` twice under
// one tag leaves the first build untagged; the second build removes it
// and names it with its size.
func TestImageBuildPrunesOldWorkerImage(t *testing.T) {
	cli := opsDocker(t)
	ctx := context.Background()
	tag := "rtsandbox-test-prune:" + opsRandom()
	opsBuildImage(t, cli, tag, "--tag", tag)
	first, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runOps(t, "image", "build", "--tag", tag)
	if code != exitOK {
		t.Fatalf("second image build = %d\n%s", code, stderr)
	}
	short := first.ID[:len("sha256:")+12]
	if !strings.Contains(stdout, "old untagged worker image(s)") || !strings.Contains(stdout, short+" (") {
		t.Errorf("second image build stdout = %q; want the first image %s named as removed", stdout, short)
	}
	if _, err := cli.ImageInspect(ctx, first.ID); !cerrdefs.IsNotFound(err) {
		t.Errorf("first build %s after the second: %v; want it removed", first.ID, err)
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		t.Errorf("tagged image: %v", err)
	}
}
