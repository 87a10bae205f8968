package host

import (
	"context"
	"encoding/json"
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
// (modelapi.CheckSchema) like an operator's, after dropDialect; a name the
// server does not list is an error naming it. The broker checks and compiles every schema
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
		got.Parameters = dropDialect(got.Parameters)
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

// dialects are the JSON Schema meta-schemas a server's inputSchema may name
// in its top-level $schema. The local rule allows only "#" fragments there
// (a guest's /model tools get the same rule, and these schemas reach the
// model as the worker's tools), yet the official TypeScript SDK names
// draft-07 on every tool it generates. The host drops such a top-level
// $schema; the schema is then read in the 2020-12 dialect, as the broker's
// validator and the model read every other schema. A schema that meant
// something else under draft-07 (tuple items, say) fails to compile and
// stops the startup; any other $schema stays and is refused.
var dialects = map[string]bool{
	"http://json-schema.org/draft-07/schema#":      true,
	"http://json-schema.org/draft-07/schema":       true,
	"https://json-schema.org/draft/2019-09/schema": true,
	"https://json-schema.org/draft/2020-12/schema": true,
}

// dropDialect removes a top-level $schema naming one of dialects.
func dropDialect(params json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage // a map on purpose: a server's JSON schema, whose keys are not ours; only $schema is read
	if json.Unmarshal(params, &obj) != nil {
		return params
	}
	var dialect string
	if json.Unmarshal(obj["$schema"], &dialect) != nil || !dialects[dialect] {
		return params
	}
	delete(obj, "$schema")
	out, err := json.Marshal(obj)
	if err != nil {
		return params
	}
	return out
}
