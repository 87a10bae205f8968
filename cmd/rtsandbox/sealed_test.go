package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

const sealedTestKey = "cmd-sealed-test-key"

// sealedImage gives one test a worker image under a tag of its own, which
// it removes afterwards. The image is built once per test binary
// (workerImage) and tagged anew for each test: a build's untar, layer
// commit and intermediate containers cost the engine about 1.3 CPU-seconds,
// and the package's tests asked for some 80 of the same build each run.
// Removing a test's tag leaves the image to the others (the engine only
// untags an image that has other tags), and the helpers that find a test's
// containers match the tag it created them with, which the engine reports
// as long as the tag names the image.
func sealedImage(t testing.TB) (string, *client.Client) {
	t.Helper()
	cli := opsDocker(t)
	base := sharedWorkerImage(t, cli)
	tag := "rtsandbox-test-cmd-sealed:" + opsRandom()
	if _, err := cli.ImageTag(context.Background(), client.ImageTagOptions{Source: base, Target: tag}); err != nil {
		t.Fatalf("tag %s as %s: %v", base, tag, err)
	}
	t.Cleanup(func() {
		if err := docker.New(cli).RemoveImage(context.Background(), tag); err != nil {
			t.Errorf("RemoveImage(%s) = %v", tag, err)
		}
	})
	return tag, cli
}

// workerImage is the worker image sealedImage builds once per test
// binary; TestMain removes it (removeWorkerImage).
var workerImage struct {
	once sync.Once
	tag  string
	err  error
}

// sharedWorkerImage builds workerImage on first use and returns its tag.
func sharedWorkerImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	workerImage.once.Do(func() {
		tag := "rtsandbox-test-cmd-worker:" + opsRandom()
		if _, err := workerimage.Build(context.Background(), docker.New(cli), tag); err != nil {
			workerImage.err = fmt.Errorf("build %s: %w", tag, err)
			return
		}
		workerImage.tag = tag
	})
	if workerImage.err != nil {
		t.Fatal(workerImage.err)
	}
	return workerImage.tag
}

// removeWorkerImage removes the image sharedWorkerImage built, if any.
func removeWorkerImage() error {
	if workerImage.tag == "" {
		return nil
	}
	cli, err := dockertest.Connect(context.Background())
	if err != nil {
		return err
	}
	defer cli.Close()
	return docker.New(cli).RemoveImage(context.Background(), workerImage.tag)
}

// sealedConfig writes a config for a sealed turn against model, with a
// short private state dir.
func sealedConfig(t testing.TB, modelURL, image, user string) (path, state string) {
	t.Helper()
	state, err := os.MkdirTemp("", "rtst")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	// A session channel's workspace is its own filesystem where the host
	// can mount one (session.disk auto, as root): serve leaves it mounted
	// at shutdown, as the containers keep running; unmount it before the
	// state dir goes.
	t.Cleanup(func() {
		if _, err := session.DetachAll(filepath.Join(state, config.DefaultPartyDirName)); err != nil {
			t.Errorf("unmount the workspaces: %v", err)
		}
	})
	// No warm pool (sandbox.pool.size 0) unless a test names one
	// (withPool): its idle workers would change the containers and the
	// phases serve's tests count, and cost every serve start containers.
	body := fmt.Sprintf("state_dir: %s\nallow_http: true\nmodel:\n  url: %s\n  name: fake-model\n  api_key_env: RTS_SEALED_KEY\nsandbox:\n  image: %s\n  time_zone: Asia/Taipei\n  pool: {size: 0}\n", state, modelURL, image)
	if user != "" {
		body += "  user: \"" + user + "\"\n"
	}
	path = filepath.Join(state, "rtsandbox.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, state
}

// withPool gives the config at path a warm pool of size workers.
func withPool(t testing.TB, path string, size int) {
	t.Helper()
	editConfig(t, path, "  pool: {size: 0}\n", fmt.Sprintf("  pool: {size: %d}\n", size))
}

// editConfig replaces the first old in the config at path with new; the
// config must hold old.
func editConfig(t testing.TB, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("config %s has no %q to edit", path, old)
	}
	out := strings.Replace(string(b), old, new, 1)
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

// workerUserFlag is the worker user a test config names: required when the
// tests run as root (as CI does).
func workerUserFlag() string {
	if os.Geteuid() == 0 {
		return "1000:1000"
	}
	return ""
}

func sealedEnv(k string) string {
	if k == "RTS_SEALED_KEY" {
		return sealedTestKey
	}
	return ""
}

func runSealed(t *testing.T, getenv env, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, getenv, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// assertNoTurnContainers fails if a container of the test's image is left.
func assertNoTurnContainers(t testing.TB, cli *client.Client, image string) {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Items {
		// Only this test's image: other packages' tests run their own
		// turn containers at the same time.
		if c.Image == image {
			t.Errorf("container %v (%s) left after the turn", c.Names, c.Image)
		}
	}
}

func TestTurnCommandPrintsReply(t *testing.T) {
	tag, cli := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey}, fakemodel.Reply("Hello from the sealed worker."))
	defer model.Close()
	cfg, state := sealedConfig(t, model.ChatURL(), tag, workerUserFlag())
	code, stdout, stderr := runSealed(t, sealedEnv, "", "turn", "--config", cfg, "--channel", "http:lobby",
		"--speaker-id", "alice", "--speaker-name", "Alice", "--principal", "p_alice", "--text", "Hello")
	if code != exitOK || stdout != `{"ok":true,"text":"Hello from the sealed worker."}`+"\n" {
		t.Fatalf("turn = %d %q; want 0 and the reply JSON\nstderr: %s", code, stdout, stderr)
	}
	reqs := model.Requests()
	if len(reqs) != 1 || reqs[0].Body.Model != "fake-model" || strings.Contains(string(reqs[0].Raw), sealedTestKey) {
		t.Errorf("model requests = %d; want one for fake-model without the key in the body", len(reqs))
	}
	if !strings.Contains(reqs[0].System(), "Current time:") {
		t.Errorf("system prompt lacks the time line: %q", reqs[0].System())
	}
	assertNoTurnContainers(t, cli, tag)
	entries, _ := os.ReadDir(filepath.Join(state, "run"))
	if len(entries) != 0 {
		t.Errorf("run dirs left: %v", entries)
	}
	if strings.Contains(stderr, sealedTestKey) || strings.Contains(stdout, sealedTestKey) {
		t.Error("the key reached the command's output")
	}
}

func TestTurnCommandFailureIsGuestText(t *testing.T) {
	tag, cli := sealedImage(t)
	model := fakemodel.New(fakemodel.Status(500))
	defer model.Close()
	cfg, _ := sealedConfig(t, model.ChatURL(), tag, workerUserFlag())
	code, stdout, stderr := runSealed(t, sealedEnv, "", "turn", "--config", cfg, "--channel", "http:lobby",
		"--speaker-id", "alice", "--speaker-name", "Alice", "--principal", "p_alice", "--text", "Hello")
	var reply rtsandbox.Reply
	if err := json.Unmarshal([]byte(stdout), &reply); err != nil || code != exitFail || reply.OK || reply.Text != rtsandbox.TurnFailedOrStoppedText {
		t.Errorf("failed turn = %d %q; want 1 and %q", code, stdout, rtsandbox.TurnFailedOrStoppedText)
	}
	if !strings.Contains(stderr, "turn failed") {
		t.Errorf("stderr lacks the detail: %q", stderr)
	}
	assertNoTurnContainers(t, cli, tag)
}

func TestTurnCommandUsage(t *testing.T) {
	cfg, _ := sealedConfig(t, "http://127.0.0.1:1/v1", "rtsandbox-worker:local", "")
	base := []string{"--config", cfg, "--channel", "http:lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no-text", base, "--text"},
		{"text-too-long", append(base, "--text", strings.Repeat("x", rtsandbox.MaxTextLen+1)), "--text"},
		{"bad-channel", []string{"--config", cfg, "--channel", "x", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p", "--text", "t"}, "--channel"},
	}
	if os.Geteuid() == 0 {
		// The worker is never root: a root host must name the worker user.
		tests = append(tests, struct {
			name string
			args []string
			want string
		}{"root-without-sandbox-user", append(base, "--text", "hi"), "sandbox.user"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runSealed(t, sealedEnv, "", append([]string{"turn"}, tt.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Errorf("turn %s = %d, %q; want 2 naming %s", tt.name, code, stderr, tt.want)
			}
		})
	}
}

func TestChatCommand(t *testing.T) {
	tag, cli := sealedImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.MemoryDemo())
	defer model.Close()
	cfg, _ := sealedConfig(t, model.ChatURL(), tag, workerUserFlag())
	code, stdout, stderr := runSealed(t, sealedEnv, "remember that I drink tea\nwhat do I drink?\n/quit\n", "chat", "--config", cfg)
	if code != exitOK {
		t.Fatalf("chat = %d; stderr %s", code, stderr)
	}
	for _, want := range []string{"console:local", "agent> I'll remember that you drink tea.", "agent> You drink tea."} {
		if !strings.Contains(stdout, want) {
			t.Errorf("chat output lacks %q:\n%s", want, stdout)
		}
	}
	assertNoTurnContainers(t, cli, tag)
}

func TestDemoCommand(t *testing.T) {
	tag, cli := sealedImage(t)
	code, stdout, stderr := runSealed(t, os.Getenv, "", "demo", "--image", tag)
	if code != exitOK {
		t.Fatalf("demo = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{"SCRIPTED STAND-IN", "(already built)", "turn 1", "turn 2", "container started",
		"first broker call", "model ", "reply", "container removed", "agent: I'll remember that you drink tea.", "agent: You drink tea."} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	assertNoTurnContainers(t, cli, tag)
}

// TestTurnAndChatRunStartChecks: turn and chat run serve's start checks
// before any turn, so a missing model key is refused at start naming the
// variable (it used to start, fail every turn with the generic text and
// log "model credential missing" only), with no image built and no model
// call; the surfaces' tokens, which they never read, are not required. A
// channel whose profile is a session one is refused naming the key that
// gives it, instead of being answered by a sealed turn.
func TestTurnAndChatRunStartChecks(t *testing.T) {
	cli := opsDocker(t)
	model := fakemodel.New(fakemodel.Reply("never"))
	defer model.Close()
	missing := "rtsandbox-test-turnchecks:" + opsRandom()
	turnArgs := []string{"turn", "--channel", "http:lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p", "--text", "hi"}
	tests := []struct {
		name     string
		extra    string
		getenv   env
		args     []string
		wantCode int
		want     []string
	}{
		{"turn-missing-key", "http: {listen: '127.0.0.1:1', token_env: RTS_UNSET_TOKEN}\n", mapEnv(nil), turnArgs, exitFail,
			[]string{"refusing to start: 1 start check(s) failed", "fail  model.api_key_env", "RTS_SEALED_KEY is unset or empty"}},
		{"chat-missing-key", "", mapEnv(nil), []string{"chat"}, exitFail,
			[]string{"refusing to start: 1 start check(s) failed", "RTS_SEALED_KEY is unset or empty"}},
		{"turn-session-default-profile", "default_profile: s\nprofiles: {s: {mode: session}}\n", sealedEnv, turnArgs, exitUsage,
			[]string{`default_profile: http:lobby gets the session profile "s"`, "HTTP API"}},
		{"chat-session-channel-profile", "profiles: {s: {mode: session}}\nchannels_profile: {\"console:local\": s}\n", sealedEnv, []string{"chat"}, exitUsage,
			[]string{`channels_profile["console:local"]: console:local gets the session profile "s"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := sealedConfig(t, model.ChatURL(), missing, workerUserFlag())
			f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(tt.extra); err != nil {
				t.Fatal(err)
			}
			f.Close()
			args := append(append([]string{}, tt.args...), "--config", cfg)
			code, stdout, stderr := runSealed(t, tt.getenv, "hello\n/quit\n", args...)
			if code != tt.wantCode {
				t.Errorf("%s = %d; want %d\nstdout: %s\nstderr: %s", tt.name, code, tt.wantCode, stdout, stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("stdout = %q; want nothing for a refused start", stdout)
			}
		})
	}
	if n := len(model.Requests()); n != 0 {
		t.Errorf("the model was called %d times; want none", n)
	}
	if ok, err := docker.New(cli).ImageExists(context.Background(), missing); ok || err != nil {
		t.Errorf("ImageExists(%s) = %v, %v after refused starts; want false, nil", missing, ok, err)
	}
}
