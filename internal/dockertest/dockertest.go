// Package dockertest gives integration tests a client on the local Docker
// daemon under one rule: without a reachable daemon a test skips, except
// under CI=true, where it fails, because CI installs and starts Docker and
// an integration test that silently skipped there would prove nothing.
package dockertest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"
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
