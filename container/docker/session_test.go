package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// fakeSessionEngine scripts the engine for SessionDriver: one container
// per name, inspected from what was created.
type fakeSessionEngine struct {
	mu       sync.Mutex
	calls    []string
	created  map[string]client.ContainerCreateOptions
	running  map[string]bool
	logs     []byte
	createNF bool // create answers "no such image"
	// gates hold "create" or "start" (see held); late counts the held
	// requests still to be done.
	gates map[string]engineGate
	late  sync.WaitGroup
}

// engineGate holds one request: entered is closed when it arrives, and
// the engine does it once release is closed.
type engineGate struct{ entered, release chan struct{} }

// held does op's work, after its gate's release when op is gated. A
// caller whose ctx ends first gets ctx's error at once, as from the
// Docker client, while the engine still does the work when the gate
// opens: the daemon finishes a request whose client went away.
func (f *fakeSessionEngine) held(ctx context.Context, op string, work func()) error {
	g, ok := f.gates[op]
	if !ok {
		work()
		return nil
	}
	close(g.entered)
	done := make(chan struct{})
	f.late.Go(func() {
		<-g.release
		work()
		close(done)
	})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newFakeSessionEngine() *fakeSessionEngine {
	return &fakeSessionEngine{created: map[string]client.ContainerCreateOptions{}, running: map[string]bool{}}
}

var errNotFound = fmt.Errorf("no such object: %w", cerrdefs.ErrNotFound)

func (f *fakeSessionEngine) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

func (f *fakeSessionEngine) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	f.record("create")
	if f.createNF {
		return client.ContainerCreateResult{}, errNotFound
	}
	err := f.held(ctx, "create", func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.created[o.Name] = o
	})
	if err != nil {
		return client.ContainerCreateResult{}, err
	}
	return client.ContainerCreateResult{ID: o.Name}, nil
}

func (f *fakeSessionEngine) ContainerStart(ctx context.Context, id string, _ client.ContainerStartOptions) (client.ContainerStartResult, error) {
	f.record("start")
	err := f.held(ctx, "start", func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.running[id] = true
	})
	return client.ContainerStartResult{}, err
}

func (f *fakeSessionEngine) ContainerInspect(_ context.Context, id string, _ client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	f.record("inspect")
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.created[id]
	if !ok {
		return client.ContainerInspectResult{}, errNotFound
	}
	return client.ContainerInspectResult{Container: container.InspectResponse{
		State:  &container.State{Running: f.running[id]},
		Config: o.Config,
	}}, nil
}

func (f *fakeSessionEngine) ContainerRemove(_ context.Context, id string, _ client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	f.record("remove")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.created[id]; !ok {
		return client.ContainerRemoveResult{}, errNotFound
	}
	delete(f.created, id)
	delete(f.running, id)
	return client.ContainerRemoveResult{}, nil
}

func (f *fakeSessionEngine) ContainerLogs(_ context.Context, id string, o client.ContainerLogsOptions) (client.ContainerLogsResult, error) {
	f.record("logs:" + o.Tail)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.created[id]; !ok {
		return nil, errNotFound
	}
	return io.NopCloser(bytes.NewReader(f.logs)), nil
}

func (f *fakeSessionEngine) ContainerList(_ context.Context, o client.ContainerListOptions) (client.ContainerListResult, error) {
	f.record("list")
	f.mu.Lock()
	defer f.mu.Unlock()
	var out client.ContainerListResult
	for name, c := range f.created {
		out.Items = append(out.Items, container.Summary{ID: name, Names: []string{"/" + name}, Labels: c.Config.Labels})
	}
	return out, nil
}

func (f *fakeSessionEngine) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// sessionTestSpec is the spec of the reference's container-body test.
func sessionTestSpec() rtcontainer.SessionSpec {
	return rtcontainer.SessionSpec{
		Name: rtcontainer.SessionName("test", "discord:party"), Image: "sandbox:test",
		Installation: "test", Channel: "discord:party", Profile: "studio",
		UID: 1000, GID: 1000, RunDir: "/srv/channel/run", WorkspaceDir: "/srv/channel/workspace",
	}
}

// The reference's test "[SEC] Container body": NetworkMode none, read-only root, CapDrop
// ALL, no-new-privileges, exactly the two binds (adapted: as Mounts, run
// read-only), an env without the host's secret but with the dummy token;
// and every other docs/session.md, "The container" setting.
func TestSessionCreateBody(t *testing.T) {
	spec := sessionTestSpec().WithDefaults()
	o := sessionCreateOptions(spec)
	c, h := o.Config, o.HostConfig
	pids := int64(256)
	want := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		CgroupnsMode:   container.CgroupnsModePrivate,
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: "/srv/channel/run", Target: "/run/sandbox", ReadOnly: true, BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
			{Type: mount.TypeBind, Source: "/srv/channel/workspace", Target: "/workspace", BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}},
		},
		Tmpfs:         map[string]string{"/tmp": "rw,noexec,nosuid,nodev,size=512m,mode=1777"},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		LogConfig:     container.LogConfig{Type: "local", Config: map[string]string{"max-size": "10m", "max-file": "3"}},
		Runtime:       "runc",
		Resources: container.Resources{
			Memory: 1536 << 20, MemorySwap: 1536 << 20, NanoCPUs: 1e9, PidsLimit: &pids,
			Ulimits: []*container.Ulimit{{Name: "nofile", Soft: 256, Hard: 256}},
		},
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("HostConfig (-want +got):\n%s", diff)
	}
	if len(h.Binds) != 0 || h.Privileged || len(h.CapAdd) != 0 || h.AutoRemove {
		t.Errorf("unexpected host settings: binds %v privileged %v capadd %v autoremove %v", h.Binds, h.Privileged, h.CapAdd, h.AutoRemove)
	}
	if c.User != "1000:1000" || c.Image != "sandbox:test" || !slicesEqual(c.Cmd, []string{"session"}) {
		t.Errorf("config user %q image %q cmd %v", c.User, c.Image, c.Cmd)
	}
	env := strings.Join(c.Env, "\n")
	if strings.Contains(env, "host-secret") || strings.Contains(env, "ANTHROPIC_BASE_URL") {
		t.Errorf("env %q holds a secret or an upstream URL", env)
	}
	if !strings.Contains(env, "CLAUDE_CODE_OAUTH_TOKEN=sandbox-dummy-token") {
		t.Errorf("env %q lacks the dummy token", env)
	}
	if diff := cmp.Diff(spec.Labels(), c.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if o.Name != spec.Name {
		t.Errorf("name %q", o.Name)
	}
}

func slicesEqual(a, b []string) bool { return cmp.Equal(a, b) }

// The reference's test "A driver built with log:{driver:"local", options:{max-size:"10m"}},
// against a fake Docker API (inspect 404 → create), produces a create body
// with LogConfig {Type:"local", Config:{"max-size":"10m"}}".
func TestSessionLocalLogDriver(t *testing.T) {
	f := newFakeSessionEngine()
	d := newSessionDriver(f)
	spec := sessionTestSpec()
	spec.Log = rtcontainer.LogConfig{Driver: "local", Options: map[string]string{"max-size": "10m"}}
	if err := d.EnsureRunning(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"inspect", "create", "start"}, f.takeCalls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	got := f.created[spec.Name].HostConfig.LogConfig
	if diff := cmp.Diff(container.LogConfig{Type: "local", Config: map[string]string{"max-size": "10m"}}, got); diff != "" {
		t.Errorf("LogConfig (-want +got):\n%s", diff)
	}
}

// docs/session.md, "The container" "Driver behaviour": status, ensureRunning (keep a matching running
// container, recreate on an image or profile change or a stopped one),
// remove (404 fine), logs (404 gives "").
func TestSessionDriverLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newFakeSessionEngine()
	d := newSessionDriver(f)
	spec := sessionTestSpec()
	ensureFromMissing(ctx, t, d, spec)
	f.takeCalls()
	if err := d.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"inspect"}, f.takeCalls()); diff != "" {
		t.Errorf("matching container: calls (-want +got):\n%s", diff)
	}
	for _, change := range []func(*rtcontainer.SessionSpec){
		func(s *rtcontainer.SessionSpec) { s.Image = "sandbox:new" },
		func(s *rtcontainer.SessionSpec) { s.Profile = "other" },
	} {
		change(&spec)
		if err := d.EnsureRunning(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"inspect", "remove", "create", "start"}, f.takeCalls()); diff != "" {
			t.Errorf("changed spec: calls (-want +got):\n%s", diff)
		}
	}
	f.running[spec.Name] = false
	if st, _ := d.Status(ctx, spec.Name); st.State != rtcontainer.StateStopped {
		t.Errorf("Status of a stopped container = %+v", st)
	}
	f.takeCalls()
	if err := d.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"inspect", "remove", "create", "start"}, f.takeCalls()); diff != "" {
		t.Errorf("stopped container: calls (-want +got):\n%s", diff)
	}
	f.logs = frame(1, "out line\n")
	if got, err := d.Logs(ctx, spec.Name, 0); err != nil || got != "out line\n" {
		t.Errorf("Logs = %q, %v", got, err)
	}
	if calls := f.takeCalls(); calls[0] != "logs:1" {
		t.Errorf("Logs(0) asked for tail %v; want 1", calls)
	}
	if err := d.Remove(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(ctx, spec.Name); err != nil {
		t.Errorf("Remove of a missing container = %v", err)
	}
	if got, err := d.Logs(ctx, spec.Name, 200); err != nil || got != "" {
		t.Errorf("Logs of a missing container = %q, %v", got, err)
	}
	bad := spec
	bad.UID = 0
	if err := d.EnsureRunning(ctx, bad); err == nil || err.Error() != "Worker must be non-root" {
		t.Errorf("EnsureRunning as root = %v", err)
	}
	f.createNF = true
	if err := d.EnsureRunning(ctx, spec); err == nil || !strings.Contains(err.Error(), "image is missing") {
		t.Errorf("EnsureRunning without the image = %v", err)
	}
}

// A cancelled EnsureRunning leaves no container behind: a ctx that ends
// while the engine creates or starts the container has EnsureRunning wait
// for the engine's answer, then remove the container by its exact name
// and report ErrAborted; one that ended before the create creates
// nothing. synctest.Wait releases the engine only once EnsureRunning
// waits or (the bug) has returned.
func TestSessionEnsureRunningCancelled(t *testing.T) {
	tests := []struct {
		name      string
		gate      string // the request the engine holds; "" for none
		wantCalls []string
	}{
		{"during create", "create", []string{"inspect", "create", "remove"}},
		{"during start", "start", []string{"inspect", "create", "start", "remove"}},
		{"before create", "", []string{"inspect"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeSessionEngine()
				g := engineGate{entered: make(chan struct{}), release: make(chan struct{})}
				if tt.gate != "" {
					f.gates = map[string]engineGate{tt.gate: g}
				} else {
					close(g.entered)
				}
				d := newSessionDriver(f)
				spec := sessionTestSpec()
				ctx, cancel := context.WithCancel(context.Background())
				if tt.gate == "" {
					cancel()
				}
				errc := make(chan error, 1)
				go func() { errc <- d.EnsureRunning(ctx, spec) }()
				<-g.entered
				cancel()
				synctest.Wait()
				close(g.release)
				err := <-errc
				f.late.Wait()
				if !errors.Is(err, rtcontainer.ErrAborted) || !errors.Is(err, context.Canceled) {
					t.Errorf("EnsureRunning = %v; want ErrAborted with the cause", err)
				}
				if diff := cmp.Diff(tt.wantCalls, f.takeCalls()); diff != "" {
					t.Errorf("calls (-want +got):\n%s", diff)
				}
				if len(f.created) != 0 {
					t.Errorf("containers left: %v", slices.Collect(maps.Keys(f.created)))
				}
			})
		})
	}
}

// ensureFromMissing checks that spec's container is missing, runs
// EnsureRunning and checks that Status then reads spec back.
func ensureFromMissing(ctx context.Context, t *testing.T, d *SessionDriver, spec rtcontainer.SessionSpec) {
	t.Helper()
	if st, err := d.Status(ctx, spec.Name); err != nil || st.State != rtcontainer.StateMissing {
		t.Fatalf("Status before EnsureRunning = %+v, %v", st, err)
	}
	if err := d.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	st, err := d.Status(ctx, spec.Name)
	want := rtcontainer.SessionStatus{State: rtcontainer.StateRunning, Image: spec.Image, Profile: spec.Profile, Digest: spec.Digest()}
	if err != nil || st != want {
		t.Errorf("Status = %+v, %v; want %+v", st, err, want)
	}
}

// frame is one Docker log frame of stream.
func frame(stream byte, payload string) []byte {
	h := make([]byte, 8)
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
	return append(h, payload...)
}

// The reference's test "demuxDockerLog of two frames (stdout "out line\n", stderr "err
// line\n") → concatenated text; unframed text → returned as is".
func TestDemuxLog(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"two frames", append(frame(1, "out line\n"), frame(2, "err line\n")...), "out line\nerr line\n"},
		{"unframed", []byte("plain text\n"), "plain text\n"},
		{"empty", nil, ""},
		{"truncated last frame", append(frame(1, "a\n"), frame(2, "bcdef")[:10]...), "a\nbc"},
		{"garbage after frames", append(frame(1, "a\n"), []byte("zzzzzzzzzz")...), "a\n"},
	}
	for _, tt := range tests {
		if got := DemuxLog(tt.data); got != tt.want {
			t.Errorf("%s: DemuxLog = %q; want %q", tt.name, got, tt.want)
		}
	}
}

// FuzzDemuxLog: any payload (the worker's output) demultiplexes without
// panicking into at most its own length.
func FuzzDemuxLog(f *testing.F) {
	f.Add(append(frame(1, "out\n"), frame(2, "err\n")...))
	f.Add([]byte("plain"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if got := DemuxLog(data); len(got) > len(data) {
			t.Fatalf("DemuxLog grew %d bytes to %d", len(data), len(got))
		}
	})
}

// ReapSessions removes exactly this installation's session containers,
// even when the engine's filter lets others through.
func TestReapSessions(t *testing.T) {
	ctx := context.Background()
	f := newFakeSessionEngine()
	d := newSessionDriver(f)
	mine, other := sessionTestSpec(), sessionTestSpec()
	other.Installation, other.Name = "prod", rtcontainer.SessionName("prod", "discord:party")
	for _, s := range []rtcontainer.SessionSpec{mine, other} {
		if err := d.EnsureRunning(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	f.created["turn"] = client.ContainerCreateOptions{Config: &container.Config{Labels: map[string]string{
		rtcontainer.InstallationLabel: "test", rtcontainer.RoleLabel: rtcontainer.RoleTurn}}}
	n, err := d.ReapSessions(ctx, "test")
	if err != nil || n != 1 {
		t.Errorf("ReapSessions = %d, %v; want 1", n, err)
	}
	if _, ok := f.created[mine.Name]; ok {
		t.Error("this installation's session container survived")
	}
	if _, ok := f.created[other.Name]; !ok {
		t.Error("another installation's container was removed")
	}
	if _, ok := f.created["turn"]; !ok {
		t.Error("a turn container was removed")
	}
	if _, err := d.ReapSessions(ctx, "-bad"); !errors.Is(err, rtcontainer.ErrInvalidSpec) {
		t.Errorf("ReapSessions(-bad) = %v", err)
	}
}

// Events answers a stream that ends at once: the session driver's unit
// tests do not watch (the watch is tested against a real daemon in
// session_watch_integration_test.go).
func (f *fakeSessionEngine) Events(context.Context, client.EventsListOptions) client.EventsResult {
	f.record("events")
	errs := make(chan error, 1)
	errs <- errors.New("the fake engine has no events")
	close(errs)
	return client.EventsResult{Messages: make(chan events.Message), Err: errs}
}

// ContainerWait: the session driver's unit tests never wait on a
// removal in progress (tested against a real daemon).
func (f *fakeSessionEngine) ContainerWait(context.Context, string, client.ContainerWaitOptions) client.ContainerWaitResult {
	f.record("wait")
	errs := make(chan error, 1)
	errs <- errors.New("the fake engine does not wait")
	return client.ContainerWaitResult{Result: make(chan container.WaitResponse), Error: errs}
}
