// Package fakemcp is an MCP server stand-in for tests: the go-sdk's
// Streamable HTTP server on loopback, stateful (every request after
// initialize must carry its Mcp-Session-Id), with text tools, recording
// the Authorization header and method of every request it receives.
package fakemcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is a stand-in tool: its name, description, inputSchema and text
// answer.
type Tool struct {
	Name        string
	Description string
	Schema      json.RawMessage                   // nil means {"type":"object"}
	Reply       func(args json.RawMessage) string // nil answers ""
}

// Request is what the stand-in saw of one HTTP request.
type Request struct {
	Method        string // the JSON-RPC method; "" for a GET or DELETE
	Authorization string
}

// Server is a running stand-in; URL is its MCP endpoint.
type Server struct {
	URL string

	srv    *httptest.Server
	server *mcp.Server
	mu     sync.Mutex
	reqs   []Request
}

// New starts a stand-in with tools.
func New(tools ...Tool) *Server {
	s := &Server{server: mcp.NewServer(&mcp.Implementation{Name: "fakemcp", Version: "1"}, nil)}
	for _, t := range tools {
		schema := t.Schema
		if schema == nil {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		reply := t.Reply
		if reply == nil {
			reply = func(json.RawMessage) string { return "" }
		}
		s.server.AddTool(&mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: schema},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: reply(req.Params.Arguments)}}}, nil
			})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.server }, nil)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var call struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &call)
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{Method: call.Method, Authorization: r.Header.Get("Authorization")})
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	}))
	s.URL = s.srv.URL + "/mcp"
	return s
}

// Requests returns the requests so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// ToolCalls counts the tools/call requests so far.
func (s *Server) ToolCalls() int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == "tools/call" {
			n++
		}
	}
	return n
}

// Close ends every session and stops the server.
func (s *Server) Close() {
	for ss := range s.server.Sessions() {
		_ = ss.Close()
	}
	s.srv.Close()
}
