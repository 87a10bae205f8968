package host

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/fakemcp"
	"github.com/rtsandbox/rtsandbox/upstream"
)

const (
	searchSchema = `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`
	remoteSchema = `{"$id":"https://tools.example/remote","type":"object"}`
	draft07      = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`
)

// newMCPLister starts an in-process go-sdk MCP server (sessions required)
// on loopback with the tools "search", "remote" (whose schema has a remote
// $id) and "echo" (whose schema names draft-07, as the TypeScript SDK's
// do).
func newMCPLister(t *testing.T) (upstream.Endpoint, *fakemcp.Server) {
	t.Helper()
	srv := fakemcp.New(
		fakemcp.Tool{Name: "search", Description: "Search the docs", Schema: json.RawMessage(searchSchema)},
		fakemcp.Tool{Name: "remote", Description: "Remote", Schema: json.RawMessage(remoteSchema)},
		fakemcp.Tool{Name: "echo", Description: "Echo", Schema: json.RawMessage(draft07)},
	)
	t.Cleanup(srv.Close)
	return upstream.MustParseEndpoint(srv.URL, true), srv
}

func mcpConfig(url upstream.Endpoint, tools ...rtsandbox.ToolSpec) *config.Config {
	return &config.Config{
		Model: config.Model{URL: upstream.MustParseEndpoint("https://models.example/v1", false), Name: "m", APIKeyEnv: "MODEL_KEY"},
		MCP:   []config.MCPServer{{Name: "docs", URL: url, APIKeyEnv: "DOCS_KEY", Tools: tools}},
	}
}

var declaredTool = rtsandbox.ToolSpec{Name: "local", Description: "Declared here", Parameters: json.RawMessage(`{"type":"object"}`)}

// A tool named without a schema takes the server's description and
// inputSchema at startup; a declared one stays as written; the listing
// sends the server's key, and the broker accepts the result.
func TestMCPToolsByName(t *testing.T) {
	url, l := newMCPLister(t)
	cfg := mcpConfig(url, rtsandbox.ToolSpec{Name: "search"}, declaredTool, rtsandbox.ToolSpec{Name: "echo"})
	bc, err := BrokerConfig(t.Context(), cfg, mapEnv(map[string]string{"DOCS_KEY": "docs-key"}), nil, nil)
	if err != nil {
		t.Fatalf("BrokerConfig: %v", err)
	}
	got := bc.MCP[0].Tools
	for i := range got {
		got[i].Parameters = compactJSON(t, got[i].Parameters)
	}
	want := []rtsandbox.ToolSpec{
		{Name: "search", Description: "Search the docs", Parameters: compactJSON(t, json.RawMessage(searchSchema))},
		declaredTool,
		// The draft-07 $schema is dropped (dropDialect), nothing else.
		{Name: "echo", Description: "Echo", Parameters: compactJSON(t, json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`))},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MCP tools (-want +got):\n%s", diff)
	}
	reqs := l.Requests()
	if len(reqs) == 0 {
		t.Fatal("the server was not listed")
	}
	for _, r := range reqs {
		if r.Authorization != "Bearer docs-key" {
			t.Errorf("listing %q authorization = %q; want the server's key", r.Method, r.Authorization)
		}
	}
	if _, err := broker.New(bc); err != nil {
		t.Errorf("broker.New: %v", err)
	}
}

// compactJSON re-encodes a schema with sorted keys, so that the server's
// re-encoding and the declared text compare equal.
func compactJSON(t *testing.T, raw json.RawMessage) json.RawMessage {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("schema %s: %v", raw, err)
	}
	out, _ := json.Marshal(v)
	return out
}

// A config whose MCP tools are all declared in full does not contact the
// server at startup.
func TestMCPDeclaredToolsNeedNoServer(t *testing.T) {
	url, l := newMCPLister(t)
	if _, err := BrokerConfig(t.Context(), mcpConfig(url, declaredTool), mapEnv(nil), nil, nil); err != nil {
		t.Fatalf("BrokerConfig: %v", err)
	}
	if n := len(l.Requests()); n != 0 {
		t.Errorf("server got %d requests at startup; want 0", n)
	}
}

// Startup errors name the config item and the rule.
func TestMCPToolsByNameErrors(t *testing.T) {
	url, _ := newMCPLister(t)
	down := upstream.MustParseEndpoint("http://127.0.0.1:1/mcp", true)
	for _, tt := range []struct {
		name  string
		url   upstream.Endpoint
		tools []rtsandbox.ToolSpec
		want  string
	}{
		{"tool-missing", url, []rtsandbox.ToolSpec{declaredTool, {Name: "missing"}},
			`mcp[0].tools[1]: the server "docs" lists no tool "missing"`},
		{"schema-refused", url, []rtsandbox.ToolSpec{{Name: "remote"}},
			`mcp[0].tools[0]: the inputSchema of "remote" from the server "docs" is refused: `},
		{"server-down", down, []rtsandbox.ToolSpec{{Name: "search"}},
			`mcp[0] (docs): listing the server's tools: `},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BrokerConfig(t.Context(), mcpConfig(tt.url, tt.tools...), mapEnv(nil), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("BrokerConfig error = %v; want one containing %q", err, tt.want)
			}
		})
	}
}
