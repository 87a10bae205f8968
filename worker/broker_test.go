package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// fakeBroker stands in for the host broker: an http.Server on a real Unix
// socket that enforces the header allow-list the real broker applies to the
// worker, records every route in order, and answers /model from a script
// of chat-completions responses in the real wire format.
type fakeBroker struct {
	t    *testing.T
	sock string

	mu       sync.Mutex
	routes   []string
	bodies   map[string][]string // route → request bodies in order
	statuses []int
	model    []string // scripted /model answers, consumed in order
	handlers map[string]func(body string) (int, string)
}

// startBroker serves on a short socket path under /tmp and closes the
// server when t ends.
func startBroker(t *testing.T, model ...string) *fakeBroker {
	t.Helper()
	b := &fakeBroker{
		t: t, model: model,
		bodies: map[string][]string{}, handlers: map[string]func(string) (int, string){},
	}
	b.sock = serveUnix(t, b)
	return b
}

// serveUnix serves h on a short socket path under /tmp (Unix socket paths
// are limited to about 100 bytes), shuts the server down when t ends, and
// returns the path.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "b.sock")
	if len(sock) > 100 {
		t.Fatalf("socket path %q longer than 100", sock)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return sock
}

// handle answers route with fn instead of the default 404.
func (b *fakeBroker) handle(route string, fn func(body string) (int, string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.handlers[route] = fn
}

func (b *fakeBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	status, answer := http.StatusForbidden, `{"error":"forbidden"}`
	if err := checkWorkerRequest(r, len(body)); err != nil {
		b.t.Errorf("broker request %s: %v", r.URL.Path, err)
	} else {
		status, answer = b.answer(r.URL.Path, string(body))
	}
	b.mu.Lock()
	b.statuses = append(b.statuses, status)
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close") // as the real broker
	w.WriteHeader(status)
	io.WriteString(w, answer)
}

func (b *fakeBroker) answer(route, body string) (int, string) {
	fn, script, n := b.record(route, body)
	switch {
	case fn != nil:
		return fn(body)
	case route != wire.RouteModel:
		return http.StatusNotFound, `{"error":"not found"}`
	case script == "":
		b.t.Errorf("unscripted /model call %d", n)
		return http.StatusBadGateway, `{"error":"broker call failed"}`
	}
	return http.StatusOK, script
}

// record logs the call and returns the route's handler, or for /model the
// next scripted answer ("" when the script is used up).
func (b *fakeBroker) record(route, body string) (fn func(string) (int, string), script string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.routes = append(b.routes, route)
	b.bodies[route] = append(b.bodies[route], body)
	if fn := b.handlers[route]; fn != nil {
		return fn, "", 0
	}
	if route == wire.RouteModel && len(b.model) > 0 {
		script, b.model = b.model[0], b.model[1:]
	}
	return nil, script, len(b.bodies[route])
}

// checkWorkerRequest applies the broker's rules to what the worker sends:
// POST, Host broker, the dummy bearer, a JSON content type, a correct
// Content-Length and no other header at all (so no Connection,
// Transfer-Encoding, User-Agent or Accept-Encoding).
func checkWorkerRequest(r *http.Request, n int) error {
	var problems []string
	if r.Method != http.MethodPost {
		problems = append(problems, "method "+r.Method)
	}
	if r.Host != wire.BrokerHost {
		problems = append(problems, "host "+r.Host)
	}
	if len(r.TransferEncoding) > 0 || r.Close {
		problems = append(problems, "transfer-encoding or connection close")
	}
	var names []string
	for k := range r.Header {
		names = append(names, strings.ToLower(k))
	}
	slices.Sort(names)
	if want := []string{"authorization", "content-length", "content-type"}; !slices.Equal(names, want) {
		problems = append(problems, fmt.Sprintf("headers %v, want %v", names, want))
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+wire.DummyKey {
		problems = append(problems, "authorization "+got)
	}
	if got := r.Header.Get("Content-Type"); got != "application/json" {
		problems = append(problems, "content-type "+got)
	}
	if got := r.Header.Get("Content-Length"); got != fmt.Sprint(n) {
		problems = append(problems, fmt.Sprintf("content-length %s for %d bytes", got, n))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (b *fakeBroker) gotRoutes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.routes)
}

func (b *fakeBroker) gotBodies(route string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.bodies[route])
}

func (b *fakeBroker) gotStatuses() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.statuses)
}

// completion returns a chat-completions response whose first choice holds
// content (a string, or nil for null) and the given tool calls.
func completion(content any, calls ...map[string]any) string {
	msg := map[string]any{"role": "assistant", "content": content}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	b, err := json.Marshal(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "model": "upstream-model",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// call is a model tool call without "type", as the reference tests send.
func call(id, name, args string) map[string]any {
	return map[string]any{"id": id, "function": map[string]any{"name": name, "arguments": args}}
}

// testTurn is a minimal valid turn with an empty channel state; runWorker
// replaces the state with its channel's.
func testTurn(speaker, text string) wire.Turn {
	return wire.Turn{
		Text: text, Speaker: wire.TurnSpeaker{ID: speaker, Name: strings.ToUpper(speaker)},
		Model: "test-model", Prompt: "Assist the guests.", TimeZone: "UTC",
		Memory: []rtsandbox.MemoryEntry{}, History: []rtsandbox.HistoryEntry{},
		Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{},
	}
}

// testChannel plays the host's side of one sealed channel across turns: it
// passes its state in each turn and, when the worker exits 0, keeps the
// state the reply returns. A failed turn leaves it as it was, as the host
// does.
type testChannel struct{ state rtsandbox.ChannelState }

// newChannel returns a channel with the given memory and history.
func newChannel(memory []rtsandbox.MemoryEntry, history []rtsandbox.HistoryEntry) *testChannel {
	return &testChannel{state: rtsandbox.ChannelState{Memory: memory, History: history}}
}

type runResult struct {
	code           int
	stdout, stderr string
	reply          rtsandbox.Reply // decoded stdout when code is 0
}

var testNow = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

// runWorker runs one turn of ch against b: the turn carries ch's memory and
// (unless turn.Reset) its history, and a reply with exit code 0 must carry
// the state, which ch then keeps.
func runWorker(t *testing.T, b *fakeBroker, ch *testChannel, turn wire.Turn) runResult {
	t.Helper()
	turn.Memory, turn.History = ch.state.Memory, ch.state.History
	if turn.Memory == nil {
		turn.Memory = []rtsandbox.MemoryEntry{}
	}
	if turn.Reset || turn.History == nil {
		turn.History = []rtsandbox.HistoryEntry{}
	}
	in, err := jsonjs.Marshal(turn)
	if err != nil {
		t.Fatal(err)
	}
	r := runWorkerRaw(t, b.sock, string(in))
	if r.code != 0 {
		return r
	}
	if err := json.Unmarshal([]byte(r.stdout), &r.reply); err != nil {
		t.Fatalf("Run() = 0, %q: %v", r.stdout, err)
	}
	if s := r.reply.State; s == nil || s.Memory == nil || s.History == nil {
		t.Fatalf("Run() = 0, %q; want the reply to carry the state with both lists", r.stdout)
	}
	ch.state = *r.reply.State
	return r
}

func runWorkerRaw(t *testing.T, sock, stdin string) runResult {
	t.Helper()
	var out, errOut strings.Builder
	code := Run(context.Background(), Options{
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Socket: sock, Now: func() time.Time { return testNow },
	})
	return runResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

// wantOK fails t unless r is an ok reply with text that carries the state
// (both lists present, never null).
func wantOK(t *testing.T, r runResult, text string) {
	t.Helper()
	var got rtsandbox.Reply
	err := json.Unmarshal([]byte(r.stdout), &got)
	if r.code != 0 || err != nil || !got.OK || got.Text != text {
		t.Fatalf("Run() = %d, %.200q (stderr %q); want 0 and ok %q", r.code, r.stdout, r.stderr, text)
	}
	if s := got.State; s == nil || s.Memory == nil || s.History == nil {
		t.Fatalf("Run() = 0, %.200q; want the state with memory and history lists", r.stdout)
	}
}

// wantFailed fails t unless r is the fixed failure reply with exit code 1:
// no state, so the host keeps the channel as it was.
func wantFailed(t *testing.T, r runResult) {
	t.Helper()
	if r.code != 1 || r.stdout != failedReply {
		t.Fatalf("Run() = %d, %q (stderr %q); want 1, %q", r.code, r.stdout, r.stderr, failedReply)
	}
}
