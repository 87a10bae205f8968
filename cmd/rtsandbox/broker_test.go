package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/hostbin"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/wire"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
)

const cmdTestKey = "cmd-test-model-key"

// modelStandIn is a loopback chat-completions endpoint that checks the
// credential and answers one assistant message.
func modelStandIn(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+cmdTestKey {
			w.WriteHeader(401)
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeConfig(t *testing.T, dir, modelURL string) string {
	t.Helper()
	path := filepath.Join(dir, "rtsandbox.yaml")
	cfg := fmt.Sprintf(`state_dir: %s/state
allow_http: true
model:
  url: %s/v1/chat/completions
  name: test-model
  api_key_env: RTS_TEST_MODEL_KEY
tools:
  - name: clock
    builtin: clock
`, dir, modelURL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rtc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
		DisableCompression: true,
	}}
}

func brokerPost(t *testing.T, c *http.Client, route, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://broker"+route, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", route, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBrokerCommandServesUntilCanceled(t *testing.T) {
	dir := shortTempDir(t)
	cfg := writeConfig(t, dir, modelStandIn(t).URL)
	sock := filepath.Join(dir, "broker.sock")
	getenv := func(k string) string {
		if k == "RTS_TEST_MODEL_KEY" {
			return cmdTestKey
		}
		return ""
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"broker", "--config", cfg, "--socket", sock, "--channel", "http:lobby",
			"--speaker-id", "alice", "--speaker-name", "Alice", "--principal", "p_alice", "--max-calls", "3"},
			getenv, strings.NewReader(""), &stdout, &stderr)
	}()
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "listening") })
	c := unixClient(sock)
	defer c.CloseIdleConnections()
	if code, body := brokerPost(t, c, wire.RouteModel, `{"messages":[{"role":"user","content":"hi"}]}`); code != 200 || !strings.Contains(body, `"hi"`) {
		t.Errorf("/model = %d %s; want 200 with the answer", code, body)
	}
	if code, body := brokerPost(t, c, wire.ToolRoute("clock"), `{"time_zone":"Asia/Taipei"}`); code != 200 || !strings.Contains(body, "Asia/Taipei") {
		t.Errorf("/tools/clock = %d %s; want 200 naming the zone", code, body)
	}
	brokerPost(t, c, wire.RouteModel, `{"messages":[]}`)
	if code, _ := brokerPost(t, c, wire.RouteModel, `{"messages":[]}`); code != 429 {
		t.Errorf("4th call with --max-calls 3 = %d; want 429", code)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("exit code = %d; want 0 (stderr %s)", code, stderr.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	audit := stderr.String()
	if strings.Contains(audit, cmdTestKey) {
		t.Errorf("stderr holds the model key:\n%s", audit)
	}
	lines := strings.Split(strings.TrimSpace(audit), "\n")
	if len(lines) != 4 {
		t.Fatalf("audit records = %d; want 4:\n%s", len(lines), audit)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("audit line is not JSON: %v", err)
	}
	for _, k := range []string{"channel", "principal", "route", "status", "duration", "bytes_in", "bytes_out"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("audit record lacks %q: %v", k, rec)
		}
	}
	if rec["channel"] != "http:lobby" || rec["principal"] != "p_alice" || rec["route"] != wire.RouteModel {
		t.Errorf("audit record = %v; want channel http:lobby, principal p_alice, route /model", rec)
	}
}

func TestBrokerCommandUsageErrors(t *testing.T) {
	dir := shortTempDir(t)
	cfg := writeConfig(t, dir, "http://127.0.0.1:1")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("state_dir: /x\nmodel: {url: https://m.example, name: m, api_key_env: K}\nbogus: 1\n"), 0o600)
	base := []string{"--socket", filepath.Join(dir, "s.sock"), "--channel", "http:lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing-config", base, "required"},
		{"max-calls-0", append([]string{"--config", cfg, "--max-calls", "0"}, base...), "--max-calls"},
		{"max-calls-1001", append([]string{"--config", cfg, "--max-calls", "1001"}, base...), "--max-calls"},
		{"bad-channel", []string{"--config", cfg, "--socket", "s", "--channel", "Lobby", "--speaker-id", "a", "--speaker-name", "A", "--principal", "p"}, "--channel"},
		{"no-principal", []string{"--config", cfg, "--socket", "s", "--channel", "http:x", "--speaker-id", "a", "--speaker-name", "A"}, "principal"},
		{"unknown-key", append([]string{"--config", bad}, base...), "bogus: unknown key"},
		{"missing-file", append([]string{"--config", filepath.Join(dir, "nope.yaml")}, base...), "nope.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), append([]string{"broker"}, tt.args...), func(string) string { return "" }, nil, &stdout, &stderr)
			if code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("rtsandbox broker %v = %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
			}
		})
	}
}

// The real binary exits 0 on SIGTERM and SIGINT and removes its socket.
func TestBrokerCommandExitsZeroOnSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := shortTempDir(t)
	bin := filepath.Join(dir, "rtsandbox")
	if err := hostbin.GoBuild(t.Context(), ".", nil, "-o", bin, "."); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, modelStandIn(t).URL)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			sock := filepath.Join(dir, "b.sock")
			cmd := exec.Command(bin, "broker", "--config", cfg, "--socket", sock, "--channel", "http:lobby",
				"--speaker-id", "alice", "--speaker-name", "Alice", "--principal", "p_alice")
			cmd.Env = []string{"RTS_TEST_MODEL_KEY=" + cmdTestKey}
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || !strings.Contains(line, "listening on "+sock) {
				t.Fatalf("first line = %q, %v; want the listening line", line, err)
			}
			cmd.Process.Signal(sig)
			if err := cmd.Wait(); err != nil {
				t.Errorf("exit after %v = %v; want 0", sig, err)
			}
			if _, err := os.Stat(sock); !os.IsNotExist(err) {
				t.Errorf("socket left behind: %v", err)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The README's example config is valid.
func TestExampleConfigParses(t *testing.T) {
	cfg, err := config.Load("../../examples/rtsandbox.yaml")
	if err != nil {
		t.Fatalf("examples/rtsandbox.yaml: %v", err)
	}
	bc, err := host.BrokerConfig(t.Context(), cfg, func(string) string { return "" }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := broker.New(bc); err != nil {
		t.Errorf("broker from the example config: %v", err)
	}
}
