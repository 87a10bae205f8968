package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The fixture of the session broker's tests, after the reference's: every request carries the guest
// headers authorization: Bearer guest-token and cookie: guest=1; the bound
// turn defaults to xhigh, channel discord:channel, speaker guest/Guest. One
// loopback TLS stand-in serves the model (the Anthropic base URL) and the
// MCP server "research" (at /mcp), since the broker has one upstream
// client. Adaptation: our MCP servers declare their tools (search) in
// the configuration, where the reference lists tool names.
const sessChannel rtsandbox.ChannelKey = "discord:channel"

const (
	hostModel  = "host-model"
	hostSecret = "host-secret"
	mcpSecret  = "mcp-secret"
	sessTurnID = "m1"
)

var sessGuest = rtsandbox.Speaker{ID: "guest", Name: "Guest"}

// sessFixture is a listening Session with its stand-in, clock and logs.
type sessFixture struct {
	t      testing.TB
	up     *fakeUpstream
	sess   *broker.Session
	path   string
	logs   *syncbuf.Buffer
	clock  *fakeClock
	client *http.Client

	mu        sync.Mutex
	scopes    []rtsandbox.Binding
	toolCalls []toolCall
	// modelKey returns the model credential for a scope (default
	// host-secret); toolAnswer the recall tool's answer.
	modelKey   func(rtsandbox.Binding) rtsandbox.Secret
	toolAnswer wire.SessionToolResponse
}

type toolCall struct {
	Input   string
	Binding wire.SessionBinding
}

// fakeClock is the Session clock of the startup window.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// sessOptions adjust a fixture before construction.
type sessOptions struct {
	reply   http.HandlerFunc // the stand-in's answer (model and MCP)
	broker  func(*broker.Config)
	session func(*broker.SessionConfig)
}

func newSession(t testing.TB, o sessOptions) *sessFixture {
	t.Helper()
	f := &sessFixture{t: t, logs: &syncbuf.Buffer{}, clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}}
	f.modelKey = func(rtsandbox.Binding) rtsandbox.Secret { return hostSecret }
	if o.reply == nil {
		o.reply = standIn
	}
	f.up = newUpstream(t, o.reply)
	tools := []broker.Tool{
		{Spec: rtsandbox.ToolSpec{Name: "lookup", Parameters: json.RawMessage(`{"type":"object"}`)}, Impl: plainTool{f}},
		{Spec: rtsandbox.ToolSpec{Name: "recall", Parameters: json.RawMessage(`{"type":"object"}`)}, Impl: richTool{f}},
	}
	cfg := broker.Config{
		API:      rtsandbox.ModelAPIAnthropic,
		Stream:   true,
		ModelURL: ep(f.up.url("")),
		Model:    hostModel,
		APIKey: func(_ context.Context, b rtsandbox.Binding) (rtsandbox.Secret, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.scopes = append(f.scopes, b)
			return f.modelKey(b), nil
		},
		Tools: tools,
		MCP: []broker.MCPServer{{
			Name: "research", URL: ep(f.up.url("/mcp")),
			Tools: []rtsandbox.ToolSpec{{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)}},
			APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
				return mcpSecret, nil
			},
		}},
		Client: f.up.client(),
		Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if o.broker != nil {
		o.broker(&cfg)
	}
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	scfg := broker.SessionConfig{Broker: b, Channel: sessChannel, WorkerImage: "sandbox:old", Now: f.clock.Now,
		Worker: wire.SessionWorkerConfig{ModelAPI: rtsandbox.ModelAPIAnthropic, Model: hostModel, Stream: true}}
	if o.session != nil {
		o.session(&scfg)
	}
	f.sess, err = broker.NewSession(scfg)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	f.path = filepath.Join(shortDir(t), "broker.sock")
	if err := f.sess.Listen(f.path); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	f.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", f.path)
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
	}}
	t.Cleanup(func() {
		if err := f.sess.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		f.client.CloseIdleConnections()
		assertNoSessionSecrets(t, "log", f.logs.String())
	})
	return f
}

func assertNoSessionSecrets(t testing.TB, where, s string) {
	t.Helper()
	for _, k := range []string{hostSecret, mcpSecret} {
		if strings.Contains(s, k) {
			t.Errorf("%s contains the secret %q", where, k)
		}
	}
}

// plainTool is a sealed-style host tool: it records its call and answers
// its input back.
type plainTool struct{ f *sessFixture }

func (p plainTool) Run(_ context.Context, input json.RawMessage, b rtsandbox.Binding) (string, error) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.toolCalls = append(p.f.toolCalls, toolCall{Input: string(input), Binding: wire.SessionBinding{Binding: b}})
	return "looked up", nil
}

// richTool is a SessionHostTool answering the fixture's toolAnswer.
type richTool struct{ f *sessFixture }

func (r richTool) Run(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) {
	return "", io.EOF // never called in session mode
}

func (r richTool) RunSession(_ context.Context, input json.RawMessage, b wire.SessionBinding) (wire.SessionToolResponse, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	r.f.toolCalls = append(r.f.toolCalls, toolCall{Input: string(input), Binding: b})
	return r.f.toolAnswer, nil
}

// standIn answers the model with a Messages answer, count_tokens with
// {input_tokens:123} and MCP with a JSON-RPC result and a session id.
func standIn(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasSuffix(r.URL.Path, "/count_tokens"):
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"input_tokens":123}`)
	case strings.HasPrefix(r.URL.Path, "/mcp"):
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", "sess-1")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	default:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, messageAnswer)
	}
}

// bind binds the default turn at level (xhigh when "") and releases it at
// cleanup; cancel aborts the turn signal.
func (f *sessFixture) bind(level string) (release func(), cancel context.CancelFunc) {
	f.t.Helper()
	return f.bindAs(sessChannel, sessGuest, level)
}

func (f *sessFixture) bindAs(ch rtsandbox.ChannelKey, sp rtsandbox.Speaker, level string) (release func(), cancel context.CancelFunc) {
	f.t.Helper()
	if level == "" {
		level = "xhigh"
	}
	ctx, cancel := context.WithCancel(context.Background())
	release, err := f.sess.Bind(ctx, wire.SessionBinding{
		Binding: rtsandbox.Binding{Channel: ch, Speaker: sp}, Profile: "studio", Thinking: level,
		Deadline: time.Now().Add(time.Minute),
	})
	if err != nil {
		f.t.Fatalf("Bind: %v", err)
	}
	f.t.Cleanup(func() { release(); cancel() })
	return release, cancel
}

// resp is a read answer; Err is the body's read error (a cut stream).
type resp struct {
	Status int
	Header http.Header
	Body   string
	Err    error
}

// do sends one request over the socket with the guest headers plus extra.
func (f *sessFixture) do(method, target, body string, extra ...string) resp {
	f.t.Helper()
	var rd io.Reader
	if body != "" || method == http.MethodPost {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://broker"+target, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer guest-token")
	req.Header.Set("Cookie", "guest=1")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	res, err := f.client.Do(req)
	if err != nil {
		return resp{Err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	assertNoSessionSecrets(f.t, "response", string(data))
	return resp{Status: res.StatusCode, Header: res.Header, Body: string(data), Err: err}
}

func (f *sessFixture) post(target, body string, extra ...string) resp {
	f.t.Helper()
	return f.do(http.MethodPost, target, body, extra...)
}

func wantResp(t *testing.T, r resp, status int, body string) {
	t.Helper()
	if r.Err != nil || r.Status != status || (body != "" && r.Body != body) {
		t.Errorf("answer = %d %q (err %v); want %d %q", r.Status, r.Body, r.Err, status, body)
	}
}

// rpc is a JSON-RPC message body.
func rpcBody(method string, params string) string {
	if params == "" {
		return `{"jsonrpc":"2.0","id":1,"method":"` + method + `"}`
	}
	return `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":` + params + `}`
}

// upstreamCalls returns the stand-in's requests on prefix, decoded.
func (f *sessFixture) upstreamCalls(prefix string) []recorded {
	var out []recorded
	for _, r := range f.up.requests() {
		if strings.HasPrefix(r.Path, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// mcpMethods lists the methods the MCP stand-in saw.
func (f *sessFixture) mcpMethods() []string {
	var out []string
	for _, r := range f.upstreamCalls("/mcp") {
		var m struct{ Method string }
		json.Unmarshal(r.Body, &m)
		out = append(out, m.Method)
	}
	return out
}

// lastModelBody decodes the body of the last model call upstream.
func (f *sessFixture) lastModelBody() map[string]any {
	f.t.Helper()
	calls := f.upstreamCalls("/v1/messages")
	if len(calls) == 0 {
		f.t.Fatal("no model call upstream")
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(calls[len(calls)-1].Body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// failureLines counts the "sandbox upstream call failed" log lines.
func (f *sessFixture) failureLines() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(f.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "sandbox upstream call failed" {
			out = append(out, m)
		}
	}
	return out
}

// execute runs Execute in the background; the result arrives on the
// returned channel.
func (f *sessFixture) execute(ctx context.Context, turn wire.SessionTurn) <-chan execResult {
	ch := make(chan execResult, 1)
	go func() {
		r, err := f.sess.Execute(ctx, turn)
		ch <- execResult{r, err}
	}()
	return ch
}

type execResult struct {
	Result wire.SessionResult
	Err    error
}

func sessTurn(id string) wire.SessionTurn {
	return wire.SessionTurn{TurnID: id, Author: wire.SessionAuthor{ID: "guest", Name: "Guest"},
		Text: "hello", Thinking: "xhigh"}
}

// waitExec waits for an Execute result.
func waitExec(t *testing.T, ch <-chan execResult) execResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Execute did not return")
		return execResult{}
	}
}

// postReader posts a streamed body of size bytes (-1: unknown).
func (f *sessFixture) postReader(target string, body io.Reader, size int64) resp {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://broker"+target, body)
	if size >= 0 {
		req.ContentLength = size
	}
	res, err := f.client.Do(req)
	if err != nil {
		return resp{Err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return resp{Status: res.StatusCode, Body: string(data), Err: err}
}

// postAsync posts a streamed body in the background.
func (f *sessFixture) postAsync(target string, body io.Reader) <-chan resp {
	ch := make(chan resp, 1)
	go func() { ch <- f.postReader(target, body, -1) }()
	return ch
}

// plainBroker is a broker with a model and nothing else, for tests that
// need no upstream.
func plainBroker(tb testing.TB) *broker.Broker {
	tb.Helper()
	b, err := broker.New(broker.Config{ModelURL: ep("https://model.example"), Model: "m",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "k", nil }})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
