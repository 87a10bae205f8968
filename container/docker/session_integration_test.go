package docker

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// sessionSpec returns a session spec for the echo image (its "session"
// command logs a probe and waits) with fresh directories owned by the
// container user; the container is removed when t ends.
func sessionSpec(t *testing.T) rtcontainer.SessionSpec {
	t.Helper()
	runDir, workspaceDir := testDirs(t)
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 1000, 1000
		for _, d := range []string{runDir, workspaceDir} {
			if err := os.Chown(d, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	spec := rtcontainer.SessionSpec{
		Name: rtcontainer.SessionName(integ.installation, "test:"+t.Name()), Image: integ.image,
		Installation: integ.installation, Channel: "test:" + t.Name(), Profile: "studio",
		UID: uid, GID: gid, RunDir: runDir, WorkspaceDir: workspaceDir,
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := newSessionDriver(integ.cli).Remove(ctx, spec.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return spec
}

// containerID is the engine's id of name.
func containerID(t *testing.T, name string) string {
	t.Helper()
	res, err := integ.cli.ContainerInspect(context.Background(), name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Container.ID
}

// waitLogs polls the container's log until it holds want.
func waitLogs(t *testing.T, d *SessionDriver, name, want string) string {
	t.Helper()
	var got string
	for range 100 {
		var err error
		if got, err = d.Logs(context.Background(), name, 200); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, want) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("log never held %q; it holds %q", want, got)
	return ""
}

// TestIntegrationSessionContainer: EnsureRunning creates exactly the docs/session.md, "The container"
// profile as the engine reports it, with the worker's environment the
// spec's alone; an image change recreates the container; ReapSessions
// removes it. The lifecycle the modes rely on (keep, recreate, remove,
// logs, the profile felt from inside) is the conformance suite's
// (TestIntegrationEngineConformance).
func TestIntegrationSessionContainer(t *testing.T) {
	needDocker(t)
	ctx := context.Background()
	d := newSessionDriver(integ.cli)
	spec := sessionSpec(t)
	ensureFromMissing(ctx, t, d, spec)
	assertSessionHardened(t, spec)

	logs := waitLogs(t, d, spec.Name, "session worker ready")
	if !strings.Contains(logs, "CLAUDE_CODE_OAUTH_TOKEN=sandbox-dummy-token") || strings.Contains(logs, "ANTHROPIC_BASE_URL") {
		t.Errorf("worker env: %s", logs)
	}

	id := containerID(t, spec.Name)
	retag := integ.image + "-retag"
	if _, err := integ.cli.ImageTag(ctx, client.ImageTagOptions{Source: integ.image, Target: retag}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = newDriver(integ.cli).RemoveImage(context.Background(), retag) })
	spec.Image = retag
	if err := d.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := containerID(t, spec.Name); got == id {
		t.Error("an image change kept the container")
	}
	if n, err := d.ReapSessions(ctx, integ.installation); err != nil || n != 1 {
		t.Errorf("ReapSessions = %d, %v; want 1", n, err)
	}
	if st, err := d.Status(ctx, spec.Name); err != nil || st.State != rtcontainer.StateMissing {
		t.Errorf("Status after ReapSessions = %+v, %v", st, err)
	}
}

// assertSessionHardened checks the docs/session.md, "The container" settings on the container the
// daemon made.
func assertSessionHardened(t *testing.T, spec rtcontainer.SessionSpec) {
	t.Helper()
	res, err := integ.cli.ContainerInspect(context.Background(), spec.Name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	h, cfg := c.HostConfig, c.Config
	checks := []struct {
		name      string
		got, want any
	}{
		{"NetworkMode", string(h.NetworkMode), "none"},
		{"ReadonlyRootfs", h.ReadonlyRootfs, true},
		{"CapDrop", h.CapDrop, []string{"ALL"}},
		{"SecurityOpt", h.SecurityOpt, []string{"no-new-privileges:true"}},
		{"Privileged", h.Privileged, false},
		{"RestartPolicy", string(h.RestartPolicy.Name), "unless-stopped"},
		{"LogConfig", h.LogConfig.Type, "local"},
		{"User", cfg.User, itoa(spec.UID) + ":" + itoa(spec.GID)},
		{"Memory", h.Memory, int64(1536 << 20)},
		{"MemorySwap", h.MemorySwap, int64(1536 << 20)},
		{"NanoCPUs", h.NanoCPUs, int64(1e9)},
		{"PidsLimit", *h.PidsLimit, int64(256)},
		{"Tmpfs", h.Tmpfs, map[string]string{"/tmp": rtcontainer.SessionTmpfs}},
		{"Binds", len(h.Binds), 0},
		{"Cmd", cfg.Cmd, []string{"session"}},
		{"Labels", cfg.Labels, spec.Labels()},
		{"Tty", cfg.Tty, false},
		{"OpenStdin", cfg.OpenStdin, false},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", c.name, diff)
		}
	}
	binds := 0
	for _, m := range c.Mounts {
		if m.Type != mount.TypeBind {
			continue // daemons differ on listing the /tmp tmpfs
		}
		binds++
		switch m.Destination {
		case "/run/sandbox":
			if m.RW || m.Source != spec.RunDir {
				t.Errorf("run mount %+v", m)
			}
		case "/workspace":
			if !m.RW || m.Source != spec.WorkspaceDir {
				t.Errorf("workspace mount %+v", m)
			}
		default:
			t.Errorf("unexpected mount %+v", m)
		}
	}
	if binds != 2 {
		t.Errorf("%d bind mounts; want exactly 2", binds)
	}
	// The sealed reaper never removes a session container.
	if n, err := newDriver(integ.cli).Reap(context.Background(), integ.installation); err != nil || n != 0 {
		t.Errorf("Reap removed %d containers (%v); session containers must survive it", n, err)
	}
}
