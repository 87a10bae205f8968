package workerimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

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
