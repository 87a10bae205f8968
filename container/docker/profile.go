package docker

import (
	"fmt"
	"maps"
	"path"
	"strconv"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// option sets one hardening property of the create request. Each option is
// tiny so that it can be read and tested on its own; sealed lists the whole
// profile in one place.
type option func(*container.Config, *container.HostConfig)

// sealed is the docs/sealed-turn.md, "The container" profile of a sealed turn, translated from CLI flags to
// the Engine API. The CLI's --rm is deliberately absent: removal stays under
// the driver's control (AutoRemove would race our force-removal), and
// --pull never is implicit because the create endpoint never pulls.
func sealed(spec rtcontainer.Spec) []option {
	return []option{
		withImage(spec.Image),
		withStdio(),
		withNoLogs(),
		withNoNetwork(),
		withPrivateCgroupns(),
		withReadonlyRootfs(),
		withCapDropAll(),
		withNoNewPrivileges(),
		withUser(spec.UID, spec.GID),
		withLimits(spec.Limits),
		withNofile(256),
		withTmpfs(spec),
		withMounts(spec.RunDir, spec.WorkspaceDir),
		withEnv("HOME=/tmp/home"),
		withLabels(spec.Labels),
		withRuntime(spec.Runtime),
	}
}

// createOptions builds the create request for a validated spec.
func createOptions(spec rtcontainer.Spec) client.ContainerCreateOptions {
	cfg, host := &container.Config{}, &container.HostConfig{}
	for _, opt := range sealed(spec) {
		opt(cfg, host)
	}
	return client.ContainerCreateOptions{Name: spec.Name, Config: cfg, HostConfig: host}
}

func withImage(image string) option {
	return func(c *container.Config, _ *container.HostConfig) { c.Image = image }
}

// withStdio attaches all three streams without a TTY, so stdout and stderr
// arrive multiplexed and apart. StdinOnce closes the worker's stdin when the
// driver closes its write side: the worker reads the turn JSON to EOF.
func withStdio() option {
	return func(c *container.Config, _ *container.HostConfig) {
		c.AttachStdin, c.AttachStdout, c.AttachStderr = true, true, true
		c.OpenStdin, c.StdinOnce, c.Tty = true, true, false
	}
}

// withNoLogs keeps guest output out of the engine's log store: the reply is
// read from the attach stream only.
func withNoLogs() option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.LogConfig = container.LogConfig{Type: "none"}
	}
}

// withNoNetwork leaves the container a loopback interface only; the broker
// socket is its sole way out.
func withNoNetwork() option {
	return func(_ *container.Config, h *container.HostConfig) { h.NetworkMode = "none" }
}

// withPrivateCgroupns gives the container its own cgroup namespace.
// Beyond the reference's flag list: on cgroup v1 hosts the engine's
// default is the host's namespace, which shows the worker the host's
// cgroup paths.
func withPrivateCgroupns() option {
	return func(_ *container.Config, h *container.HostConfig) { h.CgroupnsMode = container.CgroupnsModePrivate }
}

func withReadonlyRootfs() option {
	return func(_ *container.Config, h *container.HostConfig) { h.ReadonlyRootfs = true }
}

func withCapDropAll() option {
	return func(_ *container.Config, h *container.HostConfig) { h.CapDrop = []string{"ALL"} }
}

func withNoNewPrivileges() option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.SecurityOpt = []string{"no-new-privileges:true"}
	}
}

// withUser overrides the image's USER with numeric ids, so no passwd lookup
// inside the image can pick root.
func withUser(uid, gid int) option {
	return func(c *container.Config, _ *container.HostConfig) {
		c.User = strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
	}
}

// withLimits sets memory and memory+swap to the same value (no swap), the
// CPU quota and the PID limit.
func withLimits(l rtcontainer.Limits) option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.Memory = l.MemoryBytes()
		h.MemorySwap = l.MemoryBytes()
		h.NanoCPUs = l.NanoCPUs()
		pids := int64(l.PIDs)
		h.PidsLimit = &pids
	}
}

func withNofile(n int64) option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.Ulimits = []*container.Ulimit{{Name: "nofile", Soft: n, Hard: n}}
	}
}

// withTmpfs gives the worker a small writable /tmp that cannot hold
// executables (the worker binary lives in the read-only root) and, without
// a workspace directory, a private size- and inode-limited /workspace
// that dies with the container.
func withTmpfs(spec rtcontainer.Spec) option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.Tmpfs = map[string]string{"/tmp": "rw,noexec,nosuid,nodev,size=64m,mode=1777"}
		if spec.WorkspaceDir == "" {
			h.Tmpfs[wire.WorkspacePath] = workspaceTmpfs(spec)
		}
	}
}

// workspaceTmpfs is the option string of the sealed /workspace tmpfs.
func workspaceTmpfs(spec rtcontainer.Spec) string {
	return fmt.Sprintf("rw,noexec,nosuid,nodev,size=%dm,nr_inodes=%d,mode=0700,uid=%d,gid=%d",
		spec.Limits.WorkspaceMB, rtcontainer.WorkspaceInodes, spec.UID, spec.GID)
}

// withMounts sets the bind mounts and nothing else: the run directory
// (broker socket) read-only and, when the spec names one, the workspace
// directory read-write. rprivate keeps host mount events from propagating
// in either direction.
func withMounts(runDir, workspaceDir string) option {
	return func(_ *container.Config, h *container.HostConfig) {
		h.Mounts = []mount.Mount{bindMount(runDir, path.Dir(wire.BrokerSocketPath), true)}
		if workspaceDir != "" {
			h.Mounts = append(h.Mounts, bindMount(workspaceDir, wire.WorkspacePath, false))
		}
	}
}

func bindMount(src, dst string, readOnly bool) mount.Mount {
	return mount.Mount{
		Type:        mount.TypeBind,
		Source:      src,
		Target:      dst,
		ReadOnly:    readOnly,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	}
}

// withEnv sets the only variables the driver adds. The host's environment
// never reaches the worker; the engine merges the image's own ENV lines
// underneath, which is why the worker image is built from scratch by us.
func withEnv(env ...string) option {
	return func(c *container.Config, _ *container.HostConfig) { c.Env = env }
}

// withRuntime names the OCI runtime in every request, runc included, so a
// daemon whose default runtime is another one still runs what the spec
// says.
func withRuntime(r string) option {
	return func(_ *container.Config, h *container.HostConfig) { h.Runtime = rtcontainer.EngineRuntime(r) }
}

func withLabels(labels map[string]string) option {
	return func(c *container.Config, _ *container.HostConfig) { c.Labels = maps.Clone(labels) }
}
