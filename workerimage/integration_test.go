package workerimage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox/container/docker"
)

// dockerDriver returns a driver on the local daemon. Without a daemon the
// test skips, except under CI=true, where it fails.
func dockerDriver(t *testing.T) *docker.Driver {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = docker.New(cli).Ping(ctx)
		if err != nil {
			cli.Close()
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Docker daemon unreachable under CI=true: %v", err)
		}
		t.Skip("Docker integration test skipped:", err)
	}
	t.Cleanup(func() { cli.Close() })
	return docker.New(cli)
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
