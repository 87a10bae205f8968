// Package docker implements container.Driver on the Docker Engine API
// (github.com/moby/moby/client): one sealed container per turn, created with
// exactly the container.Spec profile, never pulled, fed through an attach
// stream and always force-removed by its exact name.
package docker

import (
	"context"
	"io"
	"time"

	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// engine is the part of the Engine API client the driver uses. It is narrow
// so that tests can script the engine's answers (removal races, kills)
// without a daemon.
type engine interface {
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerAttach(ctx context.Context, id string, options client.ContainerAttachOptions) (client.ContainerAttachResult, error)
	ContainerWait(ctx context.Context, id string, options client.ContainerWaitOptions) client.ContainerWaitResult
	ContainerStart(ctx context.Context, id string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerKill(ctx context.Context, id string, options client.ContainerKillOptions) (client.ContainerKillResult, error)
	ContainerRemove(ctx context.Context, id string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ImageInspect(ctx context.Context, ref string, options ...client.ImageInspectOption) (client.ImageInspectResult, error)
	ImageBuild(ctx context.Context, buildContext io.Reader, options client.ImageBuildOptions) (client.ImageBuildResult, error)
	ImageRemove(ctx context.Context, ref string, options client.ImageRemoveOptions) (client.ImageRemoveResult, error)
	Ping(ctx context.Context, options client.PingOptions) (client.PingResult, error)
}

var _ engine = (*client.Client)(nil)

// Limits and delays of a run (§3.3, §3.4).
const (
	stdoutLimit      = 2 << 20   // 2 MiB of reply JSON
	stderrLimit      = 128 << 10 // 128 KiB, counted and discarded
	removeAttempts   = 3
	removeTimeout    = 5 * time.Second
	killTimeout      = 5 * time.Second
	secondRemovalGap = 100 * time.Millisecond
)

// Driver runs sealed turn containers on a Docker daemon. It is safe for
// concurrent use; each Run owns one container.
type Driver struct {
	api engine
	now func() time.Time
	// afterExit, when set by tests, runs after the worker exited and
	// before removal, so the container can be inspected.
	afterExit func(id string)
}

var _ rtcontainer.Driver = (*Driver)(nil)

// New returns a Driver on cli. Build cli with client.New(client.FromEnv)
// or client.WithHost; the client negotiates the API version down to the
// daemon's on first use (API 1.41, Docker 20.10, is enough).
func New(cli *client.Client) *Driver { return newDriver(cli) }

func newDriver(api engine) *Driver { return &Driver{api: api, now: time.Now} }

// Ping checks that the daemon answers and returns the API version the
// client negotiated. Errors wrap container.ErrEngine.
func (d *Driver) Ping(ctx context.Context) (apiVersion string, err error) {
	res, err := d.api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		return "", engineErr("ping", err)
	}
	return res.APIVersion, nil
}
