package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// Variables of the doctor test config.
const (
	docModelKey   = "RTS_DOC_MODEL_KEY"
	docToken      = "RTS_DOC_TOKEN"
	docOwnerToken = "RTS_DOC_OWNER_TOKEN"
	docDiscord    = "RTS_DOC_DISCORD_TOKEN"
)

// mapEnv is an environment made of vars.
func mapEnv(vars map[string]string) env {
	return func(k string) string { return vars[k] }
}

// goodEnv sets every variable of doctorConfig, with distinct tokens.
func goodEnv() map[string]string {
	return map[string]string{docModelKey: "model-key", docToken: "guest-token", docOwnerToken: "owner-token"}
}

// doctorConfig writes a config every offline check passes with under
// goodEnv, given a current image: a private state dir, the worker user a
// root host needs, the http surface with guest and owner tokens. extra is
// appended.
func doctorConfig(t *testing.T, image, extra string) (path, state string) {
	t.Helper()
	state, err := os.MkdirTemp("", "rtsdoc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	body := fmt.Sprintf(`state_dir: %s
allow_http: true
model: {url: "http://127.0.0.1:9/v1/chat/completions", name: m, api_key_env: %s}
sandbox: {image: %q%s}
http: {listen: %q, token_env: %s, owner_token_env: %s}
access: {owners: ["http:boss"], members: everyone}
`, state, docModelKey, image, userField(), freeAddr(t), docToken, docOwnerToken) + extra
	path = filepath.Join(t.TempDir(), "doctor.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, state
}

// userField names the worker user in a flow mapping when the tests run as
// root.
func userField() string {
	if u := workerUserFlag(); u != "" {
		return fmt.Sprintf(", user: %q", u)
	}
	return ""
}

// staleImage builds a tiny image under a fresh tag whose worker label
// names no real worker (testImage).
func staleImage(t *testing.T) (tag string, d *docker.Driver) {
	t.Helper()
	tag, _, d = testImage(t, "stale", fmt.Sprintf("%s=%q", workerimage.LabelWorkerSHA256, strings.Repeat("0", 64)))
	return tag, d
}

// testImage builds a tiny image labelled labels under a fresh tag
// rtsandbox-test-<kind>:<nonce>, and removes it when the test ends,
// together with what a rebuild put under the tag. A label unique to the
// test keeps the image's ID its own, so removing it by ID touches no
// other test. It returns the tag, the image's ID and the driver.
func testImage(t *testing.T, kind, labels string) (tag, id string, d *docker.Driver) {
	t.Helper()
	cli := opsDocker(t)
	d = docker.New(cli)
	nonce := opsRandom()
	tag = "rtsandbox-test-" + kind + ":" + nonce
	dockerfile := fmt.Sprintf("FROM scratch\nLABEL %s rtsandbox.test=%q\n", labels, nonce)
	if err := d.BuildImage(context.Background(), tag, map[string][]byte{"Dockerfile": []byte(dockerfile)}); err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	res, err := cli.ImageInspect(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ref := range []string{tag, res.ID} {
			if err := d.RemoveImage(context.Background(), ref); err != nil {
				t.Errorf("RemoveImage(%s) = %v", ref, err)
			}
		}
	})
	return tag, res.ID, d
}

func runDoctorCmd(t *testing.T, getenv env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"doctor"}, args...), getenv, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// verdicts maps each check name in doctor's output to its status.
func verdicts(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "ok" && f[0] != "warn" && f[0] != "fail") {
			continue
		}
		name := strings.TrimSpace(line[6:min(len(line), 24)])
		got[name] = f[0]
	}
	return got
}

func failing(v map[string]string) []string {
	var out []string
	for name, s := range v {
		if s == "fail" {
			out = append(out, name)
		}
	}
	return out
}

// TestDoctorCommand produces each failure mode for real, one at a time,
// from a setup every check passes, and checks that exactly that check
// fails with its fix and the exit code says so.
func TestDoctorCommand(t *testing.T) {
	current, _ := sealedImage(t)
	stale, _ := staleImage(t)
	tests := []struct {
		name     string
		image    string
		extra    string
		env      func(map[string]string)
		setup    func(t *testing.T, state string)
		wantFail []string
		wantText []string
	}{
		{name: "all-ok", image: current, wantText: []string{"doctor: no check failed", "holds this binary's worker"}},
		{name: "docker-unreachable", image: current,
			setup: func(t *testing.T, _ string) {
				t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
			},
			wantFail: []string{"docker"}, wantText: []string{"Docker is unreachable", "no-docker.sock", "fix: start the Docker daemon", "warn  worker image"}},
		// What serve rebuilds at start is a warning, not a failure: the
		// installation is ready to serve.
		{name: "stale-image", image: stale,
			wantText: []string{"warn  worker image", "holds another worker (sha256 000000000000)", "serve, turn and chat build it at start", "fix: rtsandbox image build", "doctor: no check failed"}},
		{name: "missing-image", image: "rtsandbox-test-missing:" + opsRandom(),
			wantText: []string{"warn  worker image", "is not built yet; serve, turn and chat build it at start", "fix: rtsandbox image build"}},
		{name: "group-readable-state-dir", image: current,
			setup: func(t *testing.T, state string) {
				if err := os.Chmod(state, 0o750); err != nil {
					t.Fatal(err)
				}
			},
			wantFail: []string{"state_dir"}, wantText: []string{"mode 0750", "fix: chmod 700 "}},
		{name: "unset-variable", image: current, env: func(e map[string]string) { delete(e, docModelKey) },
			wantFail: []string{"model.api_key_env"}, wantText: []string{docModelKey + " is unset or empty", "fix: set " + docModelKey}},
		{name: "empty-variable", image: current, env: func(e map[string]string) { e[docModelKey] = "" },
			wantFail: []string{"model.api_key_env"}, wantText: []string{docModelKey + " is unset or empty"}},
		{name: "equal-tokens", image: current, env: func(e map[string]string) { e[docOwnerToken] = e[docToken] },
			wantFail: []string{"http tokens"}, wantText: []string{"hold the same token", "fix: give " + docOwnerToken + " its own random value"}},
		{name: "missing-discord-token", image: current, extra: "discord: {token_env: " + docDiscord + "}\n",
			wantFail: []string{"discord.token_env"}, wantText: []string{docDiscord + " is unset or empty", "Discord developer portal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, state := doctorConfig(t, tt.image, tt.extra)
			vars := goodEnv()
			if tt.env != nil {
				tt.env(vars)
			}
			if tt.setup != nil {
				tt.setup(t, state)
			}
			code, out, errOut := runDoctorCmd(t, mapEnv(vars), "--config", cfg)
			wantCode := exitOK
			if tt.wantFail != nil {
				wantCode = exitFail
			}
			if code != wantCode {
				t.Errorf("doctor = %d; want %d\n%s%s", code, wantCode, out, errOut)
			}
			if diff := cmp.Diff(tt.wantFail, failing(verdicts(out))); diff != "" {
				t.Errorf("failed checks mismatch (-want +got):\n%s\n%s", diff, out)
			}
			for _, want := range tt.wantText {
				if !strings.Contains(out, want) {
					t.Errorf("doctor output lacks %q:\n%s", want, out)
				}
			}
			for _, secret := range vars {
				if secret != "" && strings.Contains(out, secret) {
					t.Errorf("doctor output contains the value %q", secret)
				}
			}
		})
	}
}

func TestDoctorUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no-config", nil, "--config is required"},
		{"missing-file", []string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, "no such file"},
		{"positional", []string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runDoctorCmd(t, mapEnv(nil), tt.args...)
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("doctor %q = %d %q; want %d and %q", tt.args, code, errOut, exitUsage, tt.want)
			}
		})
	}
}

// TestServeRefusesFailedStartCheck: serve runs the doctor's checks once it
// holds the state dir, names each failure and its fix, and builds no
// image for a start it refuses.
func TestServeRefusesFailedStartCheck(t *testing.T) {
	cli := opsDocker(t)
	missing := "rtsandbox-test-doctor-missing:" + opsRandom()
	cfg, _ := doctorConfig(t, missing, "")
	vars := goodEnv()
	delete(vars, docToken)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"serve", "--config", cfg}, mapEnv(vars), strings.NewReader(""), &out, &errOut)
	if code != exitFail {
		t.Fatalf("serve = %d; want 1\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"refusing to start: 1 start check(s) failed", "fail  http.token_env", docToken + " is unset or empty", "fix: set " + docToken} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("serve stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	if ok, err := docker.New(cli).ImageExists(context.Background(), missing); ok || err != nil {
		t.Errorf("ImageExists(%s) = %v, %v after a refused start; want false, nil", missing, ok, err)
	}
}

// TestStartChecksRebuildStaleImage: at serve start a stale image is
// rebuilt from this binary's worker and the log says so.
func TestStartChecksRebuildStaleImage(t *testing.T) {
	tag, d := staleImage(t)
	path, _ := doctorConfig(t, tag, "")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	if err := host.StartChecks(context.Background(), cfg, mapEnv(goodEnv()), slog.New(slog.NewJSONHandler(logs, nil))); err != nil {
		t.Fatalf("StartChecks = %v; want nil\n%s", err, logs.String())
	}
	for _, want := range []string{`"msg":"worker image rebuilt at start"`, "held another worker (sha256 000000000000)", `"msg":"start checks passed"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	assertImageCurrent(t, d, tag)
}

// TestTurnRebuildsStaleImage: turn rebuilds a stale image, says so on
// stderr, and the turn then runs on this binary's worker.
func TestTurnRebuildsStaleImage(t *testing.T) {
	tag, d := staleImage(t)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey}, fakemodel.Reply("Fresh worker."))
	defer model.Close()
	cfg, _ := sealedConfig(t, model.ChatURL(), tag, workerUserFlag())
	code, stdout, stderr := runSealed(t, sealedEnv, "", "turn", "--config", cfg, "--channel", "http:lobby",
		"--speaker-id", "alice", "--speaker-name", "Alice", "--principal", "p_alice", "--text", "Hello")
	if code != exitOK || stdout != `{"ok":true,"text":"Fresh worker."}`+"\n" {
		t.Fatalf("turn = %d %q; want 0 and the reply\nstderr: %s", code, stdout, stderr)
	}
	want := "rtsandbox turn: worker image " + tag + " held another worker (sha256 000000000000), not this binary's"
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "rebuilt it from") {
		t.Errorf("turn stderr = %q; want it to say %q and that it rebuilt", stderr, want)
	}
	assertImageCurrent(t, d, tag)
}

func assertImageCurrent(t *testing.T, d *docker.Driver, tag string) {
	t.Helper()
	worker, _, err := workerimage.WorkerBinary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := workerimage.Compare(context.Background(), labelReader{opsDocker(t)}, tag, worker); err != nil || c.State != workerimage.Current {
		t.Errorf("Compare(%s) = %v, %v; want current", tag, c.State, err)
	}
}

// labelReader reads image labels for workerimage.Compare.
type labelReader struct{ cli *client.Client }

func (l labelReader) ImageLabels(ctx context.Context, ref string) (map[string]string, bool, error) {
	res, err := l.cli.ImageInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil || res.Config == nil {
		return nil, err == nil, err
	}
	return res.Config.Labels, true, nil
}

// foreignImage builds a tiny image under a fresh tag that carries no
// label of rtsandbox's (an image of the operator's that sandbox.image
// names by mistake), removed when the test ends (testImage). It returns
// the tag and the image's ID.
func foreignImage(t *testing.T) (tag, id string) {
	t.Helper()
	tag, id, _ = testImage(t, "foreign", "maintainer=someone-else")
	return tag, id
}

// TestForeignImageNeverReplaced (issue 21): a sandbox.image (or demo's
// --image) that names an image rtsandbox did not build never gets it
// replaced: serve refuses to start, doctor fails the check for good, and
// turn, chat, demo and image build --config refuse with an error naming
// the key and the rule; the image's ID is the same after each. Only
// image build --tag, which names the tag on purpose, replaces it, and
// says so.
func TestForeignImageNeverReplaced(t *testing.T) {
	tag, id := foreignImage(t)
	cfg, _ := doctorConfig(t, tag, "")
	rule := "is not an image rtsandbox built (no " + workerimage.LabelWorkerSHA256 + " label)"
	refusal := "sandbox.image: the image under the tag is not one rtsandbox built: " + tag + " carries no " + workerimage.LabelWorkerSHA256 + " label"
	tests := []struct {
		name  string
		args  []string
		wants []string // in stdout and stderr
	}{
		{"serve", []string{"serve", "--config", cfg}, []string{"refusing to start", "fail  worker image", "sandbox.image: " + tag + " " + rule,
			"fix: name a tag of the worker's own in sandbox.image, or replace the image on purpose with `rtsandbox image build --tag " + tag + "`"}},
		{"doctor", []string{"doctor", "--config", cfg}, []string{"fail  worker image", "sandbox.image: " + tag + " " + rule}},
		// turn and chat run serve's start checks: the same refusal.
		{"turn", []string{"turn", "--config", cfg, "--channel", "http:lobby", "--speaker-id", "alice", "--speaker-name", "Alice",
			"--principal", "p_alice", "--text", "Hello"}, []string{"refusing to start", "fail  worker image", "sandbox.image: " + tag + " " + rule, "rtsandbox image build --tag " + tag}},
		{"chat", []string{"chat", "--config", cfg}, []string{"refusing to start", "fail  worker image", "sandbox.image: " + tag + " " + rule}},
		{"demo", []string{"demo", "--image", tag}, []string{"--image: the image under the tag is not one rtsandbox built: " + tag}},
		{"image-build-from-config", []string{"image", "build", "--config", cfg}, []string{refusal}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Bounded: without the refusal, serve would start and run on.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, errOut bytes.Buffer
			code := run(ctx, tt.args, mapEnv(goodEnv()), strings.NewReader(""), &out, &errOut)
			all := out.String() + errOut.String()
			if code == exitOK {
				t.Errorf("%q = 0; want a refusal\n%s", tt.args, all)
			}
			for _, want := range tt.wants {
				if !strings.Contains(all, want) {
					t.Errorf("%q output lacks %q:\n%s", tt.args, want, all)
				}
			}
			assertImageID(t, tag, id)
		})
	}

	code, stdout, stderr := runOps(t, "image", "build", "--tag", tag)
	if code != exitOK || !strings.Contains(stdout, "replaced: "+tag+" held an image rtsandbox had not built") {
		t.Fatalf("image build --tag %s = %d %q; want 0 and the replacement said\n%s", tag, code, stdout, stderr)
	}
	assertImageCurrent(t, docker.New(opsDocker(t)), tag)
}

// assertImageID requires the image under tag to be id.
func assertImageID(t *testing.T, tag, id string) {
	t.Helper()
	res, err := opsDocker(t).ImageInspect(context.Background(), tag)
	if err != nil || res.ID != id {
		t.Errorf("image under %s = %s (%v); want %s, untouched", tag, res.ID, err, id)
	}
}

// TestTakenPortRefusedByName: doctor checks that the listen ports are
// free (it used to say "no check failed" while one was taken), and serve
// refuses such a start by the check's name before anything runs, without
// logging that running turns were cancelled (none ran).
func TestTakenPortRefusedByName(t *testing.T) {
	current, _ := sealedImage(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	cfg, _ := doctorConfig(t, current, "metrics: {listen: "+strconv.Quote(addr)+"}\n")
	code, out, errOut := runDoctorCmd(t, mapEnv(goodEnv()), "--config", cfg)
	if code != exitFail {
		t.Errorf("doctor = %d; want 1\n%s%s", code, out, errOut)
	}
	if diff := cmp.Diff([]string{"metrics.listen"}, failing(verdicts(out))); diff != "" {
		t.Errorf("failed checks (-want +got):\n%s\n%s", diff, out)
	}
	for _, want := range []string{addr + " is in use by another process", "ok    http.listen", "fix: stop what listens there"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	var sout, serr bytes.Buffer
	code = run(context.Background(), []string{"serve", "--config", cfg}, mapEnv(goodEnv()), strings.NewReader(""), &sout, &serr)
	if code != exitFail {
		t.Fatalf("serve = %d; want 1\n%s%s", code, sout.String(), serr.String())
	}
	if !strings.Contains(serr.String(), "fail  metrics.listen") {
		t.Errorf("serve stderr lacks the failed port check:\n%s", serr.String())
	}
	if logs := sout.String() + serr.String(); strings.Contains(logs, "did not finish in time") {
		t.Errorf("a refused start logged a drain:\n%s", logs)
	}
}
