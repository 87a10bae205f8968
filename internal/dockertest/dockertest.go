// Package dockertest gives integration tests a client on the local Docker
// daemon under one rule: without a reachable daemon a test skips, except
// under CI=true, where it fails, because CI installs and starts Docker and
// an integration test that silently skipped there would prove nothing.
package dockertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"go.uber.org/goleak"
)

// InCI reports whether tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Connect returns a client on the daemon named by DOCKER_HOST (the local
// socket by default) once it has answered a ping.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker daemon unreachable: %w", err)
	}
	return cli, nil
}

// Require returns a client for tb, closed when tb ends. Without a daemon
// tb skips, or fails under CI.
func Require(tb testing.TB) *client.Client {
	tb.Helper()
	cli, err := Connect(context.Background())
	if err != nil {
		if InCI() {
			tb.Fatalf("Docker integration test cannot run under CI=true: %v", err)
		}
		tb.Skip("Docker integration test skipped:", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// RequireRuntime skips tb, or fails it under CI, unless check passes:
// the engine's check that it runs containers under runtime as the seal
// needs (docker.CheckRuntime). CI registers runsc (.ci/run), so a gVisor
// test that silently skipped there would prove nothing.
func RequireRuntime(tb testing.TB, runtime string, check func(context.Context) error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := check(ctx); err != nil {
		if InCI() {
			tb.Fatalf("runtime %s test cannot run under CI=true (.ci/run registers it): %v", runtime, err)
		}
		tb.Skipf("runtime %s test skipped: %v", runtime, err)
	}
}

// Daemon returns the network and address of the daemon DOCKER_HOST names
// (the local socket by default), for a test's engine proxy to dial.
func Daemon() (network, address string, err error) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = client.DefaultDockerHost
	}
	u, err := client.ParseHostURL(host)
	if err != nil {
		return "", "", err
	}
	return u.Scheme, u.Host, nil
}

// ClientVia returns a client on the engine socket at path (a test's
// proxy), closed when tb ends.
func ClientVia(tb testing.TB, path string) *client.Client {
	tb.Helper()
	cli, err := client.New(client.FromEnv, client.WithHost("unix://"+path))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Main runs a package's tests around a shared Docker setup. A setup error
// sets *skip (the integration tests then skip with it), except under CI,
// where the run fails without testing. teardown runs after the tests and
// its error fails the run, and so does a leaked goroutine.
func Main(m *testing.M, setup func() (teardown func() error, err error), skip *string) int {
	teardown, err := setup()
	if err != nil {
		if InCI() {
			fmt.Fprintln(os.Stderr, "docker integration setup failed (CI=true):", err)
			return 1
		}
		*skip = "Docker integration tests skipped: " + err.Error()
	}
	code := m.Run()
	if teardown != nil {
		if err := teardown(); err != nil {
			fmt.Fprintln(os.Stderr, "docker integration teardown:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// Engine is what Teardown needs of a container driver.
type Engine interface {
	Reap(ctx context.Context, installation string) (int, error)
	RemoveImage(ctx context.Context, ref string) error
	ImageExists(ctx context.Context, ref string) (bool, error)
}

// Teardown ends a package's integration run: a labelled container still
// there is an error (a test leaked it) and is removed; then the test
// images are removed and must be gone.
func Teardown(ctx context.Context, e Engine, installation string, images ...string) error {
	var errs []error
	if n, err := e.Reap(ctx, installation); err != nil || n > 0 {
		errs = append(errs, fmt.Errorf("reap at teardown removed %d labelled containers: %v", n, err))
	}
	for _, image := range images {
		if err := e.RemoveImage(ctx, image); err != nil {
			errs = append(errs, err)
		}
		if ok, _ := e.ImageExists(ctx, image); ok {
			errs = append(errs, fmt.Errorf("image %s still exists", image))
		}
	}
	return errors.Join(errs...)
}
