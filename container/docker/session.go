package docker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// SessionDriver runs the long-lived session containers of session mode
// (docs/session.md, "The container") on a Docker daemon: one per channel, created with
// exactly the rtcontainer.SessionSpec profile, never pulled, left running
// between turns and removed only by its exact name. It is separate from
// the sealed Driver: its containers carry the role label "session", which
// the sealed reaper never removes. It implements container.LongLived and
// is safe for concurrent use.
type SessionDriver struct {
	api     sessionEngine
	timeout time.Duration
}

// sessionEngine is the part of the Engine API client SessionDriver uses.
type sessionEngine interface {
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, id string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerInspect(ctx context.Context, id string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerRemove(ctx context.Context, id string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerLogs(ctx context.Context, id string, options client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerWait(ctx context.Context, id string, options client.ContainerWaitOptions) client.ContainerWaitResult
	Events(ctx context.Context, options client.EventsListOptions) client.EventsResult
}

var (
	_ sessionEngine         = (*client.Client)(nil)
	_ rtcontainer.LongLived = (*SessionDriver)(nil)
)

// Limits of the session driver (docs/session.md, "The container").
const (
	// sessionCallTimeout bounds every engine call, as the reference's.
	sessionCallTimeout = 15 * time.Second
	// maxLogRead bounds the bytes read for a log tail: 200 lines of a
	// hostile worker must not fill the host's memory.
	maxLogRead = 1 << 20
)

// NewSession returns a SessionDriver on cli (see New for building cli).
func NewSession(cli *client.Client) *SessionDriver { return newSessionDriver(cli) }

func newSessionDriver(api sessionEngine) *SessionDriver {
	return &SessionDriver{api: api, timeout: sessionCallTimeout}
}

// Status inspects the container name: missing when the engine does not
// know it, running when its process runs and is neither paused nor being
// restarted (serving), stopped otherwise, with its image and its profile
// and spec labels. A container Docker's restart policy is restarting
// (its worker crashed) is waited for, at most restartWait, so that a
// start does not remove the container Docker is about to bring back
// healthy. Errors wrap container.ErrEngine.
func (d *SessionDriver) Status(ctx context.Context, name string) (rtcontainer.SessionStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	res, err := d.api.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err == nil && res.Container.State != nil && res.Container.State.Restarting {
		d.awaitRestart(ctx, res.Container.ID, res.Container.State.FinishedAt)
		res, err = d.api.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	}
	if cerrdefs.IsNotFound(err) {
		return rtcontainer.SessionStatus{State: rtcontainer.StateMissing}, nil
	}
	if err != nil {
		return rtcontainer.SessionStatus{}, engineErr("inspect "+name, err)
	}
	c := res.Container
	st := rtcontainer.SessionStatus{State: rtcontainer.StateStopped}
	if serving(c.State) {
		st.State = rtcontainer.StateRunning
	}
	if c.Config != nil {
		st.Image = c.Config.Image
		st.Profile = c.Config.Labels[rtcontainer.ProfileLabel]
		st.Digest = c.Config.Labels[rtcontainer.SpecLabel]
	}
	return st, nil
}

// EnsureRunning leaves a running container whose image, profile label and
// spec digest match spec exactly; anything else under spec.Name is
// force-removed, and the container is created and started. Errors:
// container.ErrInvalidSpec, ErrImageMissing, ErrEngine, and ErrAborted
// (wrapping ctx's cause) when ctx ended before the container ran.
//
// A cancelled EnsureRunning leaves no container behind: the engine
// finishes a create or start whose client went away, so these two
// requests ignore ctx's end (each within its own call timeout), and once
// they have returned, whatever their outcome, a ctx that ended meanwhile
// has the container force-removed by its exact name at once.
func (d *SessionDriver) EnsureRunning(ctx context.Context, spec rtcontainer.SessionSpec) error {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return err
	}
	st, err := d.Status(ctx, spec.Name)
	if err != nil {
		return err
	}
	if st.Current(spec) {
		return nil
	}
	if st.State != rtcontainer.StateMissing {
		if err := d.Remove(ctx, spec.Name); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return aborted(ctx)
	}
	err = d.createAndStart(ctx, spec)
	if ctx.Err() == nil {
		return err
	}
	return errors.Join(aborted(ctx), err, d.Remove(context.WithoutCancel(ctx), spec.Name))
}

// createAndStart creates and starts spec's container, each request on a
// context detached from ctx's end and within the call timeout; a create
// that returns after ctx ended is not started.
func (d *SessionDriver) createAndStart(ctx context.Context, spec rtcontainer.SessionSpec) error {
	engine := context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(engine, d.timeout)
	defer cancel()
	created, err := d.api.ContainerCreate(cctx, sessionCreateOptions(spec))
	switch {
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %s", rtcontainer.ErrImageMissing, spec.Image)
	case err != nil:
		return engineErr("create "+spec.Name, err)
	case ctx.Err() != nil:
		return nil
	}
	sctx, scancel := context.WithTimeout(engine, d.timeout)
	defer scancel()
	if _, err := d.api.ContainerStart(sctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return engineErr("start "+spec.Name, err)
	}
	return nil
}

// Remove force-removes the container name; a missing one is fine. When
// someone else's removal of it is under way (an operator's docker rm -f),
// Remove waits for the engine to report it removed, within the call
// timeout: the next create needs the name free.
func (d *SessionDriver) Remove(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	_, err := d.api.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"):
		return d.awaitRemoved(ctx, name, err)
	}
	return engineErr("remove "+name, err)
}

// awaitRemoved waits for the engine to finish removing name; inProgress
// is the engine's answer that it is removing it.
func (d *SessionDriver) awaitRemoved(ctx context.Context, name string, inProgress error) error {
	w := d.api.ContainerWait(ctx, name, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	select {
	case <-w.Result:
		return nil
	case err := <-w.Error:
		if cerrdefs.IsNotFound(err) {
			return nil // gone before the wait began
		}
		return engineErr("remove "+name, errors.Join(inProgress, err))
	}
}

// ReapSessions force-removes every session container of installation,
// running or not (`rtsandbox reap`): the containers labelled with the
// installation and the role "session", and nothing else. It returns how
// many it removed. Errors: ErrInvalidSpec (bad installation id),
// ErrEngine, ErrCleanup.
func (d *SessionDriver) ReapSessions(ctx context.Context, installation string) (int, error) {
	return d.reap(ctx, installation, func(container.Summary) bool { return true })
}

// ReapStrays force-removes the session containers of installation whose
// name is not the one name gives their channel label: those left under
// an earlier session.container_prefix. Such a container would otherwise
// keep running (restart policy unless-stopped) on the channel's run and
// workspace directories, and its worker would announce itself to the
// channel's new broker next to the current one. A channel's current
// container stays. Returns and errors as ReapSessions.
func (d *SessionDriver) ReapStrays(ctx context.Context, installation string, name func(channel string) string) (int, error) {
	return d.reap(ctx, installation, func(c container.Summary) bool {
		want := "/" + name(c.Labels[rtcontainer.ChannelLabel])
		return len(c.Names) != 1 || c.Names[0] != want
	})
}

// reap force-removes the session containers of installation for which
// remove holds.
func (d *SessionDriver) reap(ctx context.Context, installation string, remove func(container.Summary) bool) (int, error) {
	if !rtcontainer.ValidInstallation(installation) {
		return 0, fmt.Errorf("%w: invalid installation id", rtcontainer.ErrInvalidSpec)
	}
	lctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	filters := client.Filters{}.Add("label", rtcontainer.InstallationLabel+"="+installation).
		Add("label", rtcontainer.RoleLabel+"="+rtcontainer.RoleSession)
	list, err := d.api.ContainerList(lctx, client.ContainerListOptions{All: true, Filters: filters})
	if err != nil {
		return 0, engineErr("list", err)
	}
	var ids []string
	for _, c := range list.Items {
		// The daemon filtered already; checking again keeps a filter bug
		// from removing someone else's container.
		if c.Labels[rtcontainer.InstallationLabel] != installation || c.Labels[rtcontainer.RoleLabel] != rtcontainer.RoleSession || !remove(c) {
			continue
		}
		ids = append(ids, c.ID)
	}
	return removeEach(ids, func(id string) error { return d.Remove(ctx, id) })
}

// Logs returns the last n (at least 1) lines of the container's stdout
// and stderr, demultiplexed, reading at most 1 MiB; "" when the container
// is missing. The text is the worker's: untrusted, for a scrubbed
// operator log only.
func (d *SessionDriver) Logs(ctx context.Context, name string, n int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	rc, err := d.api.ContainerLogs(ctx, name, client.ContainerLogsOptions{
		ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(max(1, n)),
	})
	if cerrdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", engineErr("logs "+name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxLogRead))
	if err != nil {
		return "", engineErr("logs "+name, err)
	}
	return DemuxLog(data), nil
}

// DemuxLog turns a log payload into text (docs/session.md, "The container"): Docker's non-TTY frames
// (a stream id 0–2, three zero bytes, a big-endian uint32 length, the
// payload) are concatenated in order; data that does not start with a
// frame header is returned as it is. A truncated last frame keeps what
// arrived.
func DemuxLog(data []byte) string {
	if !frameHeader(data) {
		return string(data)
	}
	var b strings.Builder
	for len(data) >= 8 && frameHeader(data) {
		size := int(min(binary.BigEndian.Uint32(data[4:8]), uint32(len(data)-8)))
		b.Write(data[8 : 8+size])
		data = data[8+size:]
	}
	return b.String()
}

func frameHeader(p []byte) bool {
	return len(p) >= 8 && p[0] <= 2 && p[1] == 0 && p[2] == 0 && p[3] == 0
}

// sessionCreateOptions builds the create request of a validated spec
// (docs/session.md, "The container", adapted: see docs/session.md).
func sessionCreateOptions(spec rtcontainer.SessionSpec) client.ContainerCreateOptions {
	cfg, host := &container.Config{}, &container.HostConfig{}
	for _, opt := range sessionProfile(spec) {
		opt(cfg, host)
	}
	return client.ContainerCreateOptions{Name: spec.Name, Config: cfg, HostConfig: host}
}

// sessionProfile is the whole hardening profile of a session container. It
// reuses the sealed options where the rule is the same.
func sessionProfile(spec rtcontainer.SessionSpec) []option {
	lim := spec.Limits
	return []option{
		withImage(spec.Image),
		withCmd(rtcontainer.SessionCommand),
		withLogConfig(spec.Log.ForChannel(spec.Channel)),
		withNoNetwork(),
		withPrivateCgroupns(),
		withReadonlyRootfs(),
		withCapDropAll(),
		withNoNewPrivileges(),
		withUser(spec.UID, spec.GID),
		withLimits(rtcontainer.Limits{MemoryMB: lim.MemoryMB, CPUs: lim.CPUs, PIDs: lim.PIDs}),
		withNofile(256),
		withSessionTmpfs(),
		withSessionMounts(spec.RunDir, spec.WorkspaceDir),
		withEnv(spec.Env()...),
		withLabels(spec.Labels()),
		withRestartUnlessStopped(),
		withRuntime(spec.Runtime),
	}
}

func withCmd(args ...string) option {
	return func(c *container.Config, _ *container.HostConfig) { c.Cmd = args }
}

func withLogConfig(l rtcontainer.LogConfig) option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.LogConfig = container.LogConfig{Type: l.Driver, Config: l.Options}
	}
}

func withSessionTmpfs() option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.Tmpfs = map[string]string{"/tmp": rtcontainer.SessionTmpfs}
	}
}

// withSessionMounts binds exactly two directories: the run directory
// read-only at /run/sandbox and the channel's workspace read-write at
// /workspace. Mounts (not Binds) refuse a missing source instead of
// creating it as root, and rprivate keeps mount events from propagating.
func withSessionMounts(runDir, workspaceDir string) option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.Mounts = []mount.Mount{
			bindMount(runDir, wire.SessionRunDir, true),
			bindMount(workspaceDir, wire.SessionWorkspace, false),
		}
	}
}

// withRestartUnlessStopped keeps the worker across daemon restarts and
// worker crashes: it is long-lived by design.
func withRestartUnlessStopped() option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}
	}
}
