package sandbox

import (
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
)

// WorkerTools returns what the worker must be told about a broker
// configuration: each host tool's declaration and each MCP server's name
// and tools. URLs, credentials and implementations stay out.
func WorkerTools(cfg broker.Config) ([]rtsandbox.ToolSpec, []rtsandbox.MCPServerTools) {
	tools := make([]rtsandbox.ToolSpec, 0, len(cfg.Tools))
	for _, t := range cfg.Tools {
		tools = append(tools, t.Spec)
	}
	mcp := make([]rtsandbox.MCPServerTools, 0, len(cfg.MCP))
	for _, m := range cfg.MCP {
		mcp = append(mcp, rtsandbox.MCPServerTools{Server: m.Name, Tools: m.Tools})
	}
	return tools, mcp
}
