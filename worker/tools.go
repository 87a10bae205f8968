package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// refusedText is the tool result for any refused or failed call. It is
// deliberately uninformative: failure details stay out of the model context.
const refusedText = "Tool call refused or failed."

// invalidToolName is the function every unusable model call is renamed
// to, so the context keeps a well-formed assistant/tool pair.
const invalidToolName = "invalid_tool"

// toolInput is a tool call's parsed arguments: raw is the compacted JSON
// object, fields its members.
type toolInput struct {
	raw    json.RawMessage
	fields map[string]json.RawMessage // a map on purpose: a model's tool arguments, each tool reads its own
}

type function struct {
	spec rtsandbox.ToolSpec
	run  func(ctx context.Context, in toolInput) (string, error)
	// owned, when set, runs the tool instead of run and also names the
	// only reader its result is for ("" for everyone): the session
	// worker's host tools, whose answer may carry privateTo (docs/protocol.md, "Privacy").
	owned func(ctx context.Context, in toolInput) (text, privateTo string, err error)
}

// toolTable holds the model-facing functions in declaration order, which
// is also the order of the tools list sent to the model.
type toolTable struct {
	order []*function
	index map[string]*function
}

// add registers f. A repeated name replaces the earlier function but keeps
// its position, as a JS Map does in the reference.
func (t *toolTable) add(f *function) {
	if old, ok := t.index[f.spec.Name]; ok {
		*old = *f
		return
	}
	t.index[f.spec.Name] = f
	t.order = append(t.order, f)
}

func (t *toolTable) has(name string) bool { _, ok := t.index[name]; return ok }

func (t *toolTable) modelTools() []wire.ChatTool {
	out := make([]wire.ChatTool, len(t.order))
	for i, f := range t.order {
		out[i] = wire.ChatTool{Type: wire.FunctionType, Function: f.spec}
	}
	return out
}

// newToolTable starts a table with invalid_tool, which both modes have.
func newToolTable() *toolTable {
	t := &toolTable{index: map[string]*function{}}
	t.add(&function{
		spec: rtsandbox.ToolSpec{
			Name:        invalidToolName,
			Description: "Placeholder for a malformed or unavailable earlier tool call, which was refused. Call a declared tool instead.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		},
		run: func(context.Context, toolInput) (string, error) { return refusedText, nil },
	})
	return t
}

// newSealedTools builds the sealed turn's table: invalid_tool, the memory
// tools, host_<X> for each host tool and mcp_<N>_<Y> for each tool Y of
// MCP server N.
func newSealedTools(turn wire.Turn, mem *memory, b *broker) *toolTable {
	t := newToolTable()
	speakerID := turn.Speaker.ID
	for _, spec := range memoryTools {
		name := spec.Name
		t.add(&function{spec: spec, run: func(_ context.Context, in toolInput) (string, error) {
			return mem.call(name, in.fields, speakerID)
		}})
	}
	for _, spec := range turn.Tools {
		route := wire.ToolRoute(spec.Name)
		// The result is the broker's JSON answer ({"text":…}) as a string.
		t.add(hostFunction(spec, func(ctx context.Context, in toolInput) (string, error) {
			out, err := b.post(ctx, route, in.raw)
			return string(out), err
		}))
	}
	for n, server := range turn.MCP {
		route := wire.MCPRoute(server.Server)
		for _, spec := range server.Tools {
			// A single tools/call; the result is the whole JSON-RPC
			// response as a string.
			t.add(mcpFunction(n, spec, func(ctx context.Context, in toolInput) (string, error) {
				out, err := b.post(ctx, route, wire.NewMCPCall(spec.Name, in.raw))
				return string(out), err
			}))
		}
	}
	return t
}

// hostFunction is host tool spec as the model sees it, host_<name>, run by
// run.
func hostFunction(spec rtsandbox.ToolSpec, run func(context.Context, toolInput) (string, error)) *function {
	return &function{
		spec: rtsandbox.ToolSpec{Name: "host_" + spec.Name, Description: spec.Description, Parameters: spec.Parameters},
		run:  run,
	}
}

// mcpFunctionName is the model-facing name of the MCP tool named tool of
// the server at index n: mcp_<n>_<tool> when that is a valid function name
// (rtsandbox.ValidFunctionName, which every model API accepts), as for
// every name of the sealed rule. A name the rule refuses ("get-sum",
// "getWeather", or one too long for 64 bytes with its prefix: MCP tool
// names may have 128) is lowered, each '-' made '_', cut to fit, and
// followed by '_' and 8 hex digits of the SHA-256 of the name as the
// server spells it: names that lower or cut alike stay apart, and a tool
// keeps its name from turn to turn. The tools/call names the tool as the
// server spells it.
func mcpFunctionName(n int, tool string) string {
	prefix := "mcp_" + strconv.Itoa(n) + "_"
	if name := prefix + tool; rtsandbox.ValidFunctionName(name) {
		return name
	}
	sum := sha256.Sum256([]byte(tool))
	suffix := "_" + hex.EncodeToString(sum[:4])
	folded := strings.Map(func(r rune) rune {
		switch {
		case 'A' <= r && r <= 'Z':
			return r + ('a' - 'A')
		case r == '-':
			return '_'
		}
		return r
	}, tool)
	if room := maxFunctionName - len(prefix) - len(suffix); len(folded) > room {
		folded = folded[:room]
	}
	return prefix + folded + suffix
}

// maxFunctionName is the longest model-facing function name
// (rtsandbox.ValidFunctionName), within every model API's limit (64 for
// OpenAI, 128 for Anthropic).
const maxFunctionName = 64

// mcpFunction is tool spec of the n-th MCP server as the model sees it,
// mcpFunctionName(n, name), run by run.
func mcpFunction(n int, spec rtsandbox.ToolSpec, run func(context.Context, toolInput) (string, error)) *function {
	return &function{
		spec: rtsandbox.ToolSpec{
			Name:        mcpFunctionName(n, spec.Name),
			Description: spec.Description,
			Parameters:  spec.Parameters,
		},
		run: run,
	}
}
