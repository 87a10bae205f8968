// Package docker is the Docker engine: it implements both lifecycle
// interfaces of package container on the Docker Engine API
// (github.com/moby/moby/client). Driver is container.OneShot: one sealed
// container per turn, created with exactly the container.Spec profile,
// never pulled, fed its input on stdin through an attach stream, its run
// directory bound read-only at /broker, and always force-removed by its
// exact name. SessionDriver is container.LongLived: one long-lived
// container per channel with the container.SessionSpec profile
// (session.go).
//
// They are two types because they share no state: Driver owns the
// ownership table and the background remover that make its removals
// converge, SessionDriver owns nothing (every call asks the engine), and
// each speaks to a narrow slice of the Engine API that its tests script
// without a daemon. Their containers carry different role labels, so
// neither's reaper touches the other's.
//
// Removal converges: what a run could not remove within its deadline is
// handed to the Driver's background remover, which retries with backoff
// until the engine confirms the container gone, and ReapEvery removes any
// labelled container that no run of this Driver owns. Close ends both.
package docker

import (
	"context"
	"io"
	"log/slog"
	"sync"
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
	ImageList(ctx context.Context, options client.ImageListOptions) (client.ImageListResult, error)
	Ping(ctx context.Context, options client.PingOptions) (client.PingResult, error)
}

var _ engine = (*client.Client)(nil)

// Limits and delays of a run (docs/sealed-turn.md, "The container"; docs/sealed-turn.md, "Deadlines and cleanup when the engine is slow, down or wedged", and the deadline budget of
// budget.go).
const (
	removeTimeout    = 5 * time.Second
	createTimeout    = 10 * time.Second // a create the turn's end does not cut (execute)
	exitDrain        = 2 * time.Second  // how long the output may stay open after the exit (supervise)
	killTimeout      = 5 * time.Second
	secondRemovalGap = 100 * time.Millisecond
	// reapAttempts bounds the removal attempts of each container in a
	// one-shot Reap (startup, shutdown, `rtsandbox reap`).
	reapAttempts = 5
	// listTimeout bounds the container listing of a reaper pass.
	listTimeout = 10 * time.Second
	// maxRemovals bounds the engine removals the background remover runs
	// at once: Docker 20.10 can deadlock under bursts.
	maxRemovals = 4
)

// Driver runs sealed turn containers on a Docker daemon. It is safe for
// concurrent use; each Run owns one container. A Driver that ever queued a
// removal owns goroutines until Close.
type Driver struct {
	api   engine
	now   func() time.Time
	log   *slog.Logger
	retry backoff
	// afterExit, when set by tests, runs after the worker exited and
	// before removal, so the container can be inspected.
	afterExit func(id string)

	mu     sync.Mutex
	owned  map[string]ownership // names of running or queued containers
	queued int                  // owned names in the background remover
	closed bool
	bg     context.Context // the background remover's; nil until first use
	stopBG context.CancelFunc
	nudged chan struct{} // closed and replaced to wake waiting removals
	slots  chan struct{} // maxRemovals engine removals at once
	wg     sync.WaitGroup
}

// ownership is what the Driver does with a container name it owns.
type ownership int

const (
	running ownership = iota + 1 // a Run is using it
	queued                       // the background remover is removing it
)

var _ rtcontainer.OneShot = (*Driver)(nil)

// Option configures a Driver.
type Option func(*Driver)

// WithLogger sends the background remover's and the reaper's operator
// records to log; by default they are discarded.
func WithLogger(log *slog.Logger) Option {
	return func(d *Driver) {
		if log != nil {
			d.log = log
		}
	}
}

// New returns a Driver on cli. Build cli with client.New(client.FromEnv)
// or client.WithHost; the client negotiates the API version down to the
// daemon's on first use (API 1.41, Docker 20.10, is enough). Call Close
// when done, before closing cli.
func New(cli *client.Client, opts ...Option) *Driver { return newDriver(cli, opts...) }

func newDriver(api engine, opts ...Option) *Driver {
	d := &Driver{
		api: api, now: time.Now, log: slog.New(slog.DiscardHandler),
		retry: backoff{base: 100 * time.Millisecond, max: 5 * time.Second},
		owned: map[string]ownership{}, nudged: make(chan struct{}),
		slots: make(chan struct{}, maxRemovals),
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Ping checks that the daemon answers and returns the API version the
// client negotiated. Errors wrap container.ErrEngine.
func (d *Driver) Ping(ctx context.Context) (apiVersion string, err error) {
	res, err := d.api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		return "", engineErr("ping", err)
	}
	return res.APIVersion, nil
}
