package docker

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

func runEcho(ctx context.Context, t *testing.T, d *Driver, spec rtcontainer.Spec, stdin string) (rtcontainer.Result, error) {
	t.Helper()
	res, err := d.Run(ctx, spec, []byte(stdin))
	closeDriver(t, d)
	assertNoContainers(t)
	return res, err
}

// closeDriver lets a removal that did not fit a run's budget finish (the
// engine may be slow under a loaded test host) and ends the remover.
func closeDriver(t *testing.T, d *Driver) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// assertNoContainers checks that nothing labelled by this test run remains.
func assertNoContainers(t *testing.T) {
	t.Helper()
	list, err := integ.cli.ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", rtcontainer.InstallationLabel+"="+integ.installation),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		t.Errorf("container %v left after Run", c.Names)
	}
}

func TestIntegrationSealedRun(t *testing.T) {
	needDocker(t)
	d := newDriver(integ.cli)
	spec := turnSpec(t)
	var inspected container.InspectResponse
	d.afterExit = func(id string) {
		got, err := integ.cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
		if err != nil {
			t.Errorf("inspect: %v", err)
		}
		inspected = got.Container
	}
	res, err := runEcho(context.Background(), t, d, spec, `{"text":"hello"}`)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if want := (rtsandbox.Reply{OK: true, Text: "echo: hello"}); res.Reply != want {
		t.Errorf("Reply = %+v; want %+v", res.Reply, want)
	}
	t.Logf("negotiated Engine API version %s", integ.cli.ClientVersion())
	t.Logf("cold run: create %v, start %v, exit %v, remove %v, total %v",
		res.Created.Sub(res.Began), res.Started.Sub(res.Created), res.Exited.Sub(res.Started),
		res.Removed.Sub(res.Exited), res.Removed.Sub(res.Began))
	assertHardened(t, spec, inspected)
}

// assertHardened checks every docs/sealed-turn.md, "The container" setting on the container the daemon made.
func assertHardened(t *testing.T, spec rtcontainer.Spec, c container.InspectResponse) {
	t.Helper()
	if c.Config == nil || c.HostConfig == nil {
		t.Fatal("inspect returned no config; was the afterExit hook called?")
	}
	h, cfg := c.HostConfig, c.Config
	checks := []struct {
		name      string
		got, want any
	}{
		{"NetworkMode", string(h.NetworkMode), "none"},
		{"ReadonlyRootfs", h.ReadonlyRootfs, true},
		{"CapDrop", h.CapDrop, []string{"ALL"}},
		{"CapAdd", len(h.CapAdd), 0},
		{"SecurityOpt", h.SecurityOpt, []string{"no-new-privileges:true"}},
		{"Privileged", h.Privileged, false},
		{"AutoRemove", h.AutoRemove, false},
		{"PortBindings", len(h.PortBindings), 0},
		{"PublishAllPorts", h.PublishAllPorts, false},
		{"LogConfig", h.LogConfig.Type, "none"},
		{"User", cfg.User, itoa(spec.UID) + ":" + itoa(spec.GID)},
		{"Memory", h.Memory, int64(512 << 20)},
		{"MemorySwap", h.MemorySwap, int64(512 << 20)},
		{"NanoCPUs", h.NanoCPUs, int64(1e9)},
		{"PidsLimit", *h.PidsLimit, int64(64)},
		{"Ulimits", h.Ulimits, []*container.Ulimit{{Name: "nofile", Soft: 256, Hard: 256}}},
		{"Tmpfs", h.Tmpfs, map[string]string{"/tmp": "rw,noexec,nosuid,nodev,size=64m,mode=1777"}},
		{"Binds", len(h.Binds), 0},
		{"Env has HOME", slices.Contains(cfg.Env, "HOME=/tmp/home"), true},
		{"Tty", cfg.Tty, false},
		{"OpenStdin", cfg.OpenStdin, true},
		{"StdinOnce", cfg.StdinOnce, true},
		{"Labels", cfg.Labels, spec.Labels},
		{"Image", cfg.Image, spec.Image},
		// Nothing shared with the host, no devices.
		{"PidMode host", h.PidMode.IsHost(), false},
		{"IpcMode host", h.IpcMode.IsHost(), false},
		{"UsernsMode host", h.UsernsMode.IsHost(), false},
		{"UTSMode host", h.UTSMode.IsHost(), false},
		{"CgroupnsMode host", h.CgroupnsMode.IsHost(), false},
		{"Devices", len(h.Devices), 0},
		{"VolumesFrom", len(h.VolumesFrom), 0},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s mismatch (-want +got):\n%s", c.name, diff)
		}
	}
	for _, e := range cfg.Env {
		if !strings.HasPrefix(e, "HOME=") && !strings.HasPrefix(e, "PATH=") {
			t.Errorf("unexpected environment variable %q", e)
		}
	}
	type mnt struct {
		Type        mount.Type
		Source, Dst string
		RW          bool
		Propagation mount.Propagation
	}
	var got []mnt
	for _, m := range c.Mounts {
		got = append(got, mnt{m.Type, m.Source, m.Destination, m.RW, m.Propagation})
	}
	slices.SortFunc(got, func(a, b mnt) int { return strings.Compare(a.Dst, b.Dst) })
	want := []mnt{
		{mount.TypeBind, spec.RunDir, "/broker", false, mount.PropagationRPrivate},
		{mount.TypeTmpfs, "", "/tmp", true, ""},
		{mount.TypeBind, spec.WorkspaceDir, "/workspace", true, mount.PropagationRPrivate},
	}
	if c.Mounts != nil && len(got) == 2 { // daemons differ on listing tmpfs
		want = slices.DeleteFunc(want, func(m mnt) bool { return m.Dst == "/tmp" })
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mounts mismatch (-want +got):\n%s", diff)
	}
}

func TestIntegrationBuildImageError(t *testing.T) {
	needDocker(t)
	err := newDriver(integ.cli).BuildImage(context.Background(), "rtsandbox-test-bad:"+randomHex(4),
		map[string][]byte{"Dockerfile": []byte("FROM scratch\nCOPY missing /missing\n")})
	if !errors.Is(err, ErrImageBuild) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("BuildImage = %v; want ErrImageBuild naming the missing file", err)
	}
}

// TestIntegrationReap removes this installation's labelled leftovers and
// nothing else.
func TestIntegrationReap(t *testing.T) {
	needDocker(t)
	d := newDriver(integ.cli)
	ctx := context.Background()
	mine, _ := rtcontainer.TurnLabels(integ.installation)
	other, _ := rtcontainer.TurnLabels("other-" + integ.installation)
	notTurn := map[string]string{rtcontainer.InstallationLabel: integ.installation, rtcontainer.RoleLabel: "image"}
	var keep []string
	for i, labels := range []map[string]string{mine, mine, other, notTurn, nil} {
		name := "rtsandbox-reap-" + randomHex(4)
		if _, err := integ.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name:   name,
			Config: &container.Config{Image: integ.image, Labels: labels},
			HostConfig: &container.HostConfig{
				NetworkMode: "none", LogConfig: container.LogConfig{Type: "none"},
			},
		}); err != nil {
			t.Fatal(err)
		}
		if i >= 2 {
			keep = append(keep, name)
		}
	}
	t.Cleanup(func() {
		for _, name := range keep {
			_ = d.removeUntil(context.Background(), name, reapAttempts)
		}
	})
	n, err := d.Reap(ctx, integ.installation)
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2, nil", n, err)
	}
	for _, name := range keep {
		if _, err := integ.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err != nil {
			t.Errorf("container %s was reaped: %v", name, err)
		}
	}
	if _, err := d.Reap(ctx, "Bad Id"); !errors.Is(err, rtcontainer.ErrInvalidSpec) {
		t.Errorf("Reap(bad id) = %v; want ErrInvalidSpec", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
