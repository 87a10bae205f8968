package broker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

// mcpStub is an in-process go-sdk MCP server (Streamable HTTP, stateful:
// every request after initialize must carry its Mcp-Session-Id) behind a
// recording fakeUpstream. Its tool "search" answers with reply; it also
// has a tool "delete" that no test config lists.
type mcpStub struct {
	*fakeUpstream
	server  *mcp.Server
	expired sync.Map // session ids the stub answers with 404, as expired
}

func newMCPStub(t *testing.T, opts *mcp.StreamableHTTPOptions, reply func(*mcp.CallToolRequest) *mcp.CallToolResult) *mcpStub {
	t.Helper()
	st := &mcpStub{server: mcp.NewServer(&mcp.Implementation{Name: "stub", Version: "1"}, nil)}
	schema := json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)
	st.server.AddTool(&mcp.Tool{Name: "search", Description: "Search", InputSchema: schema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return reply(req), nil })
	st.server.AddTool(&mcp.Tool{Name: "delete", Description: "Delete", InputSchema: schema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			t.Error("the unlisted tool ran")
			return textResult("deleted")(nil), nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return st.server }, opts)
	st.fakeUpstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if _, gone := st.expired.Load(r.Header.Get("Mcp-Session-Id")); gone {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
	t.Cleanup(func() {
		for ss := range st.server.Sessions() {
			_ = ss.Close()
		}
	})
	return st
}

func textResult(text string) func(*mcp.CallToolRequest) *mcp.CallToolResult {
	return func(*mcp.CallToolRequest) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	}
}

// rpc is the part of a recorded JSON-RPC request the tests look at.
type rpc struct {
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Session string          `json:"-"`
	Auth    string          `json:"-"`
}

// calls returns the recorded JSON-RPC requests (POSTs), in order.
func (u *fakeUpstream) calls(t *testing.T) []rpc {
	t.Helper()
	var out []rpc
	for _, r := range u.requests() {
		if len(r.Body) == 0 {
			continue // the closing DELETE
		}
		var c rpc
		if err := json.Unmarshal(r.Body, &c); err != nil {
			t.Fatalf("upstream got a non-JSON body %q", r.Body)
		}
		c.Session, c.Auth = r.Header.Get("Mcp-Session-Id"), r.Header.Get("Authorization")
		out = append(out, c)
	}
	return out
}

func methods(calls []rpc) []string {
	out := make([]string, 0, len(calls))
	for _, c := range calls {
		out = append(out, c.Method)
	}
	return out
}

// sessionIDs returns the distinct session ids the upstream saw.
func sessionIDs(calls []rpc) []string {
	var out []string
	for _, c := range calls {
		if c.Session != "" && (len(out) == 0 || out[len(out)-1] != c.Session) {
			out = append(out, c.Session)
		}
	}
	return out
}

const searchCall = `{"method":"tools/call","params":{"name":"search","arguments":{"query":"hello"}}}`

// The broker is a proper MCP client: it initialises, keeps the session for
// the turn's later calls, accepts JSON and SSE answers, and the guest gets
// the JSON-RPC answer without any trace of the session.
func TestMCPSessionInitialiseAndCall(t *testing.T) {
	for _, tt := range []struct {
		name string
		json bool
	}{{"sse-answers", false}, {"json-answers", true}} {
		t.Run(tt.name, func(t *testing.T) {
			st := newMCPStub(t, &mcp.StreamableHTTPOptions{JSONResponse: tt.json}, textResult("found it"))
			f := newFixture(t, nil, withMCP(st.fakeUpstream, rtsandbox.Secret(realMCPKey)))
			want := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"found it"}]}}`
			for range 2 {
				w := f.post(wire.MCPRoute("public"), searchCall)
				wantStatus(t, w, 200, want)
				if h := w.Header().Get("Mcp-Session-Id"); h != "" {
					t.Errorf("guest got an Mcp-Session-Id header %q", h)
				}
			}
			calls := st.calls(t)
			if diff := cmp.Diff([]string{"initialize", "notifications/initialized", "tools/call", "tools/call"}, methods(calls)); diff != "" {
				t.Errorf("upstream methods (-want +got):\n%s", diff)
			}
			ids := sessionIDs(calls)
			if len(ids) != 1 {
				t.Fatalf("session ids = %q; want one, kept for the turn", ids)
			}
			for _, c := range calls {
				if c.Auth != "Bearer "+realMCPKey {
					t.Errorf("%s authorization = %q; want the MCP key", c.Method, c.Auth)
				}
				if c.Method != "initialize" && c.Session != ids[0] {
					t.Errorf("%s carried session %q; want %q", c.Method, c.Session, ids[0])
				}
			}
			if strings.Contains(f.bodies.String(), ids[0]) {
				t.Error("the session id reached the guest")
			}
		})
	}
}

// A session the server has expired (404 on its id) is initialised again
// and the call repeated once, within the guest's one broker call.
func TestMCPSessionExpiryReinitialises(t *testing.T) {
	st := newMCPStub(t, nil, textResult("ok"))
	f := newFixture(t, nil, withMCP(st.fakeUpstream, rtsandbox.Secret(realMCPKey)))
	wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 200, "")
	first := sessionIDs(st.calls(t))
	if len(first) != 1 {
		t.Fatalf("session ids = %q; want one", first)
	}
	st.expired.Store(first[0], true)
	before := f.turn.Remaining()
	wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 200, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}`)
	if spent := before - f.turn.Remaining(); spent != 1 {
		t.Errorf("broker calls spent = %d; want 1", spent)
	}
	calls := st.calls(t)
	want := []string{"initialize", "notifications/initialized", "tools/call", "tools/call", "initialize", "notifications/initialized", "tools/call"}
	if diff := cmp.Diff(want, methods(calls)); diff != "" {
		t.Errorf("upstream methods (-want +got):\n%s", diff)
	}
	ids := sessionIDs(calls)
	if len(ids) != 2 || ids[0] != first[0] || ids[1] == first[0] {
		t.Errorf("session ids = %q; want %q then a new one", ids, first[0])
	}
	// Still expired: the third call needs no new session.
	wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 200, "")
	if n := len(sessionIDs(st.calls(t))); n != 2 {
		t.Errorf("sessions after a third call = %d; want 2", n)
	}
}

// Each turn has its own session, closed (DELETE) when the turn ends.
func TestMCPSessionPerTurn(t *testing.T) {
	st := newMCPStub(t, nil, textResult("ok"))
	f := newFixture(t, nil, withMCP(st.fakeUpstream, rtsandbox.Secret(realMCPKey)))
	wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 200, "")
	f.cancel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.turn = f.broker.Turn(ctx, rtsandbox.Binding{Channel: testChannel, Speaker: guest})
	wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 200, "")
	if ids := sessionIDs(st.calls(t)); len(ids) != 2 {
		t.Errorf("session ids = %q; want one per turn", ids)
	}
}

// Methods other than tools/call, and tools the config does not list (even
// ones the server has), are refused before any upstream contact: no
// initialize, no key read.
func TestMCPRefusedBeforeUpstream(t *testing.T) {
	st := newMCPStub(t, nil, textResult("ok"))
	for _, tt := range []struct{ name, body string }{
		{"unlisted-tool", `{"method":"tools/call","params":{"name":"delete","arguments":{}}}`},
		{"resource-read", `{"method":"resources/read","params":{"uri":"file:///etc/passwd"}}`},
		{"prompt-get", `{"method":"prompts/get","params":{"name":"p"}}`},
		{"tools-list", `{"method":"tools/list","params":{}}`},
		{"initialize", `{"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`},
		{"ping", `{"method":"ping"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var keyReads int
			f := newFixture(t, nil, func(c *broker.Config) {
				withMCP(st.fakeUpstream, rtsandbox.Secret(realMCPKey))(c)
				c.MCP[0].APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
					keyReads++
					return rtsandbox.Secret(realMCPKey), nil
				}
			})
			wantStatus(t, f.post(wire.MCPRoute("public"), tt.body), 403, "MCP method or tool refused")
			if keyReads != 0 {
				t.Errorf("key read %d times; want 0", keyReads)
			}
		})
	}
	if n := len(st.requests()); n != 0 {
		t.Errorf("MCP upstream got %d requests; want 0", n)
	}
}

// An answer that echoes the MCP key, or the session id the server handed
// the broker, is refused: the guest gets the fixed 502.
func TestMCPReflectionRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		echo func(*mcp.CallToolRequest) string
	}{
		{"key", func(r *mcp.CallToolRequest) string { return "you sent " + r.Extra.Header.Get("Authorization") }},
		{"key-in-structured", func(*mcp.CallToolRequest) string { return realMCPKey }},
		{"session-id", func(r *mcp.CallToolRequest) string { return "session " + r.Extra.Header.Get("Mcp-Session-Id") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newMCPStub(t, nil, func(r *mcp.CallToolRequest) *mcp.CallToolResult {
				text := tt.echo(r)
				res := textResult("see structured")(r)
				if tt.name == "key-in-structured" {
					res.StructuredContent = map[string]any{"k": text}
				} else {
					res.Content = []mcp.Content{&mcp.TextContent{Text: text}}
				}
				return res
			})
			f := newFixture(t, nil, withMCP(st.fakeUpstream, rtsandbox.Secret(realMCPKey)))
			wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 502, "broker call failed")
			if !strings.Contains(f.logs.String(), "reflects the credential") {
				t.Errorf("audit log lacks the reflection refusal:\n%s", f.logs.String())
			}
			ids := sessionIDs(st.calls(t))
			if len(ids) == 0 || strings.Contains(f.bodies.String(), ids[0]) {
				t.Errorf("session ids %q; the guest's bodies must not hold one", ids)
			}
		})
	}
}

// An answer over the 1 MiB bound fails the call.
func TestMCPAnswerBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		json bool
	}{{"sse", false}, {"json", true}} {
		t.Run(tt.name, func(t *testing.T) {
			st := newMCPStub(t, &mcp.StreamableHTTPOptions{JSONResponse: tt.json}, textResult(strings.Repeat("a", rtsandbox.MaxBrokerResponse)))
			f := newFixture(t, nil, withMCP(st.fakeUpstream, rtsandbox.Secret(realMCPKey)))
			wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 502, "broker call failed")
			if !strings.Contains(f.logs.String(), "response too large") {
				t.Errorf("audit log lacks the size refusal:\n%s", f.logs.String())
			}
		})
	}
}

// A JSON-RPC error the server answers a call with (in a 2xx answer) reaches
// the guest as the JSON-RPC error of its call; it is not a broker failure.
func TestMCPServerErrorAnswered(t *testing.T) {
	st := newMCPStub(t, nil, textResult("ok"))
	f := newFixture(t, nil, func(c *broker.Config) {
		withMCP(st.fakeUpstream, rtsandbox.Secret(realMCPKey))(c)
		c.MCP[0].Tools = append(c.MCP[0].Tools, rtsandbox.ToolSpec{Name: "gone", Parameters: json.RawMessage(`{"type":"object"}`)})
	})
	w := f.post(wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"gone","arguments":{}}}`)
	var answer struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int    `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &answer) != nil || answer.JSONRPC != "2.0" || answer.ID != 1 ||
		answer.Error.Code == 0 || !strings.Contains(answer.Error.Message, "gone") {
		t.Errorf("call of a tool the server lacks = %d %s; want 200 with its JSON-RPC error", w.Code, w.Body)
	}
	// The session survives a JSON-RPC error.
	wantStatus(t, f.post(wire.MCPRoute("public"), searchCall), 200, "")
	if ids := sessionIDs(st.calls(t)); len(ids) != 1 {
		t.Errorf("session ids = %q; want one", ids)
	}
}
