package host

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// An MCP server no one here wrote: the reference "everything" server from
// the npm registry, pinned, started with node on loopback.
const (
	everythingPackage = "@modelcontextprotocol/server-everything"
	everythingVersion = "2026.8.31"
)

// loopbackPreload makes the server listen on 127.0.0.1 (it would take every
// interface) and report the port the kernel chose for PORT=0.
const loopbackPreload = `const net = require('node:net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || typeof args[0] === 'string') {
    const rest = args.slice(1).filter((a) => typeof a === 'function');
    this.once('listening', () => process.stderr.write('RTSANDBOX_PORT=' + this.address().port + '\n'));
    return listen.call(this, Number(args[0]), '127.0.0.1', ...rest);
  }
  return listen.apply(this, args);
};
`

// needTool returns the path of a command this test needs. Without it the
// test fails in CI (CI set) and is skipped elsewhere.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required in CI (.ci/run installs Debian's nodejs and npm): %v", name, err)
	}
	t.Skipf("%s not installed", name)
	return ""
}

// everythingIndex installs the pinned server once into the user cache
// directory and returns its entry point.
func everythingIndex(t *testing.T) string {
	t.Helper()
	npm := needTool(t, "npm")
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "rtsandbox-test", "server-everything-"+everythingVersion)
	index := filepath.Join(dir, "node_modules", everythingPackage, "dist", "index.js")
	if _, err := os.Stat(index); err == nil {
		return index
	}
	// Installed beside its place and renamed into it, so two copies of
	// the suite on one machine never see a half-installed server: the
	// second rename fails and that copy uses the first one's.
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefix", tmp, everythingPackage+"@"+everythingVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s@%s: %v\n%s", everythingPackage, everythingVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(index); serr != nil {
			t.Fatalf("install the server at %s: %v", dir, err)
		}
	}
	return index
}

// startEverything runs the server on loopback until the test ends and
// returns its MCP endpoint.
func startEverything(t *testing.T) upstream.Endpoint {
	t.Helper()
	node := needTool(t, "node")
	index := everythingIndex(t)
	preload := filepath.Join(t.TempDir(), "loopback.cjs")
	if err := os.WriteFile(preload, []byte(loopbackPreload), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "--require", preload, index, "streamableHttp")
	// No credential of this process reaches the server (it has a tool
	// that prints its environment).
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "PORT=0"}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	port := make(chan string, 1)
	var drained sync.WaitGroup
	drained.Go(func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "RTSANDBOX_PORT="); ok {
				port <- p
			}
		}
	})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		drained.Wait()
		_ = cmd.Wait()
	})
	select {
	case p := <-port:
		return upstream.MustParseEndpoint("http://127.0.0.1:"+p+"/mcp", true)
	case <-time.After(30 * time.Second):
		t.Fatal("the everything server did not start listening")
	}
	return upstream.Endpoint{}
}

// sessionRecorder records the Mcp-Session-Id headers the server hands out.
type sessionRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	ids  []string
}

func (r *sessionRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err == nil && resp.Header.Get("Mcp-Session-Id") != "" {
		r.mu.Lock()
		r.ids = append(r.ids, resp.Header.Get("Mcp-Session-Id"))
		r.mu.Unlock()
	}
	return resp, err
}

func (r *sessionRecorder) sessions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// The reference server, reached only through the broker: the startup
// listing completes the tools named "echo" and "get-sum" (a real tool name
// with a dash, dropping their draft-07 $schema), the tools answer, while
// an unlisted tool, a resource read and a prompt get are refused, and no
// session id it hands out reaches the guest.
func TestMCPThirdPartyServer(t *testing.T) {
	const key = "real-everything-key"
	url := startEverything(t)
	rec := &sessionRecorder{base: upstream.NewTransport()}
	cfg := mcpConfig(url, rtsandbox.ToolSpec{Name: "echo"}, rtsandbox.ToolSpec{Name: "get-sum"})
	bc, err := BrokerConfig(t.Context(), cfg, mapEnv(map[string]string{"DOCS_KEY": key, "MODEL_KEY": "model-key"}), upstream.New(rec), nil)
	if err != nil {
		t.Fatalf("BrokerConfig: %v", err)
	}
	b, err := broker.New(bc)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	turnCtx, endTurn := context.WithCancel(t.Context())
	defer endTurn()
	turn := b.Turn(turnCtx, rtsandbox.Binding{Channel: "fake:guests", Speaker: rtsandbox.Speaker{ID: "g", Name: "Guest"}})
	var bodies strings.Builder
	post := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, wire.MCPRoute("docs"), strings.NewReader(body))
		r.Host = wire.BrokerHost
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+wire.DummyKey)
		w := httptest.NewRecorder()
		turn.ServeHTTP(w, r)
		bodies.Write(w.Body.Bytes())
		for k, v := range w.Header() {
			bodies.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
		return w
	}

	w := post(`{"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello from the guest"}}}`)
	if w.Code != 200 || !strings.Contains(w.Body.String(), "hello from the guest") {
		t.Errorf("echo = %d %s; want 200 with the echoed text", w.Code, w.Body)
	}
	var answer struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      int             `json:"id"`
		Result  json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || answer.JSONRPC != "2.0" || answer.ID != 1 || answer.Result == nil {
		t.Errorf("echo answer %s is not the JSON-RPC result for id 1", w.Body)
	}
	if w := post(`{"method":"tools/call","params":{"name":"get-sum","arguments":{"a":2,"b":40}}}`); w.Code != 200 || !strings.Contains(w.Body.String(), "42") {
		t.Errorf("get-sum = %d %s; want 200 with the sum", w.Code, w.Body)
	}
	for name, body := range map[string]string{
		"unlisted-tool": `{"method":"tools/call","params":{"name":"get-env","arguments":{}}}`,
		"resource-read": `{"method":"resources/read","params":{"uri":"demo://resource/static/document/architecture.md"}}`,
		"prompt-get":    `{"method":"prompts/get","params":{"name":"simple-prompt"}}`,
	} {
		if w := post(body); w.Code != 403 || w.Body.String() != "MCP method or tool refused" {
			t.Errorf("%s = %d %q; want 403 MCP method or tool refused", name, w.Code, w.Body)
		}
	}
	ids := rec.sessions()
	if len(ids) < 2 {
		t.Fatalf("session ids seen = %q; want the listing's and the turn's", ids)
	}
	for _, id := range ids {
		if strings.Contains(bodies.String(), id) {
			t.Errorf("session id %q reached the guest", id)
		}
	}
	if strings.Contains(bodies.String(), key) {
		t.Error("the MCP key reached the guest")
	}
}
