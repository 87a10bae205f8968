package worker_test

// These tests run the worker against the real broker on a real Unix socket,
// with a loopback stand-in model behind it, where the spec's test inventory
// says "the real broker handler" or "via Unix socket".

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/hosttool"
	"github.com/rtsandbox/rtsandbox/internal/fakemcp"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/worker"
)

const realBrokerKey = "worker-test-real-key"

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// calls returns the audit records as (route, status) pairs in order.
func (l *lockedLog) calls(t *testing.T) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var rec struct {
			Route  string `json:"route"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, fmt.Sprintf("%s %d", rec.Route, rec.Status))
	}
	return out
}

// realTurn runs one worker turn against a real broker built from cfg.
type realTurn struct {
	cfg   broker.Config
	audit *lockedLog
	dir   string
}

func newRealTurn(t *testing.T, model *fakemodel.Server, edit func(*broker.Config)) *realTurn {
	t.Helper()
	dir, err := os.MkdirTemp("", "wrb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt := &realTurn{audit: &lockedLog{}, dir: dir}
	rt.cfg = broker.Config{
		ModelURL: upstream.MustParseEndpoint(model.ChatURL(), true), Model: "test-model",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return realBrokerKey, nil },
		Logger: slog.New(slog.NewJSONHandler(rt.audit, nil)),
	}
	if edit != nil {
		edit(&rt.cfg)
	}
	return rt
}

func (rt *realTurn) run(t *testing.T, turn wire.Turn) (int, rtsandbox.Reply) {
	t.Helper()
	b, err := broker.New(rt.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	speaker := rtsandbox.Speaker{ID: turn.Speaker.ID, Name: turn.Speaker.Name, PrincipalID: "p_" + turn.Speaker.ID}
	srv, err := broker.Listen(filepath.Join(rt.dir, "b.sock"), b.Turn(ctx, rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker}), broker.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	in, err := jsonjs.Marshal(turn)
	if err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	code := worker.Run(ctx, worker.Options{Stdin: bytes.NewReader(in), Stdout: &out, Stderr: &stderr, Socket: srv.Path()})
	var reply rtsandbox.Reply
	if err := json.Unmarshal(out.Bytes(), &reply); err != nil {
		t.Fatalf("worker stdout %q: %v (stderr %s)", out.Bytes(), err, stderr.Bytes())
	}
	if strings.Contains(out.String()+stderr.String(), realBrokerKey) {
		t.Errorf("the real key reached the worker's output")
	}
	if s := reply.State; code == 0 && (s == nil || s.Memory == nil || s.History == nil) {
		t.Errorf("worker stdout %.200q; want the state with memory and history lists", out.Bytes())
	}
	return code, reply
}

// wantReply fails t unless the turn exited 0 with the ok reply text.
func wantReply(t *testing.T, code int, reply rtsandbox.Reply, text string) {
	t.Helper()
	if code != 0 || !reply.OK || reply.Text != text {
		t.Fatalf("turn = %d {ok:%v text:%.80q}; want 0 and ok %q", code, reply.OK, reply.Text, text)
	}
}

func baseTurn(text string) wire.Turn {
	return wire.Turn{Text: text, Speaker: wire.TurnSpeaker{ID: "alice", Name: "Alice"},
		Model: "test-model", Prompt: "Be brief.", TimeZone: "UTC",
		Memory: []rtsandbox.MemoryEntry{}, History: []rtsandbox.HistoryEntry{},
		Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}}
}

// The reference's test "Worker transport (via Unix socket)": the worker's transport
// against the real listener gets 200.
func TestWorkerTransportViaRealBroker(t *testing.T) {
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: realBrokerKey}, fakemodel.Reply("Hello from the sealed worker."))
	defer model.Close()
	rt := newRealTurn(t, model, nil)
	code, reply := rt.run(t, baseTurn("Hello"))
	wantReply(t, code, reply, "Hello from the sealed worker.")
	if diff := cmp.Diff([]string{"/model 200"}, rt.audit.calls(t)); diff != "" {
		t.Errorf("broker calls (-want +got):\n%s", diff)
	}
}

// The reference's test "Declared routes only", through the real broker: the built-in
// clock and an MCP server, called in order.
func TestDeclaredRoutesOnlyRealBroker(t *testing.T) {
	mcp := fakemcp.New(fakemcp.Tool{Name: "search", Reply: func(json.RawMessage) string { return "found a" }})
	defer mcp.Close()
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("host_clock", map[string]any{}), fakemodel.Call("mcp_0_search", map[string]any{"query": "a"})),
		fakemodel.Reply("Done."),
	)
	defer model.Close()
	search := rtsandbox.ToolSpec{Name: "search", Description: "Search", Parameters: json.RawMessage(`{"type":"object"}`)}
	rt := newRealTurn(t, model, func(c *broker.Config) {
		c.Tools = []broker.Tool{{Spec: hosttool.ClockSpec(), Impl: hosttool.Clock{}}}
		c.MCP = []broker.MCPServer{{Name: "catalog", URL: upstream.MustParseEndpoint(mcp.URL, true), Tools: []rtsandbox.ToolSpec{search}}}
	})
	turn := baseTurn("What time is it?")
	turn.Tools = []rtsandbox.ToolSpec{hosttool.ClockSpec()}
	turn.MCP = []wire.MCPServerTools{{Server: "catalog", Tools: []rtsandbox.ToolSpec{search}}}
	code, reply := rt.run(t, turn)
	wantReply(t, code, reply, "Done.")
	want := []string{"/model 200", "/tools/clock 200", "/mcp/catalog 200", "/model 200"}
	if diff := cmp.Diff(want, rt.audit.calls(t)); diff != "" {
		t.Errorf("broker calls (-want +got):\n%s", diff)
	}
	first := model.Requests()[0].Body
	var names []string
	for _, tool := range first.Tools {
		names = append(names, tool.Function.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "host_clock") || !strings.Contains(strings.Join(names, ","), "mcp_0_search") {
		t.Errorf("first request tools = %v; want host_clock and mcp_0_search", names)
	}
}

// The reference's test "Transport status passthrough": with a budget of one call the
// second call is refused with 429 and the worker fails closed.
func TestTransportStatusPassthroughRealBroker(t *testing.T) {
	model := fakemodel.New(fakemodel.CallTools(fakemodel.Call("host_clock", map[string]any{})), fakemodel.Reply("unreachable"))
	defer model.Close()
	rt := newRealTurn(t, model, func(c *broker.Config) {
		c.MaxCalls = 1
		c.Tools = []broker.Tool{{Spec: hosttool.ClockSpec(), Impl: hosttool.Clock{}}}
	})
	turn := baseTurn("time?")
	turn.Tools = []rtsandbox.ToolSpec{hosttool.ClockSpec()}
	code, reply := rt.run(t, turn)
	if diff := cmp.Diff([]string{"/model 200", "/tools/clock 429", "/model 429"}, rt.audit.calls(t)); diff != "" {
		t.Errorf("broker calls (-want +got):\n%s", diff)
	}
	// The refused tool call is reported to the model as a failed call;
	// the next /model call is refused as well and the worker fails.
	if code == 0 && reply.OK {
		t.Errorf("turn = %d %+v; want a failure once the budget is spent", code, reply)
	}
}

// The reference's test "Worker repairs provider tool calls", through the real broker.
func TestWorkerRepairsProviderToolCallsRealBroker(t *testing.T) {
	args := `{"scope":"channel"}`
	tests := []struct {
		name    string
		calls   []fakemodel.ToolCall
		wantIDs []string
	}{
		{"invalid-name", []fakemodel.ToolCall{{ID: "call_a", Type: "function", Function: fakemodel.FunctionCall{Name: "Memory-Get", Arguments: args}}}, nil},
		{"long-id", []fakemodel.ToolCall{{ID: strings.Repeat("i", 200), Type: "function", Function: fakemodel.FunctionCall{Name: "memory_get", Arguments: args}}}, nil},
		{"duplicate-id", []fakemodel.ToolCall{
			{ID: "call_0_1", Type: "function", Function: fakemodel.FunctionCall{Name: "memory_get", Arguments: args}},
			{ID: "call_0_1", Type: "function", Function: fakemodel.FunctionCall{Name: "memory_get", Arguments: args}},
		}, []string{"call_0_1", "call_0_1_1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := fakemodel.New(fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
				return fakemodel.Response{ToolCalls: tt.calls}
			}), fakemodel.Reply("Recovered."))
			defer model.Close()
			rt := newRealTurn(t, model, nil)
			code, reply := rt.run(t, baseTurn("recall"))
			wantReply(t, code, reply, "Recovered.")
			if diff := cmp.Diff([]string{"/model 200", "/model 200"}, rt.audit.calls(t)); diff != "" {
				t.Errorf("broker calls (-want +got):\n%s", diff)
			}
			replay := model.Requests()[1].Body.Messages
			var assistant fakemodel.Message
			var replyIDs []string
			for _, m := range replay {
				if m.Role == "assistant" && len(m.ToolCalls) > 0 {
					assistant = m
				}
				if m.Role == "tool" {
					replyIDs = append(replyIDs, m.ToolCallID)
				}
			}
			var ids []string
			seen := map[string]bool{}
			for _, c := range assistant.ToolCalls {
				if seen[c.ID] || !rtsandbox.ValidToolCallID(c.ID) {
					t.Errorf("replayed call id %q is duplicate or invalid", c.ID)
				}
				seen[c.ID] = true
				ids = append(ids, c.ID)
			}
			if diff := cmp.Diff(ids, replyIDs); diff != "" {
				t.Errorf("tool reply ids differ from call ids (-calls +replies):\n%s", diff)
			}
			if tt.wantIDs != nil {
				if diff := cmp.Diff(tt.wantIDs, ids); diff != "" {
					t.Errorf("repaired ids (-want +got):\n%s", diff)
				}
			}
			if tt.name == "invalid-name" && assistant.ToolCalls[0].Function.Name != "invalid_tool" {
				t.Errorf("invalid name replayed as %q; want invalid_tool", assistant.ToolCalls[0].Function.Name)
			}
		})
	}
}

// The reference's test "Near-capacity store and huge history still fit", measured
// where it matters: every body the real broker sends upstream.
func TestNearCapacityFitsRealBroker(t *testing.T) {
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("memory_remove", map[string]any{"scope": "channel", "key": "note_0"})),
		fakemodel.Reply("Removed."),
	)
	defer model.Close()
	rt := newRealTurn(t, model, nil)
	turn := baseTurn(strings.Repeat("\u4e01", 20000))
	for i := range 144 {
		text := strings.Repeat("n", 2048)
		if i < 32 {
			text = strings.Repeat("\u4e01", 2048)
		}
		turn.Memory = append(turn.Memory, rtsandbox.MemoryEntry{Scope: "channel", Key: fmt.Sprintf("note_%d", i), Text: text})
	}
	// The largest history the host keeps: 20 messages at the history
	// budget (the reference wrote 20 × 100,000 characters to history.json).
	for i := range rtsandbox.MaxHistory {
		turn.History = append(turn.History, rtsandbox.HistoryEntry{Role: []string{"user", "assistant"}[i%2], Content: strings.Repeat("h", rtsandbox.HistoryBudget-2)})
	}
	code, reply := rt.run(t, turn)
	wantReply(t, code, reply, "Removed.")
	for _, e := range reply.State.Memory {
		if e.Key == "note_0" {
			t.Errorf("returned memory still holds note_0")
		}
	}
	if n := len(reply.State.Memory); n != 143 {
		t.Errorf("returned memory has %d entries; want 143", n)
	}
	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("upstream calls = %d; want 2", len(reqs))
	}
	for i, r := range reqs {
		if len(r.Raw) >= 196608 {
			t.Errorf("upstream body %d is %d bytes; want < 196608", i, len(r.Raw))
		}
	}
	if diff := cmp.Diff([]string{"/model 200", "/model 200"}, rt.audit.calls(t)); diff != "" {
		t.Errorf("broker calls (-want +got):\n%s", diff)
	}
}

// The worker's Anthropic client through the real broker's Anthropic route,
// whole and streamed: a host tool round trip, with the broker rebuilding
// every request (modelapi.NormalizeMessages) and swapping in the key.
func TestAnthropicTurnRealBroker(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			model := fakemodel.NewWithOptions(fakemodel.Options{Key: realBrokerKey},
				fakemodel.CallTools(fakemodel.Call("host_clock", map[string]any{})),
				fakemodel.Reply("It is noon."))
			defer model.Close()
			rt := newRealTurn(t, model, func(c *broker.Config) {
				c.ModelURL = upstream.MustParseEndpoint(model.URL(), true)
				c.API, c.Stream = rtsandbox.ModelAPIAnthropic, stream
				c.Tools = []broker.Tool{{Spec: hosttool.ClockSpec(), Impl: hosttool.Clock{}}}
			})
			turn := baseTurn("What time is it?")
			turn.ModelAPI, turn.Stream = rtsandbox.ModelAPIAnthropic, stream
			turn.Tools = []rtsandbox.ToolSpec{hosttool.ClockSpec()}
			code, reply := rt.run(t, turn)
			wantReply(t, code, reply, "It is noon.")
			want := []string{wire.RouteAnthropicMessages + " 200", "/tools/clock 200", wire.RouteAnthropicMessages + " 200"}
			if diff := cmp.Diff(want, rt.audit.calls(t)); diff != "" {
				t.Errorf("broker calls (-want +got):\n%s", diff)
			}
		})
	}
}

// MCP tool names of real servers ("get-sum", "getWeather": the model APIs'
// rule, not the sealed one) pass the turn JSON, the broker and the model
// route: the model sees each under its mapped function name, within the
// sealed function-name rule, and the tools/call names the tool as the
// server spells it.
func TestMCPToolNamesOfRealServersRealBroker(t *testing.T) {
	var got []string
	var mu sync.Mutex
	reply := func(name string) func(json.RawMessage) string {
		return func(json.RawMessage) string { mu.Lock(); got = append(got, name); mu.Unlock(); return "ok " + name }
	}
	mcp := fakemcp.New(fakemcp.Tool{Name: "get-sum", Reply: reply("get-sum")}, fakemcp.Tool{Name: "getWeather", Reply: reply("getWeather")})
	defer mcp.Close()
	sum, weather := worker.MCPFunctionName(0, "get-sum"), worker.MCPFunctionName(0, "getWeather")
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call(sum, map[string]any{"a": 1}), fakemodel.Call(weather, map[string]any{})),
		fakemodel.Reply("Done."),
	)
	defer model.Close()
	tools := []rtsandbox.ToolSpec{
		{Name: "get-sum", Description: "Add", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "getWeather", Description: "Weather", Parameters: json.RawMessage(`{"type":"object"}`)},
	}
	rt := newRealTurn(t, model, func(c *broker.Config) {
		c.MCP = []broker.MCPServer{{Name: "everything", URL: upstream.MustParseEndpoint(mcp.URL, true), Tools: tools}}
	})
	turn := baseTurn("add")
	turn.MCP = []wire.MCPServerTools{{Server: "everything", Tools: tools}}
	code, res := rt.run(t, turn)
	wantReply(t, code, res, "Done.")
	want := []string{"/model 200", "/mcp/everything 200", "/mcp/everything 200", "/model 200"}
	if diff := cmp.Diff(want, rt.audit.calls(t)); diff != "" {
		t.Errorf("broker calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"get-sum", "getWeather"}, got); diff != "" {
		t.Errorf("tools called on the server (-want +got):\n%s", diff)
	}
	var names []string
	for _, tool := range model.Requests()[0].Body.Tools {
		names = append(names, tool.Function.Name)
	}
	if !slices.Contains(names, sum) || !slices.Contains(names, weather) {
		t.Errorf("model tools = %v; want %q and %q", names, sum, weather)
	}
}
