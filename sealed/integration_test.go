package sealed

// Integration tests against the local Docker daemon: the real worker in a
// FROM-scratch image, run under the sealed profile, reaching only the broker
// socket; the loopback model and MCP stand-ins are reached by the broker on
// the host.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/internal/fakemcp"
	"github.com/rtsandbox/rtsandbox/internal/hostbin"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// integ is the shared state of the integration tests.
var integ struct {
	cli          *client.Client
	driver       *docker.Driver
	workerImage  string
	hostileImage string
	// squatterImage is a compromised worker that fills /workspace and
	// plants a FIFO and a link there.
	squatterImage string
	// scribblerImage writes its mark into every writable place of its
	// container and reports the marks it found (the pool's freshness).
	scribblerImage string
	installation   string
	skip           string // why integration tests skip; "" when they run
}

const scratchDockerfile = `FROM scratch
COPY app /app
USER 1000:1000
ENTRYPOINT ["/app"]
`

func setupIntegration() (teardown func() error, err error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := docker.New(cli)
	if _, err := d.Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("daemon unreachable: %w", err)
	}
	suffix := randomHex(6)
	integ.cli, integ.driver, integ.installation = cli, d, "test-sb-"+suffix
	integ.workerImage = "rtsandbox-test-sbworker:" + suffix
	integ.hostileImage = "rtsandbox-test-sbhostile:" + suffix
	integ.squatterImage = "rtsandbox-test-sbsquatter:" + suffix
	integ.scribblerImage = "rtsandbox-test-sbscribbler:" + suffix
	for image, pkg := range map[string]string{
		integ.workerImage:    "github.com/rtsandbox/rtsandbox/cmd/rtsandbox-worker",
		integ.hostileImage:   "./testdata/hostile",
		integ.squatterImage:  "./testdata/squatter",
		integ.scribblerImage: "./testdata/scribbler",
	} {
		if err := buildImage(ctx, d, image, pkg); err != nil {
			return teardownIntegration, err
		}
	}
	return teardownIntegration, nil
}

// buildImage compiles pkg as a static binary and wraps it in a FROM-scratch
// image: no shell, no base, no registry.
func buildImage(ctx context.Context, d *docker.Driver, tag, pkg string) error {
	dir, err := os.MkdirTemp("", "sbbuild")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "app")
	if err := hostbin.GoBuild(ctx, ".", nil, "-o", out, pkg); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	return d.BuildImage(ctx, tag, map[string][]byte{"Dockerfile": []byte(scratchDockerfile), "app": bin})
}

// teardownIntegration fails if a container of this run was left, then
// removes leftovers and both images.
func teardownIntegration() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer integ.cli.Close()
	return errors.Join(integ.driver.Close(ctx),
		dockertest.Teardown(ctx, integ.driver, integ.installation, integ.workerImage, integ.hostileImage, integ.squatterImage, integ.scribblerImage))
}

func needDocker(t *testing.T) {
	t.Helper()
	if integ.skip != "" {
		t.Skip(integ.skip)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// recordingDriver passes runs to the Docker driver and keeps each spec and
// turn JSON, so tests can inspect the live container by its exact name.
type recordingDriver struct {
	container.OneShot
	mu      sync.Mutex
	specs   []container.Spec
	stdins  [][]byte
	settled []<-chan struct{} // the early replies' removals
}

func (d *recordingDriver) Run(ctx context.Context, spec container.Spec, stdin []byte) (container.Result, error) {
	d.mu.Lock()
	d.specs = append(d.specs, spec)
	d.stdins = append(d.stdins, slices.Clone(stdin))
	d.mu.Unlock()
	res, err := d.OneShot.Run(ctx, spec, stdin)
	if res.Settled != nil {
		d.mu.Lock()
		d.settled = append(d.settled, res.Settled)
		d.mu.Unlock()
	}
	return res, err
}

// settle waits until the containers of the early replies so far are
// removed (container.Result.Settled).
func (d *recordingDriver) settle(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	settled := slices.Clone(d.settled)
	d.mu.Unlock()
	for _, s := range settled {
		select {
		case <-s:
		case <-time.After(30 * time.Second):
			t.Fatal("an early reply's container was not settled in 30 s")
		}
	}
}

func (d *recordingDriver) lastSpec() container.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.specs[len(d.specs)-1]
}

// dockerFixture is newFixture on the Docker driver with image, plus checks
// after the test that no container, socket or run dir of it remains.
func dockerFixture(t *testing.T, image string, edit func(f *fixture)) (*fixture, *recordingDriver) {
	t.Helper()
	rec := &recordingDriver{OneShot: integ.driver}
	f := newFixture(t, func(f *fixture) {
		f.opts.Driver, f.opts.Image, f.opts.Installation = rec, image, integ.installation
		if edit != nil {
			edit(f)
		}
	})
	t.Cleanup(func() {
		f.rt.Close(context.Background())
		waitRemoved(t, integ.driver)
		assertNoContainers(t)
		assertEmpty(t, f.runRoot)
	})
	return f, rec
}

// waitRemoved waits until d's background remover has nothing left: a
// removal that did not fit a turn's budget (a slow engine under a loaded
// test host) finishes there.
func waitRemoved(t *testing.T, d *docker.Driver) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for d.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Errorf("%d container removals still pending", d.Pending())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertNoContainers checks that nothing labelled by this test run remains.
func assertNoContainers(t *testing.T) {
	t.Helper()
	list, err := integ.cli.ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", container.InstallationLabel+"="+integ.installation),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		t.Errorf("container %v left after the turn", c.Names)
	}
}

func logStats(t *testing.T, s TurnStats) {
	t.Helper()
	since := func(at time.Time) string {
		if at.IsZero() {
			return "-"
		}
		return at.Sub(s.Admitted).Round(100 * time.Microsecond).String()
	}
	t.Logf("phases since admission: listening %s, driver %s, created %s, started %s, first call %s, replied %s, exited %s, removed %s, ended %s (%d broker calls)",
		since(s.Listening), since(s.Began), since(s.Created), since(s.Started), since(s.FirstCall),
		since(s.Replied), since(s.Exited), since(s.Removed), since(s.Ended), s.Calls)
}

const integrationKey = "integration-host-key"

func TestIntegrationSealedTurn(t *testing.T) {
	needDocker(t)
	var (
		mu    sync.Mutex
		calls int
	)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls++
		mu.Unlock()
		var req struct {
			Model string `json:"model"`
		}
		if err := json.Unmarshal(body, &req); err != nil || req.Model != "fake-model" {
			t.Errorf("upstream body model = %q, %v; want fake-model", req.Model, err)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+integrationKey {
			t.Errorf("upstream Authorization = %q; want the real key", got)
		}
		if strings.Contains(string(body), integrationKey) {
			t.Error("upstream body contains the key")
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completion("Hello from the sealed worker."))
	}))
	defer model.Close()
	var stats []TurnStats
	f, rec := dockerFixture(t, integ.workerImage, func(f *fixture) {
		f.cfg.ModelURL, f.cfg.Model = upstream.MustParseEndpoint(model.URL+"/v1/chat/completions", true), "fake-model"
		f.cfg.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return integrationKey, nil }
		f.opts.Model = "fake-model"
		f.opts.OnTurn = func(s TurnStats) { stats = append(stats, s) }
	})
	for i := range 3 { // the first turn is cold; the others show the warm cost
		mu.Lock()
		calls = 0
		mu.Unlock()
		reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "Hello")
		if err != nil {
			t.Fatalf("RunTurn = %v", err)
		}
		if want := (rtsandbox.Reply{OK: true, Text: "Hello from the sealed worker."}); reply != want {
			t.Errorf("RunTurn = %+v; want %+v", reply, want)
		}
		mu.Lock()
		if calls != 1 {
			t.Errorf("model called %d times; want exactly 1", calls)
		}
		mu.Unlock()
		t.Logf("turn %d:", i+1)
		logStats(t, stats[i])
		rec.settle(t)
		assertNoContainers(t)
		assertEmpty(t, f.runRoot)
	}
	for _, in := range rec.stdins {
		if strings.Contains(string(in), integrationKey) {
			t.Errorf("turn JSON contains the key: %s", in)
		}
	}
}

// TestIntegrationToolsTurn: one model answer calls a memory tool, a host
// tool and an MCP tool; while the host tool runs it inspects the live
// container and the turn's directories for the real key.
func TestIntegrationToolsTurn(t *testing.T) {
	needDocker(t)
	const mcpKey = "integration-mcp-key"
	model := newModelServer(t,
		completion(nil,
			toolCall("c1", "memory_set", `{"scope":"channel","key":"topic","text":"sealed turns"}`),
			toolCall("c2", "host_probe", `{}`),
			toolCall("c3", "mcp_0_lookup", `{"q":"x"}`)),
		completion("All done."))
	mcp := fakemcp.New(fakemcp.Tool{Name: "lookup", Reply: func(json.RawMessage) string { return "mcp says hi" }})
	defer mcp.Close()
	var (
		rec   *recordingDriver
		f     *fixture
		stats TurnStats
	)
	probe := func(ctx context.Context, _ json.RawMessage, tc rtsandbox.Binding) (string, error) {
		spec := rec.lastSpec()
		assertKeyAbsent(t, ctx, spec, []string{integrationKey, mcpKey})
		return "probed " + string(tc.Channel), nil
	}
	f, rec = dockerFixture(t, integ.workerImage, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.cfg.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return integrationKey, nil }
		f.cfg.Tools = []broker.Tool{hostTool("probe", probe)}
		f.cfg.MCP = []broker.MCPServer{{
			Name: "search", URL: upstream.MustParseEndpoint(mcp.URL, true),
			Tools:  []rtsandbox.ToolSpec{{Name: "lookup", Description: "look up", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}},
			APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return mcpKey, nil },
		}}
		f.opts.OnTurn = func(s TurnStats) { stats = s }
	})
	reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "use your tools")
	if err != nil || reply != (rtsandbox.Reply{OK: true, Text: "All done."}) {
		t.Fatalf("RunTurn = %+v, %v; want ok All done.", reply, err)
	}
	logStats(t, stats)
	bodies := model.gotBodies()
	if len(bodies) != 2 {
		t.Fatalf("model called %d times; want 2", len(bodies))
	}
	for _, want := range []string{`"content":"Saved."`, `probed fake:guests`, `mcp says hi`} {
		if !strings.Contains(bodies[1], want) {
			t.Errorf("replayed request lacks %q: %s", want, bodies[1])
		}
	}
	// The broker's MCP session: initialize, initialized, the one call,
	// each request with the MCP key.
	if n := mcp.ToolCalls(); n != 1 {
		t.Errorf("MCP tools/call %d times; want once", n)
	}
	for _, r := range mcp.Requests() {
		if r.Authorization != "Bearer "+mcpKey {
			t.Errorf("MCP %q Authorization %q; want the MCP key", r.Method, r.Authorization)
		}
	}
	st, err := f.state.Load(context.Background(), "fake:guests")
	if err != nil || len(st.Memory) != 1 || !strings.Contains(st.Memory[0].Text, "sealed turns") {
		t.Errorf("channel state = %+v, %v; want the channel note", st, err)
	}
	assertNoKeyInTree(t, f.stateDir, []string{integrationKey, mcpKey})
	for _, in := range rec.stdins {
		if strings.Contains(string(in), integrationKey) || strings.Contains(string(in), mcpKey) {
			t.Errorf("turn JSON contains a key: %s", in)
		}
	}
}

// assertKeyAbsent inspects the running container by its exact name: no key
// in its environment, command, labels or mounts; then scans the run dir and
// workspace files.
func assertKeyAbsent(t *testing.T, ctx context.Context, spec container.Spec, keys []string) {
	t.Helper()
	got, err := integ.cli.ContainerInspect(ctx, spec.Name, client.ContainerInspectOptions{})
	if err != nil {
		t.Errorf("inspect %s: %v", spec.Name, err)
		return
	}
	c := got.Container
	if c.Config == nil || c.HostConfig == nil {
		t.Error("inspect returned no config")
		return
	}
	var parts []string
	parts = append(parts, c.Config.Env...)
	parts = append(parts, c.Config.Cmd...)
	parts = append(parts, c.Config.Entrypoint...)
	parts = append(parts, c.Args...)
	parts = append(parts, c.Path, c.Config.Image, c.Config.User)
	for k, v := range c.Config.Labels {
		parts = append(parts, k, v)
	}
	for _, m := range c.Mounts {
		parts = append(parts, m.Source, m.Destination)
	}
	parts = append(parts, c.HostConfig.Binds...)
	for _, p := range parts {
		for _, key := range keys {
			if strings.Contains(p, key) {
				t.Errorf("container setting %q contains a key", p)
			}
		}
	}
	if len(c.Mounts) < 1 || c.HostConfig.Tmpfs[wire.WorkspacePath] == "" {
		t.Errorf("container has %d mounts and tmpfs %v; want the broker mount and a tmpfs workspace", len(c.Mounts), c.HostConfig.Tmpfs)
	}
	if c.HostConfig.NetworkMode != "none" || !c.HostConfig.ReadonlyRootfs {
		t.Errorf("network %q read-only %v; want none and true", c.HostConfig.NetworkMode, c.HostConfig.ReadonlyRootfs)
	}
	if got, want := c.HostConfig.Runtime, container.EngineRuntime(spec.Runtime); got != want {
		t.Errorf("runtime %q; want %q", got, want)
	}
	assertNoKeyInTree(t, spec.RunDir, keys)
}

func assertNoKeyInTree(t *testing.T, root string, keys []string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, key := range keys {
			if strings.Contains(string(b), key) {
				t.Errorf("%s contains a key", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("scan %s: %v", root, err)
	}
}

// TestIntegrationHostilePID1 is the docs/protocol.md, "The sealed reply" requirement: a PID 1 that ignores
// SIGTERM, with a 1 s turn deadline, fails the turn in under 8 s and leaves
// no container of its image. The bound asserted is the driver's own
// (docker.ReturnBound of the deadline) plus the scheduling slack of a
// loaded machine for the turn's local steps, itself under the spec's 8 s.
func TestIntegrationHostilePID1(t *testing.T) {
	needDocker(t)
	const schedulingSlack = 2 * time.Second
	limit := docker.ReturnBound(time.Second) + schedulingSlack
	if limit >= 8*time.Second {
		t.Fatalf("the driver's bound %v is not under the spec's 8 s", limit)
	}
	var stats TurnStats
	f, _ := dockerFixture(t, integ.hostileImage, func(f *fixture) {
		f.opts.TurnTimeout = time.Second
		f.opts.OnTurn = func(s TurnStats) { stats = s }
	})
	start := time.Now()
	_, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "Hello")
	elapsed := time.Since(start)
	if !errors.Is(err, rtsandbox.ErrTurnTimeout) || !errors.Is(err, container.ErrAborted) {
		t.Errorf("RunTurn = %v; want ErrAborted caused by rtsandbox.ErrTurnTimeout", err)
	}
	if elapsed >= limit {
		t.Errorf("RunTurn took %v; want < %v (docker.ReturnBound(1s) + scheduling slack)", elapsed, limit)
	}
	t.Logf("hostile turn failed after %v", elapsed)
	logStats(t, stats)
	waitRemoved(t, integ.driver)
	list, err := integ.cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("ancestor", integ.hostileImage),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("containers of %s left: %d", integ.hostileImage, len(list.Items))
	}
}

// TestIntegrationCompromisedWorkspaceDies is findings 3 and 4 through real
// containers: a compromised worker tries to write 2 GiB and 200,000 files
// into /workspace and plants a FIFO at memory.json and a link at
// history.json. The tmpfs stops the writes at its size and inode limits,
// nothing it wrote reaches a host directory, and the channel's next turn,
// with the real worker, runs at once on the host-kept state.
func TestIntegrationCompromisedWorkspaceDies(t *testing.T) {
	needDocker(t)
	model := newModelServer(t, completion("Still here."))
	f, _ := dockerFixture(t, integ.squatterImage, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.opts.TurnTimeout = 60 * time.Second
	})
	kept := rtsandbox.ChannelState{
		Memory:  []rtsandbox.MemoryEntry{{Scope: "channel", Key: "topic", Text: "Tea"}},
		History: []rtsandbox.HistoryEntry{},
	}
	if err := f.state.Save(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, kept); err != nil {
		t.Fatal(err)
	}
	reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "squat")
	if err != nil {
		t.Fatalf("squatter turn = %v", err)
	}
	var bytesWritten int64
	var files int
	var fifo, link bool
	if _, err := fmt.Sscanf(reply.Text, "bytes=%d files=%d fifo=%t link=%t", &bytesWritten, &files, &fifo, &link); err != nil {
		t.Fatalf("squatter reply %q: %v", reply.Text, err)
	}
	t.Logf("squatter: %s", reply.Text)
	if limit := int64(container.DefaultLimits().WorkspaceMB) << 20; bytesWritten > limit {
		t.Errorf("squatter wrote %d bytes; want at most the %d-byte workspace", bytesWritten, limit)
	}
	if files >= container.WorkspaceInodes {
		t.Errorf("squatter made %d files; want fewer than %d", files, container.WorkspaceInodes)
	}
	if !fifo || !link {
		t.Errorf("plants fifo=%v link=%v; the test needs both to land in the container", fifo, link)
	}
	assertOnlyStateFiles(t, f)

	// The next turn runs the real worker on the same channel and state.
	f.rt.Close(context.Background())
	opts := f.opts
	opts.Image = integ.workerImage
	rt, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	start := time.Now()
	reply, err = rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "hello")
	if err != nil || reply.Text != "Still here." {
		t.Fatalf("next turn = %+v, %v; want the model's answer", reply, err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("next turn took %v; a planted FIFO must not hold it", d)
	}
	if body := model.gotBodies(); len(body) != 1 || !strings.Contains(body[0], "Tea") {
		t.Errorf("model request %v; want the kept memory in it", body)
	}
}

// assertOnlyStateFiles checks that the host holds nothing a guest wrote:
// the run root is empty and the state dir holds the memory database only.
func assertOnlyStateFiles(t *testing.T, f *fixture) {
	t.Helper()
	assertEmpty(t, f.runRoot)
	db := memstore.FileName
	for _, name := range entries(t, f.stateDir) {
		if name != db && name != db+"-wal" && name != db+"-shm" {
			t.Errorf("state dir holds %q", name)
		}
	}
}
