package workerimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

// dockerDriver returns a driver on the local daemon (see dockertest for
// the skip and CI rule).
func dockerDriver(t *testing.T) *docker.Driver {
	t.Helper()
	return docker.New(dockertest.Require(t))
}

func TestIntegrationBuild(t *testing.T) {
	mustWorker(t)
	d := dockerDriver(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tag := "rtsandbox-test-worker:" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if err := d.RemoveImage(context.Background(), tag); err != nil {
			t.Errorf("RemoveImage(%s) = %v", tag, err)
		}
		if ok, _ := d.ImageExists(context.Background(), tag); ok {
			t.Errorf("image %s still exists after removal", tag)
		}
	})
	built, err := EnsureBuilt(ctx, d, tag)
	if err != nil || !built {
		t.Fatalf("EnsureBuilt(%s) = %v, %v; want true, nil", tag, built, err)
	}
	if ok, err := d.ImageExists(ctx, tag); !ok || err != nil {
		t.Errorf("ImageExists(%s) = %v, %v; want true, nil", tag, ok, err)
	}
	if built, err := EnsureBuilt(ctx, d, tag); built || err != nil {
		t.Errorf("second EnsureBuilt(%s) = %v, %v; want false, nil", tag, built, err)
	}
}

// engineLabels reads image labels from the local daemon, for Compare.
type engineLabels struct {
	*docker.Driver
	cli *client.Client
}

func (e engineLabels) ImageLabels(ctx context.Context, ref string) (map[string]string, bool, error) {
	res, err := e.cli.ImageInspect(ctx, ref)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case res.Config == nil:
		return map[string]string{}, true, nil
	}
	return res.Config.Labels, true, nil
}

// Issue 21, on a real engine: a foreign image (no label of this project)
// under a tag is refused before anything is built and keeps its image
// ID; under a tag that is this project's by name (the default tag's
// rule, ownTag) the same image is rebuilt into the current worker.
func TestIntegrationEnsureCurrentForeign(t *testing.T) {
	worker := mustWorker(t)
	cli := dockertest.Require(t)
	e := engineLabels{Driver: docker.New(cli), cli: cli}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	tag := "rtsandbox-test-foreign:" + nonce
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A unique label keeps the image's ID the test's own.
	if err := e.BuildImage(ctx, tag, map[string][]byte{"Dockerfile": []byte("FROM scratch\nLABEL rtsandbox.test=" + nonce + "\n")}); err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	before, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ref := range []string{tag, before.ID} {
			if err := e.RemoveImage(context.Background(), ref); err != nil {
				t.Errorf("RemoveImage(%s) = %v", ref, err)
			}
		}
	})

	c, err := EnsureCurrent(ctx, e, tag, worker, false)
	if !errors.Is(err, ErrForeign) || c.State != Foreign {
		t.Fatalf("EnsureCurrent(foreign) = %v, %v; want Foreign, ErrForeign", c.State, err)
	}
	if after, err := cli.ImageInspect(ctx, tag); err != nil || after.ID != before.ID {
		t.Fatalf("image under %s after the refusal = %v (%v); want %s untouched", tag, after.ID, err, before.ID)
	}

	if c, err := EnsureCurrent(ctx, e, tag, worker, true); err != nil || c.State != Foreign {
		t.Fatalf("EnsureCurrent(foreign, own tag) = %v, %v; want Foreign, rebuilt", c.State, err)
	}
	if c, err := Compare(ctx, e, tag, worker); err != nil || c.State != Current {
		t.Errorf("Compare after the rebuild = %v, %v; want current", c.State, err)
	}
}
