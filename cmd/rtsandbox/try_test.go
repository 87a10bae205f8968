package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/config"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// Markers around the README's "Try the chat host" commands.
const (
	tryBegin = "<!-- try:begin -->"
	tryEnd   = "<!-- try:end -->"
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
func tryCommands(readme string) ([]string, error) {
	_, rest, ok := strings.Cut(readme, tryBegin)
	block, _, ok2 := strings.Cut(rest, tryEnd)
	if !ok || !ok2 {
		return nil, fmt.Errorf("README has no %s … %s section", tryBegin, tryEnd)
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(block), "```sh\n")
	body, ok2 = strings.CutSuffix(body, "```")
	if !ok || !ok2 {
		return nil, errors.New("the try section is not one ```sh block")
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
	readme := "x\n" + tryBegin + "\n```sh\n# c\na &\n\nb &\nc\n```\n" + tryEnd + "\n"
	got, err := tryCommands(readme)
	if diff := cmp.Diff([]string{"a &", "b &", "c"}, got); diff != "" || err != nil {
		t.Errorf("tryCommands() = %v (-want +got):\n%s", err, diff)
	}
	if _, err := tryCommands("no markers"); err == nil {
		t.Error("tryCommands(no markers) = nil error")
	}
}

// The two try configs differ only where a root host must differ.
func TestTryConfigs(t *testing.T) {
	root := repoRoot(t)
	user, err := config.Load(filepath.Join(root, "examples/try.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	asRoot, err := config.Load(filepath.Join(root, "examples/try-root.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if asRoot.Sandbox.User != "65534:65534" || user.Sandbox.User != "" {
		t.Errorf("sandbox.user = %q (root), %q (user); want 65534:65534 and none", asRoot.Sandbox.User, user.Sandbox.User)
	}
	asRoot.Sandbox.User, asRoot.Sandbox.UID, asRoot.Sandbox.GID = "", 0, 0
	asRoot.StateDir = user.StateDir
	asRoot.Session.PartyDir = user.Session.PartyDir // <state_dir>/party by default
	if diff := cmp.Diff(user, asRoot); diff != "" {
		t.Errorf("try-root.yaml differs from try.yaml beyond user and state_dir (-user +root):\n%s", diff)
	}
}

// TestReadmeTryItCommands runs the README's three "Try the chat host"
// commands verbatim, in a working directory holding bin/ (built as `make
// build` builds it) and examples/: the stand-in model and serve in the
// background, then curl, whose output must hold the stand-in's reply.
// Both processes must then stop on SIGTERM with exit 0, leaving no
// container behind.
func TestReadmeTryItCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a sealed turn")
	}
	cli := dockertest.Require(t)
	requireCurl(t)
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := tryCommands(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 3 || !strings.HasSuffix(cmds[0], " &") || !strings.HasSuffix(cmds[1], " &") {
		t.Fatalf("README try commands = %q; want three, the first two ending in &", cmds)
	}
	work := tryWorkdir(t, root)
	cfg := tryConfig(t, work)
	tryCleanState(t, cfg, cli)
	for _, addr := range []string{cfg.HTTP.Listen, strings.TrimPrefix(strings.Split(cfg.Model.URL.String(), "/v1")[0], "http://")} {
		requireFreePort(t, addr)
	}

	model := startBackground(t, work, cmds[0])
	serve := startBackground(t, work, cmds[1])
	waitHealthy(t, "http://"+cfg.HTTP.Listen+"/healthz", serve, model)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	curl := exec.CommandContext(ctx, "sh", "-c", cmds[2])
	curl.Dir = work
	out, err := curl.CombinedOutput()
	t.Logf("curl: %s", out)
	want := fakemodel.DemoRememberPrefix + "tea."
	if err != nil || !strings.Contains(string(out), want) {
		t.Errorf("curl = %v %s; want the stand-in's %q\nserve:\n%s\nstand-in:\n%s", err, out, want, serve.out, model.out)
	}
	if code := serve.stop(t); code != 0 {
		t.Errorf("serve exit = %d; want 0\n%s", code, serve.out)
	}
	if code := model.stop(t); code != 0 || !strings.Contains(model.out.String(), "SCRIPTED STAND-IN") {
		t.Errorf("stand-in exit = %d, output %q; want 0 and its banner", code, model.out)
	}
	assertNoInstallationContainers(t, cli, host.InstallationID(cfg))
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

// tryWorkdir prepares a directory with examples/ from the checkout and
// bin/ built as `make build` builds it: a static worker, and a static
// host binary that embeds it (the overlay puts the worker where the embed
// directive looks, without writing into the checkout).
func tryWorkdir(t *testing.T, root string) string {
	t.Helper()
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	for _, dir := range []string{bin, filepath.Join(work, "examples")} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"try.yaml", "try-root.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, "examples", name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	worker := filepath.Join(bin, workerimage.WorkerFile)
	goBuild(t, root, []string{"GOOS=linux"}, "-ldflags=-s -w", "-o", worker, "./cmd/rtsandbox-worker")
	overlay := filepath.Join(work, "overlay.json")
	spec := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(root, "workerimage", workerimage.WorkerFile), worker)
	if err := os.WriteFile(overlay, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	goBuild(t, root, nil, "-tags", "embedworker", "-overlay", overlay, "-o", filepath.Join(bin, "rtsandbox"), "./cmd/rtsandbox")
	return work
}

func goBuild(t *testing.T, root string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build", "-trimpath"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %q: %v\n%s", args, err, out)
	}
}

// tryConfig loads the config the README's serve command picks for this
// user.
func tryConfig(t *testing.T, work string) *config.Config {
	t.Helper()
	name := "try.yaml"
	if os.Geteuid() == 0 {
		name = "try-root.yaml"
	}
	cfg, err := config.Load(filepath.Join(work, "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tryCleanState removes, when the test ends, the state dir and the
// worker image the commands create, unless they were there before (an
// operator's own try).
func tryCleanState(t *testing.T, cfg *config.Config, cli *client.Client) {
	t.Helper()
	_, err := os.Lstat(cfg.StateDir)
	stateExisted := err == nil
	d := docker.New(cli)
	imageExisted, err := d.ImageExists(context.Background(), host.ImageTag(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !stateExisted {
			os.RemoveAll(cfg.StateDir)
		}
		if !imageExisted {
			if err := d.RemoveImage(context.Background(), host.ImageTag(cfg)); err != nil {
				t.Errorf("RemoveImage(%s) = %v", host.ImageTag(cfg), err)
			}
		}
	})
}

func requireFreePort(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the README's commands need %s, which is in use: %v", addr, err)
	}
	ln.Close()
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
