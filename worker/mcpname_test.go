package worker

import (
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// mcpFunctionName keeps every sealed-rule name as it was and maps the
// others into the sealed function-name rule (within OpenAI's 64 and
// Anthropic's 128), apart from each other and the same every time.
func TestMCPFunctionName(t *testing.T) {
	long := strings.Repeat("Ab-", 42) + "xy" // 128 bytes, the longest MCP tool name
	tests := []struct {
		name   string
		server int
		tool   string
		want   string // "" checks the rule only
	}{
		{"sealed-name-unchanged", 0, "search", "mcp_0_search"},
		{"sealed-name-longest", 12, strings.Repeat("s", 48), "mcp_12_" + strings.Repeat("s", 48)},
		{"dash", 0, "get-sum", "mcp_0_get_sum_"},
		{"capitals", 1, "getWeather", "mcp_1_getweather_"},
		{"leading-digit", 0, "9lives", "mcp_0_9lives"},
		{"leading-dash", 0, "-x", "mcp_0__x_"},
		{"openai-longest", 0, strings.Repeat("a", 64), ""},
		{"anthropic-longest", 3, long, ""},
		{"many-servers", 999, long, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mcpFunctionName(tt.server, tt.tool)
			if !rtsandbox.ValidFunctionName(got) {
				t.Fatalf("mcpFunctionName(%d, %q) = %q: not a valid function name", tt.server, tt.tool, got)
			}
			if tt.want != "" && !(got == tt.want || strings.HasSuffix(tt.want, "_") && strings.HasPrefix(got, tt.want) && len(got) == len(tt.want)+8) {
				t.Errorf("mcpFunctionName(%d, %q) = %q; want %q (plus 8 hex digits when it ends in _)", tt.server, tt.tool, got, tt.want)
			}
			if again := mcpFunctionName(tt.server, tt.tool); again != got {
				t.Errorf("mcpFunctionName is not stable: %q then %q", got, again)
			}
		})
	}
	// Names that fold or cut alike stay apart.
	seen := map[string]string{}
	for _, tool := range []string{"get-sum", "get_sum", "Get-Sum", "GET_SUM", "get_sum_", long, long[:127] + "z", long[:100]} {
		name := mcpFunctionName(0, tool)
		if other, ok := seen[name]; ok {
			t.Errorf("%q and %q both map to %q", other, tool, name)
		}
		seen[name] = tool
	}
}

// The turn JSON takes MCP tool names of the model APIs' rule, and host
// tool and server names of the sealed rule only.
func TestTurnMCPToolNameRule(t *testing.T) {
	decl := func(name string) string {
		return `{"name":"` + name + `","description":"d","parameters":{"type":"object"}}`
	}
	tests := []struct {
		name, tools, mcp string
		ok               bool
	}{
		{"mcp-dash-and-capitals", `[]`, `[{"server":"everything","tools":[` + decl("get-sum") + `,` + decl("getWeather") + `]}]`, true},
		{"mcp-128", `[]`, `[{"server":"s","tools":[` + decl(strings.Repeat("T", 128)) + `]}]`, true},
		{"mcp-129", `[]`, `[{"server":"s","tools":[` + decl(strings.Repeat("T", 129)) + `]}]`, false},
		{"mcp-dot", `[]`, `[{"server":"s","tools":[` + decl("get.sum") + `]}]`, false},
		{"mcp-server-capitals", `[]`, `[{"server":"Everything","tools":[` + decl("x") + `]}]`, false},
		{"host-tool-dash", `[` + decl("get-sum") + `]`, `[]`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := toolSpecsAndServers(t, tt.tools, tt.mcp)
			if ok != tt.ok {
				t.Fatalf("parsed = %v (%v); want ok %v", ok, got, tt.ok)
			}
		})
	}
}

func toolSpecsAndServers(t *testing.T, tools, mcp string) ([]wire.MCPServerTools, bool) {
	t.Helper()
	if _, ok := toolSpecs([]byte(tools), rtsandbox.ValidToolName); !ok {
		return nil, false
	}
	servers, ok := mcpServers([]byte(mcp), rtsandbox.ValidToolName)
	if ok && len(servers) > 0 && len(servers[0].Tools) == 0 {
		t.Fatal("no tools parsed")
	}
	return servers, ok
}
