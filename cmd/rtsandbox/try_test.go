package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/hostbin"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
)

// A README try-it block: the markers around its commands and the example
// config its serve line picks (<config>.yaml, or <config>-root.yaml as
// root).
type tryBlock struct {
	begin, end string
	config     string
}

var (
	// sealedTry is "Try the chat host": a sealed turn.
	sealedTry = tryBlock{"<!-- try:begin -->", "<!-- try:end -->", "try"}
	// sessionTry is "Try a session channel": an image in, a file out,
	// memory recalled.
	sessionTry = tryBlock{"<!-- try-session:begin -->", "<!-- try-session:end -->", "try-session"}
)

// The fixed addresses the README's commands and the try configs use; a
// test runs them on free ports instead, so that two copies of the suite,
// or a test and a reader's try, never collide.
const (
	readmeHTTPAddr  = "127.0.0.1:18787"
	readmeModelAddr = "127.0.0.1:18788"
)

// repoRoot is the checkout this package sits in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// tryCommands returns the shell commands between the README's markers, in
// the sh block there: one per line, comments and blank lines left out.
func tryCommands(readme, begin, end string) ([]string, error) {
	_, rest, ok := strings.Cut(readme, begin)
	block, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		return nil, fmt.Errorf("README has no %s … %s section", begin, end)
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(block), "```sh\n")
	body, ok2 = strings.CutSuffix(body, "```")
	if !ok || !ok2 {
		return nil, fmt.Errorf("the section %s is not one ```sh block", begin)
	}
	var cmds []string
	for _, line := range strings.Split(body, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			cmds = append(cmds, line)
		}
	}
	return cmds, nil
}

func TestTryCommandsExtraction(t *testing.T) {
	readme := "x\n" + sealedTry.begin + "\n```sh\n# c\na &\n\nb &\nc\n```\n" + sealedTry.end + "\n" +
		sessionTry.begin + "\n```sh\nd &\ne &\nf\ng\n```\n" + sessionTry.end + "\n"
	for _, tt := range []struct {
		b    tryBlock
		want []string
	}{{sealedTry, []string{"a &", "b &", "c"}}, {sessionTry, []string{"d &", "e &", "f", "g"}}} {
		got, err := tryCommands(readme, tt.b.begin, tt.b.end)
		if diff := cmp.Diff(tt.want, got); diff != "" || err != nil {
			t.Errorf("tryCommands(%s) = %v (-want +got):\n%s", tt.b.begin, err, diff)
		}
	}
	if _, err := tryCommands("no markers", sealedTry.begin, sealedTry.end); err == nil {
		t.Error("tryCommands(no markers) = nil error")
	}
}

// The try configs differ only where they must: a root host's from a
// user's in the worker user and state_dir; the session try's from the
// sealed try's in the profiles, the session block and state_dir.
func TestTryConfigs(t *testing.T) {
	root := repoRoot(t)
	load := func(name string) *config.Config {
		t.Helper()
		cfg, err := config.Load(filepath.Join(root, "examples", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, base := range []string{"try", "try-session"} {
		user, asRoot := load(base), load(base+"-root")
		if asRoot.Sandbox.User != "65534:65534" || user.Sandbox.User != "" {
			t.Errorf("%s: sandbox.user = %q (root), %q (user); want 65534:65534 and none", base, asRoot.Sandbox.User, user.Sandbox.User)
		}
		asRoot.Sandbox.User, asRoot.Sandbox.UID, asRoot.Sandbox.GID = "", 0, 0
		asRoot.StateDir = user.StateDir
		asRoot.Session.PartyDir = user.Session.PartyDir // <state_dir>/party by default
		if diff := cmp.Diff(user, asRoot); diff != "" {
			t.Errorf("%s-root.yaml differs from %s.yaml beyond user and state_dir (-user +root):\n%s", base, base, diff)
		}
	}
	sealed, session := load("try"), load("try-session")
	if _, p := session.ProfileFor("http:lobby"); p.Mode != config.ModeSession {
		t.Errorf("try-session.yaml: http:lobby's profile = %+v; want session mode", p)
	}
	if session.StateDir == sealed.StateDir {
		t.Errorf("the session try shares state_dir %s with the sealed try", session.StateDir)
	}
	session.Profiles, session.DefaultProfile, session.Session = sealed.Profiles, sealed.DefaultProfile, sealed.Session
	session.StateDir = sealed.StateDir
	if diff := cmp.Diff(sealed, session); diff != "" {
		t.Errorf("try-session.yaml differs from try.yaml beyond profiles, session and state_dir (-sealed +session):\n%s", diff)
	}
}

// TestReadmeTryItCommands runs each README try-it block: its commands
// verbatim but for the addresses and paths a test must not share (free
// loopback ports for 18787 and 18788; the config's state_dir in a temp
// dir, and a worker image tag of the test's own), in a working directory
// holding bin/ (built once, as `make build` builds it) and examples/: the
// stand-in model and serve in the background, then each curl, whose
// answers must hold the stand-in's replies. Both processes must then
// stop on SIGTERM with exit 0, leaving no container behind (a session
// channel's, which serve leaves running on purpose, after the README's
// `rtsandbox reap`).
//
//   - sealed: one message, "I'll remember that you drink tea."
//   - session: an image goes in and is described (count, type, size, its
//     name), a file comes back with the bytes the message asked for, and
//     memory stored in one message is recalled in the next.
func TestReadmeTryItCommands(t *testing.T) {
	parallelServe(t)
	if testing.Short() {
		t.Skip("builds the binaries and runs sealed and session turns")
	}
	cli := dockertest.Require(t)
	requireCurl(t)
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bin := tryBinaries(t, root)
	image := tryImage(t, cli)
	t.Run("sealed", func(t *testing.T) {
		rig := startTry(t, cli, string(readme), bin, image, sealedTry)
		if len(rig.cmds) != 1 {
			t.Fatalf("README sealed try commands after the two in the background = %q; want one curl", rig.cmds)
		}
		out := rig.run(t, rig.cmds[0])
		if want := fakemodel.DemoRememberPrefix + "tea."; !strings.Contains(out, want) {
			t.Errorf("curl = %s; want the stand-in's %q\nserve:\n%s\nstand-in:\n%s", out, want, rig.serve.out, rig.model.out)
		}
		rig.stop(t)
		assertNoInstallationContainers(t, cli, host.InstallationID(rig.cfg))
	})
	t.Run("session", func(t *testing.T) {
		rig := startTry(t, cli, string(readme), bin, image, sessionTry)
		if len(rig.cmds) != 4 {
			t.Fatalf("README session try commands after the two in the background = %q; want four curls: image, file, remember, recall", rig.cmds)
		}
		image := rig.reply(t, rig.cmds[0])
		name, size := `-0-dot.png"`, fakemodel.DescribeImage("image/png", len(tryPNG))
		if !strings.HasPrefix(image.text, "I was shown 1 image:") || !strings.Contains(image.text, size) || !strings.Contains(image.text, name) {
			t.Errorf("image reply %q; want 1 image, %q and the name %s", image.text, size, name)
		}
		file := rig.reply(t, rig.cmds[1])
		want := []rtsandbox.File{{Name: "notes.md", Data: []byte("hello from the sandbox\n")}}
		if diff := cmp.Diff(want, file.files); diff != "" || !strings.Contains(file.text, "I wrote notes.md") {
			t.Errorf("file reply %q, files (-want +got):\n%s", file.text, diff)
		}
		if got := rig.reply(t, rig.cmds[2]).text; got != fakemodel.DemoRememberPrefix+"tea." {
			t.Errorf("remember reply %q", got)
		}
		if got := rig.reply(t, rig.cmds[3]).text; got != fakemodel.DemoAnswerPrefix+"tea." {
			t.Errorf("recall reply %q; want %q", got, fakemodel.DemoAnswerPrefix+"tea.")
		}
		rig.stop(t)
		// The README's last step: serve leaves the channel's container
		// running, reap removes it.
		reap := exec.Command(filepath.Join(rig.work, "bin", "rtsandbox"), "reap", "--config", rig.cfgPath)
		if out, err := reap.CombinedOutput(); err != nil || !strings.Contains(string(out), "removed 1 session container(s)") {
			t.Errorf("rtsandbox reap = %v %s; want one session container removed", err, out)
		}
		assertNoInstallationContainers(t, cli, host.InstallationID(rig.cfg))
	})
}

// tryPNG is the image in the README's session try (a 1×1 grey PNG), as
// the base64 in its curl decodes.
var tryPNG = func() []byte {
	b, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAADklEQVR4nGJiAAQAAP//AAYAA/rQWa4AAAAASUVORK5CYII=")
	return b
}()

// tryRig is one README block running: the stand-in and serve in the
// background, and the block's other commands, with the test's own
// addresses.
type tryRig struct {
	work, cfgPath string
	cfg           *config.Config
	cmds          []string
	model, serve  *background
}

// startTry prepares a working directory for block b (bin/ linked to bin,
// examples/ with the block's configs on the test's addresses and state
// dir, and the worker image tag image), starts its two background
// commands and waits until serve is healthy.
func startTry(t *testing.T, cli *client.Client, readme, bin, image string, b tryBlock) *tryRig {
	t.Helper()
	cmds, err := tryCommands(readme, b.begin, b.end)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) < 3 || !strings.HasSuffix(cmds[0], " &") || !strings.HasSuffix(cmds[1], " &") {
		t.Fatalf("README try commands = %q; want the first two ending in &, then at least one more", cmds)
	}
	httpAddr, modelAddr := freeAddr(t), freeAddr(t)
	subst := strings.NewReplacer(readmeHTTPAddr, httpAddr, readmeModelAddr, modelAddr).Replace
	for i, c := range cmds {
		// Free ports come from the ephemeral range (32768–60999 on
		// Linux), never 18787 or 18788.
		if cmds[i] = subst(c); strings.Contains(cmds[i], ":18787") || strings.Contains(cmds[i], ":18788") {
			t.Fatalf("command %q keeps a fixed port after the substitution", cmds[i])
		}
	}
	rig := &tryRig{work: t.TempDir(), cmds: cmds[2:]}
	if err := os.Symlink(bin, filepath.Join(rig.work, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(rig.work, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(shortTempDir(t), "state") // short: Unix socket paths are limited
	for _, name := range []string{b.config + ".yaml", b.config + "-root.yaml"} {
		data, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		text := tryConfigText(subst(string(data)), state, image)
		if err := os.WriteFile(filepath.Join(rig.work, "examples", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rig.cfgPath, rig.cfg = tryConfig(t, rig.work, b.config)
	if rig.cfg.StateDir != state || rig.cfg.HTTP.Listen != httpAddr || !strings.Contains(rig.cfg.Model.URL.String(), modelAddr) || host.ImageTag(rig.cfg) != image {
		t.Fatalf("%s: state_dir %s, http.listen %s, model.url %s, image %s; want the test's own", rig.cfgPath, rig.cfg.StateDir, rig.cfg.HTTP.Listen, rig.cfg.Model.URL, host.ImageTag(rig.cfg))
	}
	t.Cleanup(func() { removeInstallationContainers(t, cli, host.InstallationID(rig.cfg)) })
	rig.model = startBackground(t, rig.work, cmds[0])
	rig.serve = startBackground(t, rig.work, cmds[1])
	waitHealthy(t, "http://"+httpAddr+"/healthz", rig.serve, rig.model)
	return rig
}

// tryConfigText is a try config with its state_dir line replaced by state
// and the worker image named image (a sandbox block added when it has
// none).
func tryConfigText(text, state, image string) string {
	var b strings.Builder
	hasSandbox := false
	for line := range strings.Lines(text) {
		switch {
		case strings.HasPrefix(line, "state_dir:"):
			line = "state_dir: " + state + "\n"
		case strings.HasPrefix(line, "sandbox:"):
			hasSandbox = true
			line += "  image: " + image + "\n"
		}
		b.WriteString(line)
	}
	if !hasSandbox {
		b.WriteString("sandbox:\n  image: " + image + "\n")
	}
	return b.String()
}

// run runs a foreground command of the block in the working directory
// and returns its output.
func (r *tryRig) run(t *testing.T, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", line)
	c.Dir = r.work
	out, err := c.CombinedOutput()
	t.Logf("%.80s…: %.600s", line, out)
	if err != nil {
		t.Fatalf("%q: %v %s\nserve:\n%s\nstand-in:\n%s", line, err, out, r.serve.out, r.model.out)
	}
	return string(out)
}

// tryReply is a wait answer of the HTTP API: its chunks joined, its files.
type tryReply struct {
	text  string
	files []rtsandbox.File
}

// reply runs a curl of the block and reads its wait answer.
func (r *tryRig) reply(t *testing.T, line string) tryReply {
	t.Helper()
	out := r.run(t, line)
	var a apiReplies
	if err := json.Unmarshal([]byte(out), &a); err != nil || len(a.Replies) == 0 {
		t.Fatalf("%q answered %s (%v); want a wait answer with replies\nserve:\n%s", line, out, err, r.serve.out)
	}
	var got tryReply
	var chunks []string
	for _, rep := range a.Replies {
		chunks = append(chunks, rep.Chunks...)
		got.files = append(got.files, rep.Files...)
	}
	got.text = strings.Join(chunks, "")
	return got
}

// stop ends serve, then the stand-in, with SIGTERM: both must exit 0, and
// the stand-in must have said what it is.
func (r *tryRig) stop(t *testing.T) {
	t.Helper()
	if code := r.serve.stop(t); code != 0 {
		t.Errorf("serve exit = %d; want 0\n%s", code, r.serve.out)
	}
	if code := r.model.stop(t); code != 0 || !strings.Contains(r.model.out.String(), "SCRIPTED STAND-IN") {
		t.Errorf("stand-in exit = %d, output %q; want 0 and its banner", code, r.model.out)
	}
}

// requireCurl skips without curl, except under CI, where it fails.
func requireCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if dockertest.InCI() {
			t.Fatalf("curl is needed for the README's commands under CI=true: %v", err)
		}
		t.Skip("curl not installed:", err)
	}
}

// tryBinaries builds bin/ as `make build` builds it (internal/hostbin),
// once for every block, and returns the directory.
func tryBinaries(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	hostbin.Build(t, root, bin)
	return bin
}

// tryConfig loads the config the README's serve command picks for this
// user from the examples of work, and returns its path too.
func tryConfig(t *testing.T, work, base string) (string, *config.Config) {
	t.Helper()
	name := base + ".yaml"
	if os.Geteuid() == 0 {
		name = base + "-root.yaml"
	}
	path := filepath.Join(work, "examples", name)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// tryImage is a worker image tag of the test's own, which the first
// serve builds and the second finds; it is removed when the test ends.
// The blocks then never replace or remove an operator's
// rtsandbox-worker:local, and two copies of the test never share one.
func tryImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	image := fmt.Sprintf("rtsandbox-try-test:%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		if err := docker.New(cli).RemoveImage(context.Background(), image); err != nil { // a missing one is not an error
			t.Errorf("RemoveImage(%s) = %v", image, err)
		}
	})
	return image
}

// background is a README command that ends in & running verbatim in a
// shell of its own process group. The shell passes SIGTERM on to the
// command, as an operator's kill %1 would, and exits with its status.
type background struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan int
}

// backgroundScript runs line (which ends in &) and waits for it; on
// SIGTERM it forwards the signal and exits with the command's status.
const backgroundScript = `trap 'kill -TERM "$pid"; wait "$pid"; exit $?' TERM
%s
pid=$!
wait "$pid"
`

func startBackground(t *testing.T, dir, line string) *background {
	t.Helper()
	b := &background{out: &syncbuf.Buffer{}, done: make(chan int, 1)}
	b.cmd = exec.Command("sh", "-c", fmt.Sprintf(backgroundScript, line))
	b.cmd.Dir, b.cmd.Stdout, b.cmd.Stderr = dir, b.out, b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait()
		b.done <- b.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		select {
		case code := <-b.done:
			b.done <- code
		default: // still running after a failure: end it
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	})
	return b
}

// stop sends SIGTERM to the shell, which passes it on, and returns the
// command's exit code.
func (b *background) stop(t *testing.T) int {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	select {
	case code := <-b.done:
		b.done <- code
		return code
	case <-time.After(time.Minute):
		t.Fatalf("%q did not stop within a minute:\n%s", b.cmd.Args, b.out)
	}
	return -1
}

// waitHealthy polls url until it answers 200; a background command that
// exits first fails the test.
func waitHealthy(t *testing.T, url string, procs ...*background) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := hc.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		for _, p := range procs {
			select {
			case code := <-p.done:
				p.done <- code
				t.Fatalf("%q exited with %d before serve was ready:\n%s", p.cmd.Args, code, p.out)
			default:
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not ready within 3 minutes:\n%s", url, procs[0].out)
}

// removeInstallationContainers removes every container of installation
// id.
func removeInstallationContainers(t *testing.T, cli *client.Client, id string) {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true})
	if err != nil {
		t.Error(err)
		return
	}
	for _, c := range res.Items {
		if c.Labels[rtcontainer.InstallationLabel] == id {
			if _, err := cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
				t.Errorf("remove %v: %v", c.Names, err)
			}
		}
	}
}

// assertNoInstallationContainers fails if a container of installation id
// is left.
func assertNoInstallationContainers(t *testing.T, cli *client.Client, id string) {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Items {
		if c.Labels[rtcontainer.InstallationLabel] == id {
			t.Errorf("container %v of installation %s left behind", c.Names, id)
		}
	}
}
