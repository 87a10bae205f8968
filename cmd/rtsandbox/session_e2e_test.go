package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/fakemcp"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// echoModel answers every turn with a text naming the guest's last
// message, so a reply shows which turn it answers.
func echoModel() *fakemodel.Server {
	return fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Content: "Answer to " + lastWords(req.UserText())}
		}))
}

// lastWords is the part of a session prompt after its "[name (id)] "
// speaker prefix.
func lastWords(text string) string {
	if _, rest, ok := strings.Cut(text, "] "); ok {
		return rest
	}
	return text
}

// echoEnv is a serve of session channels on echoModel, with the worker
// image built for the test.
type echoEnv struct {
	tag        string
	cli        *client.Client
	model      *fakemodel.Server
	addr       string
	cfg, state string
	s          *server
}

// echoSession starts serve with the session block session on echoModel.
func echoSession(t *testing.T, session string) *echoEnv {
	t.Helper()
	e := &echoEnv{model: echoModel(), addr: freeAddr(t)}
	t.Cleanup(e.model.Close)
	e.tag, e.cli = sessionDocker(t)
	e.cfg, e.state = sessionConfig(t, e.model.ChatURL(), e.tag, e.addr, session)
	e.s = startServe(t, e.addr, "--config", e.cfg)
	return e
}

// stopOK stops serve and requires exit code 0.
func (s *server) stopOK(tb testing.TB) {
	tb.Helper()
	if code := s.stop(tb); code != exitOK {
		tb.Fatalf("serve exit = %d\n%s", code, s.out.String())
	}
}

// wantInLast requires every one of wants in the model's last request,
// named what in the failure.
func wantInLast(t *testing.T, model *fakemodel.Server, what string, wants ...string) {
	t.Helper()
	last := lastRaw(model)
	for _, want := range wants {
		if !strings.Contains(last, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, last)
		}
	}
}

// lastRaw is the body of the model's last request.
func lastRaw(model *fakemodel.Server) string {
	reqs := model.Requests()
	if len(reqs) == 0 {
		return ""
	}
	return string(reqs[len(reqs)-1].Raw)
}

// sessionConfig writes serve's config with every channel on the session
// profile "chat" and extra appended (top-level keys of the session block
// and others).
func sessionConfig(t testing.TB, modelURL, image, addr, session string) (path, state string) {
	t.Helper()
	path, state = serveConfig(t, modelURL, image, addr)
	appendConfig(t, path, "profiles:\n  chat: {mode: session}\ndefault_profile: chat\nsession:\n"+session)
	return path, state
}

// sessionDocker builds the worker image and removes, when the test ends
// (failed or not), every container of that image the test started.
func sessionDocker(t testing.TB) (string, *client.Client) {
	t.Helper()
	tag, cli := sealedImage(t)
	t.Cleanup(func() { removeContainersOf(t, cli, tag) })
	return tag, cli
}

func removeContainersOf(t testing.TB, cli *client.Client, image string) {
	t.Helper()
	for _, c := range containersOf(t, cli, image) {
		if _, err := cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			t.Errorf("remove %s: %v", c.ID, err)
		}
	}
}

// sessionContainer is one container of the test's image as the engine
// lists it.
type sessionContainer struct {
	ID, Name, State string
}

func containersOf(t testing.TB, cli *client.Client, image string) []sessionContainer {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []sessionContainer
	for _, c := range res.Items {
		if c.Image == image {
			out = append(out, sessionContainer{ID: c.ID, Name: strings.Join(c.Names, ","), State: string(c.State)})
		}
	}
	return out
}

// oneContainer returns the one running container of image.
func oneContainer(t *testing.T, cli *client.Client, image string, s *server) sessionContainer {
	t.Helper()
	cs := containersOf(t, cli, image)
	if len(cs) != 1 || cs[0].State != "running" {
		t.Fatalf("containers of %s = %+v; want one running\nserve:\n%s", image, cs, s.out.String())
	}
	return cs[0]
}

// sayOne sends text and requires the one-chunk reply want.
func (s *server) sayOne(t *testing.T, channel, text, want string) {
	t.Helper()
	got := chunksOf(s.say(t, channel, text))
	if len(got) != 1 || got[0] != want {
		t.Fatalf("reply to %q = %q; want %q\nserve:\n%s", text, got, want, s.out.String())
	}
}

// TestSessionServeTenTurnsOneContainer: ten turns in one session channel
// run in one container, and each model request holds the turns before.
func TestSessionServeTenTurnsOneContainer(t *testing.T) {
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, model, s := e.tag, e.cli, e.model, e.s

	var first sessionContainer
	for i := 1; i <= 10; i++ {
		text := fmt.Sprintf("turn %d", i)
		s.sayOne(t, "http:lobby", text, "Answer to "+text)
		c := oneContainer(t, cli, tag, s)
		if i == 1 {
			first = c
		} else if c.ID != first.ID {
			t.Fatalf("turn %d ran in container %s; turn 1 in %s", i, c.ID, first.ID)
		}
	}
	for i := 1; i < 10; i++ {
		wantInLast(t, model, "the tenth model request", fmt.Sprintf("turn %d", i), fmt.Sprintf("Answer to turn %d", i))
	}
	s.stopOK(t)
}

// TestSessionServeRestartContinues: serve stops mid-conversation, the
// container keeps running, and a new serve on the same state continues the
// conversation in that container: the worker announces itself to the new
// broker and the next model request holds the earlier turns.
func TestSessionServeRestartContinues(t *testing.T) {
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, model, s := e.tag, e.cli, e.model, e.s
	s.sayOne(t, "http:lobby", "before the restart", "Answer to before the restart")
	before := oneContainer(t, cli, tag, s)
	s.stopOK(t)
	if after := oneContainer(t, cli, tag, s); after.ID != before.ID {
		t.Fatalf("container after serve stopped = %+v; want %s still running", after, before.ID)
	}

	s2 := startServe(t, e.addr, "--config", e.cfg)
	s2.sayOne(t, "http:lobby", "after the restart", "Answer to after the restart")
	if after := oneContainer(t, cli, tag, s2); after.ID != before.ID {
		t.Errorf("turn after the restart ran in %s; want the first container %s", after.ID, before.ID)
	}
	wantInLast(t, model, "the model request after the restart", "before the restart", "Answer to before the restart", "after the restart")
	s2.stopOK(t)
}

// TestSessionServeFreshArchives: the owner's fresh removes the channel's
// container and archives its conversation under
// sessions/archive/<stamp>/; the next turn runs in a new container and its
// model request no longer holds the old turns.
func TestSessionServeFreshArchives(t *testing.T) {
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, model, s := e.tag, e.cli, e.model, e.s
	s.sayOne(t, "http:lobby", "old words", "Answer to old words")
	old := oneContainer(t, cli, tag, s)

	code, body := s.call(t, "POST", "/api/v1/channels/http:lobby/fresh", serveOwnerToken, "")
	if code != 200 || !strings.Contains(body, rtsandbox.FreshText) {
		t.Fatalf("fresh = %d %s; want 200 and the fresh text", code, body)
	}
	if cs := containersOf(t, cli, tag); len(cs) != 0 {
		t.Errorf("containers after fresh = %+v; want none", cs)
	}
	archived, err := filepath.Glob(filepath.Join(e.state, "party", "*", "workspace", "sessions", "archive", "*", "*.jsonl"))
	if err != nil || len(archived) != 1 {
		t.Fatalf("archived conversations = %v (%v); want one .jsonl under sessions/archive/<stamp>/", archived, err)
	}
	if b, err := os.ReadFile(archived[0]); err != nil || !strings.Contains(string(b), "old words") {
		t.Errorf("archive %s = %q, %v; want the old conversation", archived[0], b, err)
	}

	s.sayOne(t, "http:lobby", "new words", "Answer to new words")
	if c := oneContainer(t, cli, tag, s); c.ID == old.ID {
		t.Errorf("turn after fresh ran in the old container %s", c.ID)
	}
	if last := lastRaw(model); strings.Contains(last, "old words") || !strings.Contains(last, "new words") {
		t.Errorf("model request after fresh = %s; want the new turn without the old ones", last)
	}
	s.stopOK(t)
}

// TestSessionServeHungWorkerRemoved: a worker whose model never answers is
// removed at the turn deadline; its last log lines reach the operator log
// and the guest gets the fixed failure text.
func TestSessionServeHungWorkerRemoved(t *testing.T) {
	tag, cli := sessionDocker(t)
	release := make(chan struct{})
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			<-release
			return fakemodel.Response{Content: "too late"}
		}))
	defer model.Close()
	defer close(release) // before Close, which waits for the handler
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 8s\n")
	s := startServe(t, addr, "--config", cfg)

	start := time.Now()
	s.sayOne(t, "http:lobby", "Are you there?", rtsandbox.TurnFailedOrStoppedText)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the hung turn took %v; want about the 8s deadline", took)
	}
	if cs := containersOf(t, cli, tag); len(cs) != 0 {
		t.Errorf("containers after the deadline = %+v; want the hung one removed", cs)
	}
	out := s.out.String()
	// The saved lines are the worker's own (its JSON log lines, quoted).
	for _, want := range []string{`"msg":"sandbox turn failed"`, `"timed_out":true`, `"msg":"sandbox worker log before removal"`,
		`\"app\":\"sandbox-worker\"`} {
		if !strings.Contains(out, want) {
			t.Errorf("operator log lacks %s:\n%s", want, out)
		}
	}
	s.stopOK(t)
}

// TestSessionServeFloodStopsAtBudget: a model that always asks for
// another tool call is stopped at session.max_calls; the turn ends with a
// fixed text, not a hang, and the model saw no more calls than the budget.
func TestSessionServeFloodStopsAtBudget(t *testing.T) {
	tag, _ := sessionDocker(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.CallTools(fakemodel.Call("no_such_tool", map[string]any{"again": true})))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n  max_calls: 5\n")
	s := startServe(t, addr, "--config", cfg)

	start := time.Now()
	got := chunksOf(s.say(t, "http:lobby", "Loop forever"))
	if len(got) != 1 || (got[0] != rtsandbox.TurnFailedText && got[0] != rtsandbox.TurnFailedOrStoppedText) {
		t.Errorf("reply = %q; want a fixed failure text\nserve:\n%s", got, s.out.String())
	}
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("the flooding turn took %v", took)
	}
	if n := len(model.Requests()); n > 5 {
		t.Errorf("the model saw %d calls; want at most max_calls 5", n)
	}
	s.stopOK(t)
}

// inspected is what the engine says of a running container, and the
// host's view of its first process (its /proc directory).
type inspected struct {
	res  client.ContainerInspectResult
	proc string
}

func inspectContainer(t *testing.T, cli *client.Client, id string) inspected {
	t.Helper()
	res, err := cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Container.State == nil || res.Container.State.Pid == 0 {
		t.Fatalf("container %s has no process: %+v", id, res.Container.State)
	}
	proc := fmt.Sprintf("/proc/%d", res.Container.State.Pid)
	if _, err := os.Stat(proc + "/root/workspace"); err != nil {
		// The tests need the engine on this host, as serve does.
		t.Fatalf("the worker's process is not visible from the test: %v", err)
	}
	return inspected{res: res, proc: proc}
}

// mountSources are the host directories bound into the container, by
// destination.
func (c inspected) mountSources() map[string]string {
	m := map[string]string{}
	for _, mp := range c.res.Container.Mounts {
		m[mp.Destination] = mp.Source
	}
	return m
}

// TestSessionServeChannelsIsolated: two session channels run in two
// containers; each sees only its own workspace and its own broker socket,
// so a file of one workspace is absent from the other, and one channel's
// conversation never reaches the other's model requests.
func TestSessionServeChannelsIsolated(t *testing.T) {
	parallelServe(t)
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, model, s := e.tag, e.cli, e.model, e.s
	if code, body := s.call(t, "POST", "/api/v1/channels/http:other/sandbox", serveOwnerToken, `{"enabled":true}`); code != 200 {
		t.Fatalf("owner on = %d %s", code, body)
	}
	s.sayOne(t, "http:lobby", "lobby secret plan", "Answer to lobby secret plan")
	s.sayOne(t, "http:other", "other channel words", "Answer to other channel words")
	if reqs := model.Requests(); strings.Contains(string(reqs[len(reqs)-1].Raw), "lobby secret plan") {
		t.Errorf("the other channel's model request holds the lobby's turn:\n%s", reqs[len(reqs)-1].Raw)
	}
	cs := containersOf(t, cli, tag)
	if len(cs) != 2 || cs[0].ID == cs[1].ID {
		t.Fatalf("containers = %+v; want two", cs)
	}
	a, b := inspectContainer(t, cli, cs[0].ID), inspectContainer(t, cli, cs[1].ID)
	ma, mb := a.mountSources(), b.mountSources()
	if len(ma) != 2 || len(mb) != 2 || ma["/workspace"] == mb["/workspace"] || ma["/run/sandbox"] == mb["/run/sandbox"] {
		t.Fatalf("mounts %v and %v; want two each, none shared", ma, mb)
	}

	// A file of one workspace is absent from the other, seen from inside
	// each container's mount namespace.
	if err := os.WriteFile(filepath.Join(ma["/workspace"], "only-here.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.proc + "/root/workspace/only-here.txt"); err != nil {
		t.Errorf("container A does not see its own workspace file: %v", err)
	}
	if _, err := os.Stat(b.proc + "/root/workspace/only-here.txt"); !os.IsNotExist(err) {
		t.Errorf("container B sees A's workspace file: %v", err)
	}
	words := map[string][2]string{ // channel: its words, the other's
		"http:lobby": {"lobby secret plan", "other channel words"},
		"http:other": {"other channel words", "lobby secret plan"},
	}
	for _, c := range []inspected{a, b} {
		other := a
		if c.proc == a.proc {
			other = b
		}
		w := words[c.res.Container.Config.Labels[container.ChannelLabel]]
		text, _ := sessionText(t, c.proc+"/root/workspace/sessions")
		if w[0] == "" || !strings.Contains(text, w[0]) || strings.Contains(text, w[1]) {
			t.Errorf("conversation seen inside %s = %q; want %q and not %q", c.proc, text, w[0], w[1])
		}
		// The only broker socket a worker can reach is its own channel's.
		own := inode(t, filepath.Join(c.mountSources()["/run/sandbox"], "broker.sock"))
		if got := inode(t, c.proc+"/root/run/sandbox/broker.sock"); got != own {
			t.Errorf("socket inside %s is inode %d; want its own channel's %d", c.proc, got, own)
		}
		theirs := filepath.Dir(other.mountSources()["/run/sandbox"])
		for _, src := range c.mountSources() {
			if strings.HasPrefix(src+"/", theirs+"/") {
				t.Errorf("container %s mounts %s of the other channel", c.proc, src)
			}
		}
	}
	s.stopOK(t)
}

// sessionText joins the conversation files (*.jsonl) of a sessions
// directory.
func sessionText(t *testing.T, dir string) (string, int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String(), len(files)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// sessionTestKey is the upstream key of the session profile's model in
// TestSessionServeContainerSealed: distinctive, so finding it anywhere is
// a leak.
const sessionTestKey = "se2e-DISTINCTIVE-model-key-5b1f0c97e2"

// TestSessionServeContainerSealed: the sealed mode's evidence holds for a
// running session container, checked on the engine's record and on the
// worker process itself: no network but lo, a read-only root, no
// capabilities, a non-root user, the configured memory and PID limits in
// force, and the profile model's key in no environment variable, mount,
// label, command, file of the workspace, run dir or /tmp, or container log.
func TestSessionServeContainerSealed(t *testing.T) {
	tag, cli := sessionDocker(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sessionTestKey, Loop: true}, fakemodel.Reply("Sealed enough."))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	appendConfig(t, cfg, fmt.Sprintf("models:\n  sess:\n    url: %s\n    name: fake-session-model\n    api_key_env: RTS_SESSION_KEY\n"+
		"profiles:\n  chat: {mode: session, model: sess}\ndefault_profile: chat\n"+
		"session:\n  turn_timeout: 120s\n  limits: {memory_mb: 256, cpus: 0.5, pids: 64}\n", model.ChatURL()))
	s := startServe(t, addr, "--config", cfg)
	s.sayOne(t, "http:lobby", "Show me your walls.", "Sealed enough.")
	if reqs := model.Requests(); len(reqs) != 1 || reqs[0].Body.Model != "fake-session-model" {
		t.Fatalf("model requests = %d; want one for the profile's model", len(reqs))
	}
	c := inspectContainer(t, cli, oneContainer(t, cli, tag, s).ID)
	hc, cc := c.res.Container.HostConfig, c.res.Container.Config

	status := readProc(t, c.proc+"/status")
	for _, field := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if got := procField(status, field); got != "0000000000000000" {
			t.Errorf("%s = %q; want no capabilities", field, got)
		}
	}
	if got := procField(status, "NoNewPrivs"); got != "1" {
		t.Errorf("NoNewPrivs = %q; want 1", got)
	}
	for _, id := range strings.Fields(procField(status, "Uid") + " " + procField(status, "Gid")) {
		if id == "0" {
			t.Errorf("worker Uid/Gid %q / %q; want non-root", procField(status, "Uid"), procField(status, "Gid"))
		}
	}
	if want := workerUserFlag(); want != "" && cc.User != want {
		t.Errorf("container user = %q; want sandbox.user %q", cc.User, want)
	}
	if devs := netDevices(readProc(t, c.proc+"/net/dev")); len(devs) != 1 || devs[0] != "lo" {
		t.Errorf("network devices of the worker = %v; want only lo", devs)
	}
	if string(hc.NetworkMode) != "none" {
		t.Errorf("network mode = %q; want none", hc.NetworkMode)
	}
	if hc.Privileged || hc.PidMode.IsHost() || hc.IpcMode.IsHost() || hc.UTSMode.IsHost() || len(hc.Devices) != 0 {
		t.Errorf("privileged %v, pid %q, ipc %q, uts %q, devices %v; want none of the host's", hc.Privileged, hc.PidMode, hc.IpcMode, hc.UTSMode, hc.Devices)
	}
	if opts := rootMountOptions(readProc(t, c.proc+"/mountinfo")); !hc.ReadonlyRootfs || !strings.Contains(","+opts+",", ",ro,") {
		t.Errorf("root filesystem: ReadonlyRootfs %v, mount options %q; want read-only", hc.ReadonlyRootfs, opts)
	}
	if hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("limits memory %d swap %d cpus %d pids %v; want 256 MiB, 256 MiB, 0.5, 64", hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit)
	}
	root := c.proc + "/root/sys/fs/cgroup/"
	if got := firstOf(t, root+"memory/memory.limit_in_bytes", root+"memory.max"); got != fmt.Sprint(256<<20) {
		t.Errorf("memory limit in force = %q; want %d", got, 256<<20)
	}
	if got := firstOf(t, root+"pids/pids.max", root+"pids.max"); got != "64" {
		t.Errorf("PID limit in force = %q; want 64", got)
	}

	// The key: nowhere the worker or the engine could show it.
	places := map[string]string{
		"process environment": readProc(t, c.proc+"/environ"),
		"process command":     readProc(t, c.proc+"/cmdline"),
		"config env":          strings.Join(cc.Env, "\n"),
		"config command":      strings.Join(append(append([]string{}, cc.Entrypoint...), cc.Cmd...), " "),
		"labels":              fmt.Sprint(cc.Labels),
		"mounts":              fmt.Sprint(c.res.Container.Mounts, hc.Binds, hc.Mounts, hc.Tmpfs),
		"container log":       containerLog(t, cli, c.res.Container.ID),
	}
	for _, dir := range []string{c.mountSources()["/workspace"], c.mountSources()["/run/sandbox"], c.proc + "/root/tmp"} {
		places["files under "+dir] = filesUnder(t, dir)
	}
	for where, text := range places {
		if strings.Contains(text, sessionTestKey) {
			t.Errorf("the model key is in the %s", where)
		}
	}
	if !strings.Contains(places["files under "+c.mountSources()["/workspace"]], "Show me your walls.") {
		t.Error("the workspace walk did not find the conversation; the key search proves nothing")
	}
	s.stopOK(t)
	if strings.Contains(s.out.String(), sessionTestKey) {
		t.Error("the model key is in serve's log")
	}
}

func readProc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// procField is the value of a "Name:\tvalue" line of /proc/<pid>/status.
func procField(status, name string) string {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// netDevices lists the interfaces of /proc/<pid>/net/dev.
func netDevices(dev string) []string {
	var out []string
	for line := range strings.SplitSeq(dev, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			out = append(out, strings.TrimSpace(name))
		}
	}
	return out
}

// rootMountOptions are the mount options of "/" in a mountinfo.
func rootMountOptions(mountinfo string) string {
	opts := ""
	for line := range strings.SplitSeq(mountinfo, "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" {
			opts = f[5] // the last mount on / is the one in force
		}
	}
	return opts
}

// firstOf reads the first of paths that exists (cgroup v1 or v2 names).
func firstOf(t *testing.T, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	t.Errorf("none of %v readable", paths)
	return ""
}

// containerLog is everything the container logged.
func containerLog(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	text, err := docker.NewSession(cli).Logs(context.Background(), id, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// filesUnder joins the contents of every regular file under dir, and
// every name.
func filesUnder(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(path + "\n")
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b.Write(data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return b.String()
}

// sayLater posts text without waiting here; the channel gets the reply's
// chunks, or nil when the request failed.
func (s *server) sayLater(channel, text string) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.base+"/api/v1/messages", strings.NewReader(
			`{"channel":"`+channel+`","author":{"id":"alice","name":"Alice"},"text":"`+text+`","mentions_bot":true,"wait":true}`))
		req.Header.Set("Authorization", "Bearer "+serveGuestToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.client.Do(req)
		if err != nil {
			out <- nil
			return
		}
		defer resp.Body.Close()
		var w waitReply
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&w) != nil {
			out <- nil
			return
		}
		out <- chunksOf(w)
	}()
	return out
}

// statusText is the owner's status answer of channel.
func (s *server) statusText(t testing.TB, channel string) string {
	t.Helper()
	code, body := s.call(t, "GET", "/api/v1/channels/"+channel+"/sandbox", serveOwnerToken, "")
	if code != 200 {
		t.Fatalf("status = %d %s", code, body)
	}
	var r struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	return r.Message
}

// TestSessionServeOwnerCommands: status names the session mode and the
// container's state; stop aborts a running session turn (the guest gets
// the fixed text) and removes the container; the next turn starts a new
// one and keeps the conversation; off removes the container.
func TestSessionServeOwnerCommands(t *testing.T) {
	tag, cli := sessionDocker(t)
	release := make(chan struct{})
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if strings.Contains(req.UserText(), "hang") {
				<-release
			}
			return fakemodel.Response{Content: "Answer to " + lastWords(req.UserText())}
		}))
	defer model.Close()
	defer close(release)
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	s := startServe(t, addr, "--config", cfg)

	if got, want := s.statusText(t, "http:lobby"), fmt.Sprintf(rtsandbox.SessionStatusFormat, "chat", "missing"); !strings.Contains(got, want) {
		t.Errorf("status before a turn = %q; want %q", got, want)
	}
	s.sayOne(t, "http:lobby", "remember me", "Answer to remember me")
	first := oneContainer(t, cli, tag, s)
	if got, want := s.statusText(t, "http:lobby"), fmt.Sprintf(rtsandbox.SessionStatusFormat, "chat", "running"); !strings.Contains(got, want) {
		t.Errorf("status after a turn = %q; want %q", got, want)
	}

	reply := s.sayLater("http:lobby", "hang now")
	waitFor(t, func() bool { return len(model.Requests()) == 2 })
	code, body := s.call(t, "POST", "/api/v1/channels/http:lobby/stop", serveOwnerToken, "")
	if code != 200 || !strings.Contains(body, rtsandbox.StoppedText) {
		t.Errorf("stop = %d %s; want the stopped text", code, body)
	}
	select {
	case got := <-reply:
		if len(got) != 1 || got[0] != rtsandbox.TurnFailedOrStoppedText {
			t.Errorf("reply to the stopped turn = %q; want the fixed text", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no reply to the stopped turn\n%s", s.out.String())
	}
	if cs := containersOf(t, cli, tag); len(cs) != 0 {
		t.Errorf("containers after stop = %+v; want none", cs)
	}

	s.sayOne(t, "http:lobby", "still there?", "Answer to still there?")
	if c := oneContainer(t, cli, tag, s); c.ID == first.ID {
		t.Error("the turn after stop ran in the removed container")
	}
	wantInLast(t, model, "the turn after stop's model request", "Answer to remember me")

	s.off(t, "http:lobby")
	if cs := containersOf(t, cli, tag); len(cs) != 0 {
		t.Errorf("containers after off = %+v; want none", cs)
	}
	if got, want := s.statusText(t, "http:lobby"), fmt.Sprintf(rtsandbox.SessionStatusFormat, "chat", "missing"); !strings.Contains(got, want) {
		t.Errorf("status after off = %q; want %q", got, want)
	}
	s.stopOK(t)
}

// TestSessionServeAnthropicStream: a session profile on a streamed
// Anthropic Messages model keeps the conversation across turns (the
// worker's Messages client through the session broker's x-api-key route).
func TestSessionServeAnthropicStream(t *testing.T) {
	tag, _ := sessionDocker(t)
	model := echoModel()
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.URL(), tag, addr, "  turn_timeout: 120s\n")
	streamed(t, cfg)
	s := startServe(t, addr, "--config", cfg)
	for i := 1; i <= 3; i++ {
		text := fmt.Sprintf("streamed turn %d", i)
		s.sayOne(t, "http:lobby", text, "Answer to "+text)
	}
	reqs := model.Requests()
	last := reqs[len(reqs)-1]
	if !last.IsAnthropic() || !last.Body.Stream {
		t.Errorf("last model request %s stream %v; want streamed Messages", last.Path, last.Body.Stream)
	}
	for _, want := range []string{"streamed turn 1", "Answer to streamed turn 2", "streamed turn 3"} {
		if !strings.Contains(string(last.Raw), want) {
			t.Errorf("the third request lacks %q:\n%s", want, last.Raw)
		}
	}
	s.stopOK(t)
}

// TestSessionServeDailyBudget: budgets count session turns' broker calls
// and seconds; a session turn cut short by the speaker's daily budget ends
// like a sealed one, with the budget text, and the next turn is refused
// before it reaches the worker.
func TestSessionServeDailyBudget(t *testing.T) {
	tag, _ := sessionDocker(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if req.Last().Role == "tool" {
				return fakemodel.Response{Content: "Done."}
			}
			return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("no_such_tool", map[string]any{})}}
		}))
	defer model.Close()
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	appendConfig(t, cfg, "budgets:\n  per_speaker: {calls: 3}\n")
	s := startServe(t, addr, "--config", cfg)
	s.sayOne(t, "http:lobby", "two calls", "Done.")              // calls 1 and 2
	s.sayOne(t, "http:lobby", "cut short", rtsandbox.BudgetText) // call 3, then refused
	n := len(model.Requests())
	s.sayOne(t, "http:lobby", "refused", rtsandbox.BudgetText)
	if got := len(model.Requests()); got != n {
		t.Errorf("the model saw %d more calls after the budget was spent", got-n)
	}
	code, body := s.call(t, "GET", "/api/v1/channels/http:lobby/usage", serveOwnerToken, "")
	var u struct {
		Channel []struct {
			Kind string `json:"kind"`
			Used int64  `json:"used"`
		} `json:"channel_usage"`
	}
	if err := json.Unmarshal([]byte(body), &u); code != 200 || err != nil {
		t.Fatalf("usage = %d %s (%v)", code, body, err)
	}
	var secs int64
	for _, e := range u.Channel {
		if e.Kind == "seconds" {
			secs = e.Used
		}
	}
	if secs < 2 {
		t.Errorf("seconds used = %d (%s); want the two turns that ran counted", secs, body)
	}
	s.stopOK(t)
}

// TestSessionServeShutdownMidTurn: serve shutting down past its drain
// while a session turn runs answers the guest with the restarting text
// (issue 22 item 4); the
// next serve runs the channel's turns again; with no serve running,
// `rtsandbox channels off` removes the channel's session container and
// `rtsandbox reap` every other one.
func TestSessionServeShutdownMidTurn(t *testing.T) {
	tag, cli := sessionDocker(t)
	var hang atomic.Bool
	release := make(chan struct{})
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if hang.Load() {
				<-release
			}
			return fakemodel.Response{Content: "Answer to " + lastWords(req.UserText())}
		}))
	defer model.Close()
	defer close(release)
	addr := freeAddr(t)
	cfg, _ := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	s := startServe(t, addr, "--config", cfg, "--drain", "1s")
	if code, body := s.call(t, "POST", "/api/v1/channels/http:other/sandbox", serveOwnerToken, `{"enabled":true}`); code != 200 {
		t.Fatalf("owner on = %d %s", code, body)
	}
	s.sayOne(t, "http:other", "hello other", "Answer to hello other")
	hang.Store(true)
	reply := s.sayLater("http:lobby", "hold on")
	waitFor(t, func() bool { return len(model.Requests()) == 2 })
	s.stopOK(t)
	select {
	case got := <-reply:
		if len(got) != 1 || got[0] != rtsandbox.RestartingText {
			t.Errorf("reply to the turn cut by shutdown = %q; want the restarting text", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reply to the turn cut by shutdown")
	}

	hang.Store(false)
	s2 := startServe(t, addr, "--config", cfg)
	s2.sayOne(t, "http:lobby", "again", "Answer to again")
	s2.stopOK(t)
	if cs := containersOf(t, cli, tag); len(cs) != 2 {
		t.Fatalf("containers after serve stopped = %+v; want both channels' still there", cs)
	}
	if code, out, errOut := runOps(t, "channels", "off", "http:lobby", "--config", cfg); code != exitOK {
		t.Fatalf("channels off = %d %q %q", code, out, errOut)
	}
	if cs := containersOf(t, cli, tag); len(cs) != 1 {
		t.Errorf("containers after channels off = %+v; want the other channel's only", cs)
	}
	if code, out, errOut := runOps(t, "reap", "--config", cfg); code != exitOK {
		t.Fatalf("reap = %d %q %q", code, out, errOut)
	}
	if cs := containersOf(t, cli, tag); len(cs) != 0 {
		t.Errorf("containers after reap = %+v; want none", cs)
	}
}

// TestSessionServePausedWorkerReplaced: a worker whose container is
// paused between turns (no process of it runs) is heard at once (issue
// 22: a paused container is not running): the next turn runs in a new
// container, without waiting for any deadline, and continues the
// conversation; the paused one is removed.
func TestSessionServePausedWorkerReplaced(t *testing.T) {
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, model, s := e.tag, e.cli, e.model, e.s
	s.sayOne(t, "http:lobby", "before the freeze", "Answer to before the freeze")
	frozen := oneContainer(t, cli, tag, s)
	if _, err := cli.ContainerPause(context.Background(), frozen.ID, client.ContainerPauseOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(s.out.String(), `"msg":"session container stopped serving"`) })
	start := time.Now()
	s.sayOne(t, "http:lobby", "after the freeze", "Answer to after the freeze")
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("the turn after the freeze took %v", took)
	}
	if c := oneContainer(t, cli, tag, s); c.ID == frozen.ID {
		t.Error("the turn after the freeze ran in the frozen container")
	}
	wantInLast(t, model, "the new worker's model request", "Answer to before the freeze")
	s.stopOK(t)
}

// TestSessionServeLongConversation: a session conversation longer than
// the /model rule's 128 messages keeps working (it broke at turn 64 when
// the worker sent its whole history): the worker drops the oldest
// exchanges, so the model request stays within the bound and still holds
// the recent turns.
func TestSessionServeLongConversation(t *testing.T) {
	parallelServe(t)
	e := echoSession(t, "  turn_timeout: 120s\n")
	model, s := e.model, e.s
	const turns = 70
	for i := 1; i <= turns; i++ {
		text := fmt.Sprintf("long turn %d", i)
		s.sayOne(t, "http:lobby", text, "Answer to "+text)
	}
	reqs := model.Requests()
	last := reqs[len(reqs)-1]
	if n := len(last.Body.Messages); n > rtsandbox.MaxModelMessages {
		t.Errorf("the last model request has %d messages; want at most %d", n, rtsandbox.MaxModelMessages)
	}
	raw := string(last.Raw)
	if !strings.Contains(raw, fmt.Sprintf("Answer to long turn %d", turns-1)) || strings.Contains(raw, `long turn 1"`) {
		t.Errorf("the last model request should hold the recent turns, not the first:\n%s", raw)
	}
	// Past the route's 128 messages the worker compacts: the earlier turns
	// live on in its summary (docs/session.md, "Compaction").
	if !strings.Contains(raw, "[Summary of the earlier conversation") {
		t.Errorf("the last model request holds no summary of the earlier turns:\n%.2000s", raw)
	}
	s.stopOK(t)
}

// TestSessionServeImageChangeRecreates: serve restarted on a new worker
// image recreates the channel's container from it, and the conversation
// continues from the workspace.
func TestSessionServeImageChangeRecreates(t *testing.T) {
	parallelServe(t)
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, model, s := e.tag, e.cli, e.model, e.s
	tag2, _ := sessionDocker(t)
	s.sayOne(t, "http:lobby", "on the old image", "Answer to on the old image")
	s.stopOK(t)
	b, err := os.ReadFile(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.cfg, []byte(strings.Replace(string(b), "image: "+tag, "image: "+tag2, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := startServe(t, e.addr, "--config", e.cfg)
	s2.sayOne(t, "http:lobby", "on the new image", "Answer to on the new image")
	if old := containersOf(t, cli, tag); len(old) != 0 {
		t.Errorf("containers of the old image = %+v; want none", old)
	}
	oneContainer(t, cli, tag2, s2)
	wantInLast(t, model, "the new image's worker's model request", "Answer to on the old image")
	s2.stopOK(t)
}

// TestSessionServeConcurrentChannels: messages posted at once to two
// session channels are all answered, each by its own channel's worker in
// its own container, and no model request mixes the two conversations.
func TestSessionServeConcurrentChannels(t *testing.T) {
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, model, s := e.tag, e.cli, e.model, e.s
	s.on(t, "http:other")
	var replies []<-chan []string
	var want [][]string
	for i := range 3 {
		for _, ch := range []string{"http:lobby", "http:other"} {
			text := fmt.Sprintf("%s message %d", ch, i)
			replies = append(replies, s.sayLater(ch, text))
			want = append(want, []string{"Answer to " + text})
		}
	}
	for i, r := range replies {
		select {
		case got := <-r:
			if !slices.Equal(got, want[i]) {
				t.Errorf("reply %d = %q; want %q", i, got, want[i])
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("reply %d missing\n%s", i, s.out.String())
		}
	}
	if cs := containersOf(t, cli, tag); len(cs) != 2 {
		t.Errorf("containers = %+v; want one per channel", cs)
	}
	for _, r := range model.Requests() {
		raw := string(r.Raw)
		if strings.Contains(raw, "http:lobby message") && strings.Contains(raw, "http:other message") {
			t.Errorf("a model request mixes both channels:\n%s", raw)
		}
	}
	s.stopOK(t)
}

// TestSessionServeMCPTool: a session profile's MCP server is the worker's
// tool through the session broker: the model asks for the server's tool,
// the worker calls it at /mcp/<server>, the host's MCP client runs it, and
// the answer reaches the model and the guest, before and after a host
// restart. The owner's /usage and the budget metric count every call the
// MCP server and the model saw, and the turn counts in
// rtsandbox_turns_total{mode="session"} (issue 21).
func TestSessionServeMCPTool(t *testing.T) {
	tag, _ := sessionDocker(t)
	docs := fakemcp.New(fakemcp.Tool{Name: "search", Description: "Search the docs",
		Reply: func(json.RawMessage) string { return "the manual says 42" }})
	defer docs.Close()
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if last := req.Last(); last.Role == "tool" {
				return fakemodel.Response{Content: "Found: " + last.Text()}
			}
			for _, tool := range req.Body.Tools {
				if strings.HasPrefix(tool.Function.Name, "mcp_") {
					return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call(tool.Function.Name, map[string]any{"query": "answer"})}}
				}
			}
			return fakemodel.Response{Content: "no MCP tool offered"}
		}))
	defer model.Close()
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	cfg, _ := serveConfig(t, model.ChatURL(), tag, addr)
	appendConfig(t, cfg, fmt.Sprintf("mcp:\n  - name: docs\n    url: %s\n    tools:\n      - {name: search, description: Search the docs, parameters: {type: object}}\n"+
		"profiles:\n  chat: {mode: session, mcp: [docs]}\ndefault_profile: chat\nsession:\n  turn_timeout: 120s\n"+
		"budgets:\n  per_channel: {calls: 1000}\nmetrics:\n  listen: %s\n", docs.URL, metricsAddr))
	s := startServe(t, addr, "--config", cfg)
	s.sayOne(t, "http:lobby", "What does the manual say?", "Found: the manual says 42")
	if n := docs.ToolCalls(); n != 1 {
		t.Errorf("MCP tool calls = %d; want 1", n)
	}
	checkSessionCounted(t, s, metricsAddr, len(model.Requests())+len(docs.Requests()))
	s.stopOK(t)

	// After a host restart the running worker's MCP tool still works
	// through the new broker.
	s2 := startServe(t, addr, "--config", cfg)
	s2.sayOne(t, "http:lobby", "And now?", "Found: the manual says 42")
	if n := docs.ToolCalls(); n != 2 {
		t.Errorf("MCP tool calls after the restart = %d; want 2", n)
	}
	s2.stopOK(t)
}

// checkSessionCounted checks, after one session turn in http:lobby whose
// worker made upstream calls in all (the model's and the MCP server's
// requests), that each was charged to the channel (the owner's /usage)
// and counted in the budget metric, and that the turn counts under
// mode="session" in the turn metrics. (The worker opens its MCP sessions
// in the turn, not in the startup window; broker's
// TestSessionStartupWindowCharged charges the window's calls.)
func checkSessionCounted(t *testing.T, s *server, metricsAddr string, upstreamCalls int) {
	t.Helper()
	want := int64(upstreamCalls)
	code, body := s.call(t, "GET", "/api/v1/channels/http:lobby/usage", serveOwnerToken, "")
	var rep struct {
		Channel []struct {
			Kind string `json:"kind"`
			Used int64  `json:"used"`
		} `json:"channel_usage"`
	}
	if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil {
		t.Fatalf("usage = %d %s (%v)", code, body, err)
	}
	var calls int64
	for _, e := range rep.Channel {
		if e.Kind == "calls" {
			calls = e.Used
		}
	}
	if calls != want {
		t.Errorf("/usage channel calls = %d; want %d, one per upstream call", calls, want)
	}
	fams := scrape(t, "http://"+metricsAddr+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rtsandbox_budget_spent_total", map[string]string{"kind": "calls"}, float64(want)},
		{"rtsandbox_turns_total", map[string]string{"class": "ok", "mode": "session"}, 1},
		{"rtsandbox_turns_total", map[string]string{"mode": "sealed"}, 0},
		{"rtsandbox_turns_active", map[string]string{"mode": "session"}, 0},
	} {
		if got, ok := value(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (series found: %v); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got := sampleCount(fams, "rtsandbox_turn_phase_seconds", map[string]string{"phase": "total", "mode": "session"}); got != 1 {
		t.Errorf(`rtsandbox_turn_phase_seconds{phase="total",mode="session"} count = %d; want 1`, got)
	}
}

// TestSessionServeStopDuringStart: the owner's stop while a channel's
// first turn is still starting its container aborts the turn (the guest
// gets the fixed text), waits for the start and removes the container; the
// next turn starts afresh.
func TestSessionServeStopDuringStart(t *testing.T) {
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, s := e.tag, e.cli, e.s
	reply := s.sayLater("http:lobby", "first words")
	waitFor(t, func() bool { return len(containersOf(t, cli, tag)) > 0 })
	code, body := s.call(t, "POST", "/api/v1/channels/http:lobby/stop", serveOwnerToken, "")
	if code != 200 {
		t.Fatalf("stop = %d %s", code, body)
	}
	select {
	case got := <-reply:
		t.Logf("reply %q, stop %s", got, body)
		// The worker may have answered before the stop arrived.
		if !slices.Equal(got, []string{rtsandbox.TurnFailedOrStoppedText}) && !slices.Equal(got, []string{"Answer to first words"}) {
			t.Errorf("reply = %q; want the fixed text (or the answer, if the stop came late)", got)
		}
		if strings.Contains(body, rtsandbox.StoppedText) && len(containersOf(t, cli, tag)) != 0 {
			t.Errorf("containers after a stop that stopped the turn = %+v; want none", containersOf(t, cli, tag))
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no reply\n%s", s.out.String())
	}
	s.sayOne(t, "http:lobby", "second words", "Answer to second words")
	oneContainer(t, cli, tag, s)
	s.stopOK(t)
}

// TestSessionServeOffRemovesLeftover: a channel moved from a session
// profile to a sealed one leaves its session container running; with no
// session profile in use the restarted serve builds no session runtime,
// and the owner's off still removes that container.
func TestSessionServeOffRemovesLeftover(t *testing.T) {
	e := echoSession(t, "  turn_timeout: 120s\n")
	tag, cli, s := e.tag, e.cli, e.s
	s.sayOne(t, "http:lobby", "in session mode", "Answer to in session mode")
	s.stopOK(t)
	b, err := os.ReadFile(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.cfg, []byte(strings.Replace(string(b), "default_profile: chat", "default_profile: default", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := startServe(t, e.addr, "--config", e.cfg)
	oneContainer(t, cli, tag, s2)
	s2.off(t, "http:lobby")
	if cs := containersOf(t, cli, tag); len(cs) != 0 {
		t.Errorf("containers after off = %+v; want the leftover removed", cs)
	}
	s2.stopOK(t)
}

// TestSessionServeContainerInterrupted: a session container stopped
// outside rtsandbox between turns is recreated by the next turn; one the
// engine restarts (a crash under the restart policy) keeps its id, and its
// worker announces itself again. Either way the next turn continues the
// conversation kept in the workspace.
func TestSessionServeContainerInterrupted(t *testing.T) {
	tests := []struct {
		name      string
		interrupt func(cli *client.Client, id string) error
		sameID    bool
	}{
		{"stopped", func(cli *client.Client, id string) error {
			_, err := cli.ContainerStop(context.Background(), id, client.ContainerStopOptions{})
			return err
		}, false},
		{"restarted by the engine", func(cli *client.Client, id string) error {
			_, err := cli.ContainerRestart(context.Background(), id, client.ContainerRestartOptions{})
			return err
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := echoSession(t, "  turn_timeout: 120s\n")
			tag, cli, model, s := e.tag, e.cli, e.model, e.s
			s.sayOne(t, "http:lobby", "before", "Answer to before")
			c := oneContainer(t, cli, tag, s)
			if err := tt.interrupt(cli, c.ID); err != nil {
				t.Fatal(err)
			}
			s.sayOne(t, "http:lobby", "after", "Answer to after")
			if after := oneContainer(t, cli, tag, s); (after.ID == c.ID) != tt.sameID {
				t.Errorf("the turn after ran in %s, the first in %s; same container wanted: %v", after.ID, c.ID, tt.sameID)
			}
			wantInLast(t, model, "the model request after", "Answer to before")
			s.stopOK(t)
		})
	}
}

// clockResult is how the built-in clock's answer starts.
var clockResult = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}`)

// skillModel plays a model that follows the skills block: it calls the
// gated tool host_clock, reads the skill read_skill names in the refusal,
// calls host_clock again, and answers with what the clock said. A tool
// result it does not expect ends the turn with that result, so a failure
// shows in the reply.
func skillModel() *fakemodel.Server {
	return fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			last := req.Last()
			switch {
			case last.Role != "tool":
				return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_clock", map[string]any{})}}
			case strings.HasPrefix(last.Text(), "Read the clocks skill with read_skill first"):
				return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("read_skill", map[string]any{"skill": "clocks"})}}
			case strings.Contains(last.Text(), "SKILL-BODY"):
				return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_clock", map[string]any{})}}
			case clockResult.MatchString(last.Text()):
				return fakemodel.Response{Content: "clock read"}
			}
			return fakemodel.Response{Content: "unexpected tool result: " + last.Text()}
		}))
}

// writeSkillFile writes the clocks skill's SKILL.md with description desc.
func writeSkillFile(t *testing.T, dir, desc string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "clocks"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := "---\nname: clocks\ndescription: " + desc + "\ntools: [clock]\n---\nSKILL-BODY: say the time in the channel's zone.\n"
	if err := os.WriteFile(filepath.Join(dir, "clocks", "SKILL.md"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSessionServeSkills: a session profile with a skill (docs/session.md, "Skills") end to
// end in a real container. The skills block reaches the model's system
// prompt; the tool the skill gates is refused with the exact text until
// the worker's read_skill read the skill's SKILL.md from the read-only
// copy in run/skills, then runs. A changed SKILL.md (serve restarted)
// recreates the container, whose prompt carries the new description.
func TestSessionServeSkills(t *testing.T) {
	tag, cli := sessionDocker(t)
	model := skillModel()
	defer model.Close()
	skillsDir := t.TempDir()
	writeSkillFile(t, skillsDir, "Telling the time.")
	addr := freeAddr(t)
	cfg, state := serveConfig(t, model.ChatURL(), tag, addr)
	appendConfig(t, cfg, "tools:\n  - {name: clock, builtin: clock}\n"+
		"profiles:\n  chat: {mode: session, tools: [clock], skills: "+skillsDir+"}\ndefault_profile: chat\nsession:\n  turn_timeout: 120s\n")
	s := startServe(t, addr, "--config", cfg)
	s.sayOne(t, "http:lobby", "What time is it?", "clock read")

	reqs := model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model requests; want 4 (gated call, read_skill, clock, answer)\nserve:\n%s", len(reqs), s.out.String())
	}
	if sys := reqs[0].System(); !strings.Contains(sys, "<available_skills>\n<skill><name>clocks</name><description>Telling the time.</description></skill>") {
		t.Errorf("system prompt lacks the skills block:\n%s", sys)
	}
	if got, want := reqs[1].Last().Text(), "Read the clocks skill with read_skill first; it sets how clock is used here."; got != want {
		t.Errorf("gated call's result %q; want %q", got, want)
	}
	if got := reqs[2].Last().Text(); !strings.Contains(got, "name: clocks") || !strings.Contains(got, "SKILL-BODY") {
		t.Errorf("read_skill's result %q; want the SKILL.md", got)
	}
	copied := filepath.Join(state, "party", "http_lobby", "run", "skills", "clocks", "SKILL.md")
	if data, err := os.ReadFile(copied); err != nil || !strings.Contains(string(data), "Telling the time.") {
		t.Errorf("run/skills copy: %q, %v", data, err)
	}
	first := oneContainer(t, cli, tag, s)
	s.stopOK(t)

	writeSkillFile(t, skillsDir, "Telling the time, anew.")
	s2 := startServe(t, addr, "--config", cfg)
	s2.sayOne(t, "http:lobby", "And now?", "clock read")
	if c := oneContainer(t, cli, tag, s2); c.ID == first.ID {
		t.Errorf("a changed SKILL.md kept container %s; want a new one", c.ID)
	}
	if sys := model.Requests()[4].System(); !strings.Contains(sys, "<description>Telling the time, anew.</description>") {
		t.Errorf("the new container's system prompt lacks the new description:\n%s", sys)
	}
}

// TestSessionServeMemory: memory in session mode end to end, through
// serve, the real broker and the real worker. A turn saves a channel note
// with the host's memory tool (the model sees it as host_memory_set); the
// next turn's prompt memory block carries it (shared, so any worker may
// run the turn), also after a restart: the note lives in the host's
// <state_dir>/memory.db (0600), not in the container.
func TestSessionServeMemory(t *testing.T) {
	tag, _ := sessionDocker(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if last := req.Last(); last.Role == "tool" {
				return fakemodel.Response{Content: "Tool said: " + last.Text()}
			}
			if lastWords(req.UserText()) == "Note: tea on Friday" {
				return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_memory_set",
					map[string]any{"scope": "channel", "key": "friday", "text": "Tea on Friday"})}}
			}
			return fakemodel.Response{Content: "Plain answer"}
		}))
	defer model.Close()
	addr := freeAddr(t)
	cfg, state := sessionConfig(t, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	s := startServe(t, addr, "--config", cfg)
	s.sayOne(t, "http:lobby", "Note: tea on Friday", "Tool said: Saved.")
	s.sayOne(t, "http:lobby", "What is on?", "Plain answer")
	const note = `Channel notes (shared with everyone in this channel, JSON data): [{\"key\":\"friday\",\"text\":\"Tea on Friday\"}]`
	wantInLast(t, model, "the turn after the note", note)
	s.stopOK(t)

	fi, err := os.Stat(filepath.Join(state, "memory.db"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("memory database: %v, %v; want a 0600 file", fi, err)
	}
	s2 := startServe(t, addr, "--config", cfg)
	if code, body := s2.call(t, "POST", "/api/v1/channels/http:other/sandbox", serveOwnerToken, `{"enabled":true}`); code != 200 {
		t.Fatalf("owner on = %d %s", code, body)
	}
	s2.sayOne(t, "http:other", "Anything?", "Plain answer")
	if strings.Contains(lastRaw(model), "Tea on Friday") {
		t.Error("another channel's turn carries the note")
	}
	s2.sayOne(t, "http:lobby", "And after the restart?", "Plain answer")
	wantInLast(t, model, "the turn after the restart", note)
	s2.stopOK(t)
}
