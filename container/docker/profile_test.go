package docker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// argsSpec is the reference's "Args" spec.
func argsSpec() rtcontainer.Spec {
	return rtcontainer.Spec{
		Name:         "rtsandbox-test",
		Image:        "sandbox:local",
		UID:          1000,
		GID:          1000,
		RunDir:       "/srv/sandbox/run/turn-a",
		WorkspaceDir: "/srv/sandbox/work/channel-a",
		Limits:       rtcontainer.DefaultLimits(),
		Labels:       map[string]string{"rtsandbox.installation": "prod", "rtsandbox.role": "turn"},
	}
}

func int64p(n int64) *int64 { return &n }

// TestCreateOptions pins the whole create request: docs/sealed-turn.md, "The container" translated to the
// Engine API, and nothing else (no port bindings, no privileged, no
// AutoRemove, no other mounts, no other environment).
func TestCreateOptions(t *testing.T) {
	want := client.ContainerCreateOptions{
		Name: "rtsandbox-test",
		Config: &container.Config{
			Image:        "sandbox:local",
			User:         "1000:1000",
			AttachStdin:  true,
			AttachStdout: true,
			AttachStderr: true,
			OpenStdin:    true,
			StdinOnce:    true,
			Env:          []string{"HOME=/tmp/home"},
			Labels:       map[string]string{"rtsandbox.installation": "prod", "rtsandbox.role": "turn"},
		},
		HostConfig: &container.HostConfig{
			LogConfig:      container.LogConfig{Type: "none"},
			NetworkMode:    "none",
			CgroupnsMode:   container.CgroupnsModePrivate,
			ReadonlyRootfs: true,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			Tmpfs:          map[string]string{"/tmp": "rw,noexec,nosuid,nodev,size=64m,mode=1777"},
			Resources: container.Resources{
				Memory:     512 << 20,
				MemorySwap: 512 << 20,
				NanoCPUs:   1e9,
				PidsLimit:  int64p(64),
				Ulimits:    []*container.Ulimit{{Name: "nofile", Soft: 256, Hard: 256}},
			},
			Mounts: []mount.Mount{
				{Type: mount.TypeBind, Source: "/srv/sandbox/run/turn-a", Target: "/broker", ReadOnly: true,
					BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
				{Type: mount.TypeBind, Source: "/srv/sandbox/work/channel-a", Target: "/workspace",
					BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			},
			Runtime: "runc",
		},
	}
	if diff := cmp.Diff(want, createOptions(argsSpec())); diff != "" {
		t.Errorf("createOptions(argsSpec()) mismatch (-want +got):\n%s", diff)
	}
}

// TestCreateOptionsOverrides is the reference's test "Overrides": 768 MiB, 0.5 CPU, 32 PIDs.
func TestCreateOptionsOverrides(t *testing.T) {
	s := argsSpec()
	s.Limits = rtcontainer.Limits{MemoryMB: 768, CPUs: 0.5, PIDs: 32}
	got := createOptions(s).HostConfig.Resources
	want := container.Resources{
		Memory: 768 << 20, MemorySwap: 768 << 20, NanoCPUs: 5e8, PidsLimit: int64p(32),
		Ulimits: []*container.Ulimit{{Name: "nofile", Soft: 256, Hard: 256}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resources mismatch (-want +got):\n%s", diff)
	}
}

// TestCreateOptionsTmpfsWorkspace: without a workspace directory the
// container gets a private tmpfs /workspace of the spec's size and inode
// bound, owned by the worker, and only the broker bind mount.
func TestCreateOptionsTmpfsWorkspace(t *testing.T) {
	s := argsSpec()
	s.WorkspaceDir = ""
	s.Limits.WorkspaceMB = 32
	h := createOptions(s).HostConfig
	want := map[string]string{
		"/tmp":       "rw,noexec,nosuid,nodev,size=64m,mode=1777",
		"/workspace": "rw,noexec,nosuid,nodev,size=32m,nr_inodes=4096,mode=0700,uid=1000,gid=1000",
	}
	if diff := cmp.Diff(want, h.Tmpfs); diff != "" {
		t.Errorf("Tmpfs mismatch (-want +got):\n%s", diff)
	}
	if len(h.Mounts) != 1 || h.Mounts[0].Target != "/broker" || !h.Mounts[0].ReadOnly {
		t.Errorf("Mounts = %+v; want only the read-only broker mount", h.Mounts)
	}
}

// TestCreateOptionsCopiesLabels: the request must not alias the caller's map.
func TestCreateOptionsCopiesLabels(t *testing.T) {
	s := argsSpec()
	opts := createOptions(s)
	s.Labels["rtsandbox.role"] = "other"
	if got := opts.Config.Labels["rtsandbox.role"]; got != "turn" {
		t.Errorf("label after caller edit = %q; want turn", got)
	}
}

// TestCreateOptionsRuntime: the spec's runtime reaches HostConfig.Runtime
// of both create requests, and "" is named runc explicitly, so a daemon
// whose default-runtime is another one still runs runc.
func TestCreateOptionsRuntime(t *testing.T) {
	for _, tc := range []struct{ runtime, want string }{
		{"", "runc"},
		{rtcontainer.RuntimeRunc, "runc"},
		{rtcontainer.RuntimeRunsc, "runsc"},
	} {
		s := argsSpec()
		s.Runtime = tc.runtime
		ss := sessionTestSpec().WithDefaults()
		ss.Runtime = tc.runtime
		got := []string{createOptions(s).HostConfig.Runtime, sessionCreateOptions(ss).HostConfig.Runtime}
		if diff := cmp.Diff([]string{tc.want, tc.want}, got); diff != "" {
			t.Errorf("Runtime %q: sealed, session HostConfig.Runtime (-want +got):\n%s", tc.runtime, diff)
		}
	}
}
