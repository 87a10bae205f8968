package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/upstream"
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
http: {listen: "127.0.0.1:18999", token_env: %s, owner_token_env: %s}
access: {owners: ["http:boss"], members: everyone}
`, state, docModelKey, image, userField(), docToken, docOwnerToken) + extra
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
// names no real worker, and removes it when the test ends, together with
// what a rebuild put under the tag. A label unique to the test keeps the
// image's id its own, so removing it by id touches no other test.
func staleImage(t *testing.T) (tag string, d *docker.Driver) {
	t.Helper()
	cli := opsDocker(t)
	d = docker.New(cli)
	nonce := opsRandom()
	tag = "rtsandbox-test-stale:" + nonce
	dockerfile := fmt.Sprintf("FROM scratch\nLABEL %s=%q rtsandbox.test=%q\n", workerimage.LabelWorkerSHA256, strings.Repeat("0", 64), nonce)
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
	return tag, d
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
		{name: "stale-image", image: stale, wantFail: []string{"worker image"},
			wantText: []string{"holds another worker (sha256 000000000000)", "fix: rtsandbox image build"}},
		{name: "group-readable-state-dir", image: current,
			setup: func(t *testing.T, state string) {
				if err := os.Chmod(state, 0o750); err != nil {
					t.Fatal(err)
				}
			},
			wantFail: []string{"state_dir"}, wantText: []string{"mode 0750", "fix: chmod 700 "}},
		{name: "unset-variable", image: current, env: func(e map[string]string) { delete(e, docModelKey) },
			wantFail: []string{"model.api_key_env"}, wantText: []string{docModelKey + " is not set", "fix: set " + docModelKey}},
		{name: "equal-tokens", image: current, env: func(e map[string]string) { e[docOwnerToken] = e[docToken] },
			wantFail: []string{"http tokens"}, wantText: []string{"hold the same token", "fix: give " + docOwnerToken + " its own random value"}},
		{name: "missing-discord-token", image: current, extra: "discord: {token_env: " + docDiscord + "}\n",
			wantFail: []string{"discord.token_env"}, wantText: []string{docDiscord + " is not set", "Discord developer portal"}},
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
				if strings.Contains(out, secret) {
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

// brief is what the table tests compare of a check.
type brief struct {
	Status, Name string
	HasFix       bool
}

func briefOf(c check) brief {
	return brief{Status: c.status.String(), Name: c.name, HasFix: c.fix != ""}
}

func TestStateDirCheck(t *testing.T) {
	euid := os.Geteuid()
	mk := func(t *testing.T, mode os.FileMode) string {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	tests := []struct {
		name string
		dir  func(t *testing.T) string
		want brief
		text string
	}{
		{"private", func(t *testing.T) string { return mk(t, 0o700) }, brief{"ok", "state_dir", false}, "is private"},
		{"group-readable", func(t *testing.T) string { return mk(t, 0o750) }, brief{"fail", "state_dir", true}, "mode 0750"},
		{"world-writable", func(t *testing.T) string { return mk(t, 0o777) }, brief{"fail", "state_dir", true}, "mode 0777"},
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "later") }, brief{"warn", "state_dir", true}, "does not exist yet"},
		{"symlink", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(mk(t, 0o700), link); err != nil {
				t.Fatal(err)
			}
			return link
		}, brief{"fail", "state_dir", true}, "symbolic link"},
		{"file", func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}, brief{"fail", "state_dir", true}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := stateDirCheck(tt.dir(t), euid)
			if diff := cmp.Diff(tt.want, briefOf(c)); diff != "" || !strings.Contains(c.msg, tt.text) {
				t.Errorf("stateDirCheck mismatch (-want +got):\n%s\nmsg %q; want it to contain %q", diff, c.msg, tt.text)
			}
		})
	}
	// Another owner: the fix names chown, not only chmod.
	if c := stateDirCheck(mk(t, 0o700), euid+1); c.status != statusFail || !strings.Contains(c.fix, "chown") {
		t.Errorf("stateDirCheck(other owner) = %v %q; want fail with a chown fix", c.status, c.fix)
	}
}

func TestCredentialChecks(t *testing.T) {
	cfg := &config.Config{
		Model:   config.Model{APIKeyEnv: "M"},
		Tools:   []config.Tool{{Name: "weather", APIKeyEnv: "W"}, {Name: "clock", Builtin: config.BuiltinClock}},
		MCP:     []config.MCPServer{{Name: "docs", APIKeyEnv: "D"}, {Name: "open"}},
		HTTP:    &config.HTTP{TokenEnv: "G", OwnerTokenEnv: "O"},
		Discord: &config.Discord{TokenEnv: "B"},
		Web:     config.Web{Search: &config.WebSearch{APIKeyEnv: "S"}},
	}
	got := credentialChecks(cfg, mapEnv(map[string]string{"M": "m", "D": "d", "G": "g", "S": "s"}))
	var briefs []brief
	var msgs []string
	for _, c := range got {
		briefs = append(briefs, briefOf(c))
		msgs = append(msgs, c.msg)
	}
	want := []brief{
		{"ok", "model.api_key_env", false},
		{"fail", "tools.weather.api_key_env", true},
		{"ok", "mcp.docs.api_key_env", false},
		{"ok", "http.token_env", false},
		{"fail", "http.owner_token_env", true},
		{"fail", "discord.token_env", true},
		{"ok", "web.search.api_key_env", false},
	}
	if diff := cmp.Diff(want, briefs); diff != "" {
		t.Errorf("credentialChecks mismatch (-want +got):\n%s", diff)
	}
	wantMsgs := []string{"M is set", "W is not set", "D is set", "G is set", "O is not set", "B is not set", "S is set"}
	if diff := cmp.Diff(wantMsgs, msgs); diff != "" {
		t.Errorf("credentialChecks messages mismatch (-want +got):\n%s", diff)
	}
}

func TestTokenCheck(t *testing.T) {
	withOwner := &config.Config{HTTP: &config.HTTP{TokenEnv: "G", OwnerTokenEnv: "O"}}
	tests := []struct {
		name   string
		cfg    *config.Config
		vars   map[string]string
		want   brief
		wantOK bool
	}{
		{"different", withOwner, map[string]string{"G": "a", "O": "b"}, brief{"ok", "http tokens", false}, true},
		{"equal", withOwner, map[string]string{"G": "same", "O": "same"}, brief{"fail", "http tokens", true}, true},
		{"owner-unset", withOwner, map[string]string{"G": "a"}, brief{}, false},
		{"no-owner-token", &config.Config{HTTP: &config.HTTP{TokenEnv: "G"}}, map[string]string{"G": "a"}, brief{}, false},
		{"no-http", &config.Config{}, nil, brief{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := tokenCheck(tt.cfg, mapEnv(tt.vars))
			var got brief
			if ok {
				got = briefOf(c)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || ok != tt.wantOK {
				t.Errorf("tokenCheck = %v, %v; want %v (-want +got):\n%s", got, ok, tt.wantOK, diff)
			}
		})
	}
}

func TestUserCheck(t *testing.T) {
	own := fmt.Sprintf("%d:%d", 1000, os.Getegid())
	user := func(u string) *config.Config {
		c := &config.Config{}
		if u != "" {
			c.Sandbox.User = u
			fmt.Sscanf(u, "%d:%d", &c.Sandbox.UID, &c.Sandbox.GID)
		}
		return c
	}
	tests := []struct {
		name string
		cfg  *config.Config
		euid int
		want string
	}{
		{"root-with-user", user("65534:65534"), 0, "ok"},
		{"root-without-user", user(""), 0, "fail"},
		{"user-default", user(""), 1000, "ok"},
		{"user-own-ids", user(own), 1000, "ok"},
		{"user-other-ids", user("65534:65534"), 1000, "fail"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c := userCheck(tt.cfg, tt.euid); c.status.String() != tt.want || (c.status != statusOK && c.fix == "") {
				t.Errorf("userCheck(%q, euid %d) = %v %q (fix %q); want %s with a fix", tt.cfg.Sandbox.User, tt.euid, c.status, c.msg, c.fix, tt.want)
			}
		})
	}
}

// TestDoctorOnline probes real loopback endpoints: each answer, and no
// answer, gives its verdict; the key goes only where it was configured.
func TestDoctorOnline(t *testing.T) {
	anyKey := fakemodel.NewWithOptions(fakemodel.Options{Loop: true}, fakemodel.MemoryDemo())
	defer anyKey.Close()
	keyed := fakemodel.NewWithOptions(fakemodel.Options{Key: "right", Loop: true}, fakemodel.MemoryDemo())
	defer keyed.Close()
	pathOnly := fakemodel.NewWithOptions(fakemodel.Options{Path: "/v1/chat/completions", Loop: true}, fakemodel.MemoryDemo())
	defer pathOnly.Close()
	redirect := httptest.NewServer(http.RedirectHandler("http://127.0.0.1:9/elsewhere", http.StatusFound))
	defer redirect.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	defer failing.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close()

	cfg := &config.Config{
		Model: config.Model{URL: ep(anyKey.ChatURL()), APIKeyEnv: "K"},
		MCP: []config.MCPServer{
			{Name: "wrong-key", URL: ep(keyed.ChatURL()), APIKeyEnv: "K"},
			{Name: "wrong-path", URL: ep(pathOnly.URL() + "/mcp")},
			{Name: "redirects", URL: ep(redirect.URL)},
			{Name: "failing", URL: ep(failing.URL)},
			{Name: "closed", URL: ep(closed)},
		},
	}
	var got []brief
	for _, c := range onlineChecks(context.Background(), cfg, mapEnv(map[string]string{"K": "wrong"})) {
		got = append(got, briefOf(c))
	}
	want := []brief{
		{"ok", "model online", false},
		{"fail", "mcp wrong-key online", true},
		{"fail", "mcp wrong-path online", true},
		{"fail", "mcp redirects online", true},
		{"warn", "mcp failing online", true},
		{"fail", "mcp closed online", true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("onlineChecks mismatch (-want +got):\n%s", diff)
	}
	reqs := anyKey.Requests()
	if len(reqs) != 1 || string(reqs[0].Raw) != probeBody || reqs[0].Header.Get("Authorization") != "Bearer wrong" {
		t.Errorf("model saw %d requests; want one probe with the configured key", len(reqs))
	}
	if n := len(pathOnly.Requests()); n != 1 {
		t.Errorf("unkeyed MCP server saw %d requests; want 1", n)
	} else if h := pathOnly.Requests()[0].Header.Get("Authorization"); h != "" {
		t.Errorf("unkeyed MCP server got Authorization %q; want none", h)
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
	for _, want := range []string{"refusing to start: 1 start check(s) failed", "fail  http.token_env", docToken + " is not set", "fix: set " + docToken} {
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
	if err := startChecks(context.Background(), cfg, mapEnv(goodEnv()), slog.New(slog.NewJSONHandler(logs, nil))); err != nil {
		t.Fatalf("startChecks = %v; want nil\n%s", err, logs.String())
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
	e := &engine{Driver: d, cli: opsDocker(t)}
	if c, err := workerimage.Compare(context.Background(), e, tag, worker); err != nil || c.State != workerimage.Current {
		t.Errorf("Compare(%s) = %v, %v; want current", tag, c.State, err)
	}
}

// ep is a checked endpoint; the test upstreams run on loopback http.
func ep(raw string) upstream.Endpoint { return upstream.MustParseEndpoint(raw, true) }
