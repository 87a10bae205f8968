package host

import (
	"context"
	"fmt"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// MCPListTimeout bounds the startup listing of one MCP server's tools.
const MCPListTimeout = 30 * time.Second

// startupBinding is the Binding a credential getter receives for the
// startup tool listing: no channel and no speaker, since no turn asked.
var startupBinding = rtsandbox.Binding{}

// mcpServers builds the broker's MCP servers from the config. A server
// whose tools are all declared in full is not contacted. One with a tool
// written as a bare name is listed once, now: that tool takes the server's
// description and inputSchema, which must pass the local schema rule
// (modelapi.CheckSchema) like an operator's; a name the server does not
// list is an error naming it. The broker checks and compiles every schema
// again when it is built.
func mcpServers(ctx context.Context, servers []config.MCPServer, getenv env, client *upstream.Client) ([]broker.MCPServer, error) {
	var out []broker.MCPServer
	for i, s := range servers {
		key := envKey(s.APIKeyEnv, getenv)
		tools, err := completeTools(ctx, i, s, key, client)
		if err != nil {
			return nil, err
		}
		out = append(out, broker.MCPServer{Name: s.Name, URL: s.URL, Tools: tools, APIKey: key})
	}
	return out, nil
}

type keyGetter = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error)

// completeTools returns s's tools in config order with every bare name
// completed from the server's list.
func completeTools(ctx context.Context, i int, s config.MCPServer, key keyGetter, client *upstream.Client) ([]rtsandbox.ToolSpec, error) {
	var listed map[string]rtsandbox.ToolSpec
	tools := make([]rtsandbox.ToolSpec, 0, len(s.Tools))
	for j, t := range s.Tools {
		if !config.NameOnly(t) {
			tools = append(tools, t)
			continue
		}
		if listed == nil {
			var err error
			if listed, err = listTools(ctx, s, key, client); err != nil {
				return nil, fmt.Errorf("mcp[%d] (%s): listing the server's tools: %w", i, s.Name, err)
			}
		}
		got, ok := listed[t.Name]
		if !ok {
			return nil, fmt.Errorf("mcp[%d].tools[%d]: the server %q lists no tool %q", i, j, s.Name, t.Name)
		}
		if err := modelapi.CheckSchema(got.Parameters); err != nil {
			return nil, fmt.Errorf("mcp[%d].tools[%d]: the inputSchema of %q from the server %q is refused: %w", i, j, t.Name, s.Name, err)
		}
		tools = append(tools, got)
	}
	return tools, nil
}

// listTools lists the server's tools by name, within MCPListTimeout.
func listTools(ctx context.Context, s config.MCPServer, key keyGetter, client *upstream.Client) (map[string]rtsandbox.ToolSpec, error) {
	ctx, cancel := context.WithTimeout(ctx, MCPListTimeout)
	defer cancel()
	var secret rtsandbox.Secret
	if key != nil {
		var err error
		if secret, err = key(ctx, startupBinding); err != nil {
			return nil, err
		}
	}
	specs, err := client.MCP(s.URL).ListTools(ctx, secret)
	if err != nil {
		return nil, err
	}
	out := make(map[string]rtsandbox.ToolSpec, len(specs))
	for _, t := range specs {
		out[t.Name] = t
	}
	return out, nil
}
