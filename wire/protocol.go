package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// The worker↔broker protocol, in one place. The in-container worker and
// the host broker both build on these declarations, so a route, a call
// shape or a limit cannot drift between the two sides. Section numbers
// refer to the sealed-mode spec (spec/sealed.md).

// Where the worker finds the broker and what it presents (§0.1, §4.2).
const (
	// BrokerSocketPath is where the broker socket appears in the container.
	BrokerSocketPath = "/broker/broker.sock"
	// WorkspacePath is the container's scratch workspace: in the sealed
	// mode a size-limited tmpfs that dies with the container.
	WorkspacePath = "/workspace"
	// DummyKey is the placeholder credential the sealed worker sends to
	// the broker, as "Authorization: Bearer sandbox-dummy-key". The real
	// credential never enters the container.
	DummyKey = "sandbox-dummy-key"
	// BrokerHost is the only Host header value the broker accepts.
	BrokerHost = "broker"
)

// Broker routes (§2.3). Every call is a POST with a JSON object body; the
// broker matches the escaped path exactly, so a name is never decoded.
const (
	// RouteModel takes a chat-completions request (§2.4) and answers with
	// the upstream's JSON.
	RouteModel = "/model"
	// RouteToolPrefix + a host tool's name runs that tool with the body as
	// its input and answers {"text": …} (ToolResult).
	RouteToolPrefix = "/tools/"
	// RouteMCPPrefix + an MCP server's name makes one MCPCall of a
	// declared tool (the broker is the server's MCP client) and answers
	// with one JSON-RPC answer, {"jsonrpc":"2.0","id":1,"result"|"error"}.
	RouteMCPPrefix = "/mcp/"
	// RouteAnthropicMessages takes an Anthropic Messages request (session
	// spec §2.5), streamed or not, when the host's model speaks that API;
	// the answer is the upstream's, in the Anthropic wire shape.
	RouteAnthropicMessages = "/anthropic/v1/messages"
	// RouteAnthropicCountTokens is the count_tokens variant (§2.5).
	RouteAnthropicCountTokens = "/anthropic/v1/messages/count_tokens"
	// RouteOpenAIChat is RouteModel at the path the official OpenAI SDKs
	// post to under the base URL http://broker/openai/v1, when the host's
	// model speaks chat completions: the same request, rules and answer.
	// Like the Anthropic routes it accepts headers outside the allow-list
	// (an SDK's own) and never forwards them; the deny-list still holds.
	RouteOpenAIChat = "/openai/v1/chat/completions"
)

// ToolRoute is the broker route of the host tool name.
func ToolRoute(name string) string { return RouteToolPrefix + name }

// MCPRoute is the broker route of the MCP server name.
func MCPRoute(server string) string { return RouteMCPPrefix + server }

// ToolResult is the broker's answer to a host-tool call (§2.3); its JSON is
// at most MaxToolResult bytes.
type ToolResult struct {
	Text string `json:"text"`
}

// MCP JSON-RPC constants (§2.3).
const (
	MCPMethodCall = "tools/call"
	MCPJSONRPC    = "2.0"
)

// MCPCall is the one MCP request the protocol knows (§2.3, §4.3): a
// tools/call of one declared tool. The worker sends {"method", "params"};
// the broker drops every other field it sent and makes the call itself, as
// the server's MCP client, with its own ids and session (docs/broker.md).
// Field order is the wire key order.
type MCPCall struct {
	JSONRPC string        `json:"jsonrpc,omitempty"`
	ID      int           `json:"id,omitempty"`
	Method  string        `json:"method"`
	Params  MCPCallParams `json:"params"`
}

// MCPCallParams names the tool and carries its arguments object as
// received.
type MCPCallParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// NewMCPCall is the worker's tools/call of tool with args.
func NewMCPCall(tool string, args json.RawMessage) MCPCall {
	return MCPCall{Method: MCPMethodCall, Params: MCPCallParams{Name: tool, Arguments: args}}
}

// Chat-completions wire types the worker sends to RouteModel and the
// broker forwards (§2.4, §4.3–4.4). A message is declared twice on
// purpose: the worker's (ChatMessage) and the broker's rebuilt one
// (modelapi.Message) keep different key orders, each the reference's; the
// parts inside a message are declared here once.

// ChatMessage is a chat-completions message as the worker writes it.
// Field order gives the reference's key order for every role: {role,
// content}, {role, content, tool_calls} and {role, tool_call_id, content}.
// PrivateTo is never on the wire: the session worker marks a tool result
// with the only reader who may see it (a host tool's privateTo, session
// spec §5.4), keeps the mark beside the message in its conversation file
// and hides the result from every other reader's requests.
type ChatMessage struct {
	Role       string     `json:"role"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	PrivateTo  string     `json:"-"`
}

// ToolCall is one assistant tool call; Type is always "function".
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the called function and carries its arguments as the
// model wrote them: a JSON text in a string, not parsed.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatTool is one entry of a request's tools list; Type is always
// "function".
type ChatTool struct {
	Type     string             `json:"type"`
	Function rtsandbox.ToolSpec `json:"function"`
}

// FunctionType is the only tool and tool-call type the protocol allows.
const FunctionType = "function"

// ErrInvalidReply marks worker stdout that is not {ok: boolean, text:
// string} with text of at most MaxReplyText UTF-16 units and an optional
// well-typed state.
var ErrInvalidReply = errors.New("invalid sandbox reply")

// ParseReply validates a worker's stdout (§3.3, §3.5): a JSON object with a
// boolean "ok" and a string "text" of at most MaxReplyText UTF-16 units, and
// an optional "state" object {"memory": […], "history": […]} decoded by
// type only (the runtime's state store checks its limits before it keeps
// anything). Other fields are dropped. Errors wrap ErrInvalidReply. The
// caller bounds stdout and checks the exit code first: a reply only counts
// when the worker exited with 0.
func ParseReply(stdout []byte) (rtsandbox.Reply, error) {
	// A map tells a missing or null field from a typed one, and keeps the
	// last of duplicate keys as JS JSON.parse does.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(stdout, &fields); err != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: %v", ErrInvalidReply, err)
	}
	if fields == nil { // the JSON value null
		return rtsandbox.Reply{}, fmt.Errorf("%w: not an object", ErrInvalidReply)
	}
	var r rtsandbox.Reply
	okRaw := bytes.TrimSpace(fields["ok"])
	switch string(okRaw) {
	case "true":
		r.OK = true
	case "false":
	default:
		return rtsandbox.Reply{}, fmt.Errorf("%w: ok is not a boolean", ErrInvalidReply)
	}
	textRaw := bytes.TrimSpace(fields["text"])
	if len(textRaw) == 0 || textRaw[0] != '"' || json.Unmarshal(textRaw, &r.Text) != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: text is not a string", ErrInvalidReply)
	}
	if n := rtsandbox.UTF16Len(r.Text); n > rtsandbox.MaxReplyText {
		return rtsandbox.Reply{}, fmt.Errorf("%w: text has %d UTF-16 units", ErrInvalidReply, n)
	}
	if raw, ok := fields["state"]; ok {
		st, err := parseState(raw)
		if err != nil {
			return rtsandbox.Reply{}, fmt.Errorf("%w: state: %v", ErrInvalidReply, err)
		}
		r.State = st
	}
	return r, nil
}

// parseState decodes the state object: both lists present and arrays, every
// field of every item a string.
func parseState(raw json.RawMessage) (*rtsandbox.ChannelState, error) {
	var fields struct {
		Memory  []map[string]json.RawMessage `json:"memory"`
		History []map[string]json.RawMessage `json:"history"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	if fields.Memory == nil || fields.History == nil {
		return nil, errors.New("memory and history must be arrays")
	}
	st := &rtsandbox.ChannelState{
		Memory:  make([]rtsandbox.MemoryEntry, len(fields.Memory)),
		History: make([]rtsandbox.HistoryEntry, len(fields.History)),
	}
	for i, m := range fields.Memory {
		e := &st.Memory[i]
		if err := stringFields(m, map[string]*string{"scope": &e.Scope, "key": &e.Key, "text": &e.Text}); err != nil {
			return nil, fmt.Errorf("memory %d: %w", i, err)
		}
	}
	for i, h := range fields.History {
		e := &st.History[i]
		if err := stringFields(h, map[string]*string{"role": &e.Role, "content": &e.Content}); err != nil {
			return nil, fmt.Errorf("history %d: %w", i, err)
		}
	}
	return st, nil
}

// stringFields decodes the named fields of obj, each of which must be a
// JSON string.
func stringFields(obj map[string]json.RawMessage, dst map[string]*string) error {
	if obj == nil {
		return errors.New("not an object")
	}
	for name, p := range dst {
		raw := bytes.TrimSpace(obj[name])
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, p) != nil {
			return fmt.Errorf("%s is not a string", name)
		}
	}
	return nil
}
