package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rtsandbox/rtsandbox"
)

// mcpEcho serves a go-sdk MCP server (sessions required) whose tool "echo"
// answers with its arguments, through wrap, recording the header names of
// every request.
func mcpEcho(t *testing.T, wrap func(http.Handler) http.Handler) (Endpoint, func() [][]string) {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	var mu sync.Mutex
	var names [][]string
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n []string
		for k := range r.Header {
			n = append(n, k)
		}
		slices.Sort(n)
		mu.Lock()
		names = append(names, n)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		for ss := range server.Sessions() {
			_ = ss.Close()
		}
		srv.Close()
	})
	return MustParseEndpoint(srv.URL+"/mcp", true), func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(names)
	}
}

// The SDK's requests leave with rebuilt headers only: the allow-list, the
// credential, identity encoding; the answer is the guest's JSON-RPC shape.
func TestMCPSessionSendsOnlyRebuiltHeaders(t *testing.T) {
	url, names := mcpEcho(t, nil)
	sess := New(nil).MCP(url).Session()
	defer sess.Close(func() rtsandbox.Secret { return "k1" })
	out, err := sess.CallTool(t.Context(), "k1", "echo", json.RawMessage(`{"a":1}`))
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if want := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"a\":1}"}]}}`; string(out) != want {
		t.Errorf("answer = %s; want %s", out, want)
	}
	allowed := []string{"Accept", "Accept-Encoding", "Authorization", "Content-Length", "Content-Type", "Mcp-Protocol-Version", "Mcp-Session-Id"}
	for _, n := range names() {
		for _, h := range n {
			if !slices.Contains(allowed, h) {
				t.Errorf("request header %q; want only %q", h, allowed)
			}
		}
	}
}

// A redirect fails the call and its target is never contacted; a call on
// a closed session fails without contact.
func TestMCPSessionFailures(t *testing.T) {
	var contacted atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { contacted.Store(true) }))
	defer target.Close()
	url, _ := mcpEcho(t, func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
		})
	})
	_, err := New(nil).MCP(url).Session().CallTool(t.Context(), "k1", "echo", json.RawMessage(`{}`))
	if !errors.Is(err, ErrRedirect) || contacted.Load() {
		t.Errorf("redirected call = %v (target contacted %v); want ErrRedirect, no contact", err, contacted.Load())
	}

	url, names := mcpEcho(t, nil)
	sess := New(nil).MCP(url).Session()
	sess.Close(nil)
	if _, err := sess.CallTool(t.Context(), "k1", "echo", json.RawMessage(`{}`)); !errors.Is(err, ErrMCPClosed) || len(names()) != 0 {
		t.Errorf("call on a closed session = %v after %d requests; want ErrMCPClosed, none", err, len(names()))
	}
}

// The credential stays in the session only while a call runs.
func TestMCPSessionHoldsNoKeyBetweenCalls(t *testing.T) {
	url, _ := mcpEcho(t, nil)
	sess := New(nil).MCP(url).Session()
	defer sess.Close(nil)
	if _, err := sess.CallTool(t.Context(), "k1", "echo", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if k := sess.box.get(); k != "" {
		t.Errorf("key box holds %q after the call", k)
	}
	if sess.cs == nil || sess.cs.ID() == "" {
		t.Error("no session id kept for the next call")
	}
}
