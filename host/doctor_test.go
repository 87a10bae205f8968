package host

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/fakemcp"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// mapEnv is an environment made of vars.
func mapEnv(vars map[string]string) env {
	return func(k string) string { return vars[k] }
}

// brief is what the table tests compare of a check.
type brief struct {
	Status, Name string
	HasFix       bool
}

func briefOf(c Check) brief {
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
	env := mapEnv(map[string]string{"M": "m", "D": "d", "G": "g", "S": "s"})
	got := credentialChecks(cfg, env, true)
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
	wantMsgs := []string{"M is set", "W is unset or empty", "D is set", "G is set", "O is unset or empty", "B is unset or empty", "S is set"}
	if diff := cmp.Diff(wantMsgs, msgs); diff != "" {
		t.Errorf("credentialChecks messages mismatch (-want +got):\n%s", diff)
	}
	// turn and chat check the credentials a turn reads, not the surfaces'.
	var turnKeys []string
	for _, c := range credentialChecks(cfg, env, false) {
		turnKeys = append(turnKeys, c.name)
	}
	wantTurn := []string{"model.api_key_env", "tools.weather.api_key_env", "mcp.docs.api_key_env", "web.search.api_key_env"}
	if diff := cmp.Diff(wantTurn, turnKeys); diff != "" {
		t.Errorf("credentialChecks without surfaces (-want +got):\n%s", diff)
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

func TestPoolCheck(t *testing.T) {
	size := func(n int) *config.Config {
		c := &config.Config{Sandbox: config.Sandbox{MaxTurns: 8, Limits: config.Limits{MemoryMB: 64}}}
		if n >= 0 {
			c.Sandbox.PoolSize = &n
		}
		return c
	}
	for _, tt := range []struct {
		name string
		cfg  *config.Config
		want string
	}{
		{"off", size(0), "off (sandbox.pool.size 0)"},
		{"set", size(3), "3 sealed worker(s) started ahead (sandbox.pool.size)"},
		{"derived", size(-1), "2 sealed worker(s) started ahead (derived"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if c := poolCheck(tt.cfg); c.status != statusOK || !strings.HasPrefix(c.msg, tt.want) {
				t.Errorf("poolCheck = %v %q; want ok %q…", c.status, c.msg, tt.want)
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
	}

	// With api anthropic the probe goes to the Messages path, keyed with
	// x-api-key as the broker sends it.
	messages := fakemodel.NewWithOptions(fakemodel.Options{Path: "/v1/messages", Loop: true}, fakemodel.MemoryDemo())
	defer messages.Close()
	acfg := &config.Config{Model: config.Model{URL: ep(messages.URL()), APIKeyEnv: "K", API: rtsandbox.ModelAPIAnthropic}}
	checks := onlineChecks(context.Background(), acfg, mapEnv(map[string]string{"K": "k1"}))
	if len(checks) != 1 || briefOf(checks[0]) != (brief{"ok", "model online", false}) {
		t.Errorf("anthropic probe = %+v; want model online ok", checks)
	}
	if r := messages.Requests(); len(r) != 1 || r[0].Path != "/v1/messages" || r[0].Header.Get("X-Api-Key") != "k1" || r[0].Header.Get("Authorization") != "" {
		t.Errorf("anthropic probe requests = %+v; want one to /v1/messages with x-api-key", r)
	}
	if n := len(pathOnly.Requests()); n != 1 {
		t.Errorf("unkeyed MCP server saw %d requests; want 1", n)
	} else if h := pathOnly.Requests()[0].Header.Get("Authorization"); h != "" {
		t.Errorf("unkeyed MCP server got Authorization %q; want none", h)
	}
}

// ep is a checked endpoint; the test upstreams run on loopback http.
func ep(raw string) upstream.Endpoint { return upstream.MustParseEndpoint(raw, true) }

// doctor --online speaks MCP to an MCP server: initialize with the
// configured key, tools/list, and the session closed; no tool is called.
// A configured tool the server does not list fails the check, naming it;
// an endpoint that answers but not as an MCP server fails too.
func TestDoctorOnlineMCPSession(t *testing.T) {
	srv := fakemcp.New(fakemcp.Tool{Name: "get-sum"}, fakemcp.Tool{Name: "echo"})
	defer srv.Close()
	notMCP := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer notMCP.Close()
	badRequest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(400) }))
	defer badRequest.Close()
	tools := func(names ...string) []rtsandbox.ToolSpec {
		var out []rtsandbox.ToolSpec
		for _, n := range names {
			out = append(out, rtsandbox.ToolSpec{Name: n})
		}
		return out
	}
	cfg := &config.Config{
		Model: config.Model{URL: ep(notMCP.URL)},
		MCP: []config.MCPServer{
			{Name: "all-there", URL: ep(srv.URL), APIKeyEnv: "K", Tools: tools("get-sum", "echo")},
			{Name: "one-missing", URL: ep(srv.URL), APIKeyEnv: "K", Tools: tools("echo", "Get-Sum")},
			{Name: "not-mcp", URL: ep(notMCP.URL)},
			{Name: "bad-request", URL: ep(badRequest.URL)},
		},
	}
	checks := onlineChecks(context.Background(), cfg, mapEnv(map[string]string{"K": "k1"}))
	var got []brief
	for _, c := range checks {
		got = append(got, briefOf(c))
	}
	want := []brief{
		{"ok", "model online", false},
		{"ok", "mcp all-there online", false},
		{"fail", "mcp one-missing online", true},
		{"fail", "mcp not-mcp online", true},
		{"fail", "mcp bad-request online", true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("onlineChecks mismatch (-want +got):\n%s", diff)
	}
	if !strings.Contains(checks[2].msg, `"Get-Sum"`) {
		t.Errorf("missing-tool check %q does not name the tool", checks[2].msg)
	}
	var methods []string
	for _, r := range srv.Requests() {
		if r.Authorization != "Bearer k1" {
			t.Errorf("MCP request %q carried %q; want the configured key", r.Method, r.Authorization)
		}
		methods = append(methods, r.Method)
	}
	if want := []string{"initialize", "notifications/initialized", "tools/list", ""}; !cmp.Equal(methods[:4], want) || srv.ToolCalls() != 0 {
		t.Errorf("MCP requests %q; want %q twice (the empty one the closing DELETE) and no tools/call", methods, want)
	}
}
