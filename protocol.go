package rtsandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
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

// Model APIs a host's model may speak (config model.api); the turn JSON
// names it so the worker picks its client (ModelAPIOpenAI is the default
// when the field is empty).
const (
	ModelAPIOpenAI    = "openai"
	ModelAPIAnthropic = "anthropic"
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
	Type     string   `json:"type"`
	Function ToolSpec `json:"function"`
}

// FunctionType is the only tool and tool-call type the protocol allows.
const FunctionType = "function"

// Limits of the protocol. Lengths are UTF-16 code units (JS .length) like
// the reference's; sizes are bytes. State limits are in state.go.
const (
	// MaxTextLen bounds a guest message's text (§1 step 4, §5.3).
	MaxTextLen = 32000
	// MaxSpeakerField bounds a speaker's id, name and principal id (§5.3).
	MaxSpeakerField = 256
	// MaxReplyText bounds the reply text in the worker's stdout (§3.3) and
	// the model's final answer (§4.4 step 5).
	MaxReplyText = 100000
	// MaxToolCallIDLen bounds a tool-call id (§0.1).
	MaxToolCallIDLen = 128
	// MaxToolNameLen bounds a host tool, MCP server or MCP tool name (§0.1).
	MaxToolNameLen = 48
	// MaxFunctionName bounds a model-facing function name (§0.1).
	MaxFunctionName = 64
	// MaxToolCallsPerMessage bounds the tool calls of one assistant
	// message: the worker refuses more from the model (§4.4 step 6) and
	// the broker refuses more in a /model request (§2.4).
	MaxToolCallsPerMessage = 8
	// MaxModelMessages bounds the messages of a chat-completions /model
	// request: the broker refuses more (§2.4), so the worker drops its
	// oldest context to stay within it, as it does for the body size.
	MaxModelMessages = 128
	// MaxAnthropicModelMessages bounds the messages of an Anthropic
	// Messages request the same way (the worker counts its chat messages,
	// never fewer than the Messages request it sends).
	MaxAnthropicModelMessages = 2000

	// DefaultMaxCalls is the per-turn broker call budget (model, host
	// tools and MCP together), settable in 1..MaxCallsLimit (§2.10).
	DefaultMaxCalls = 48
	MaxCallsLimit   = 1000
	// DefaultMaxTokens is the max_tokens the broker sends upstream,
	// settable in 1..MaxOutputTokensUL (§2.3, §2.10).
	DefaultMaxTokens  = 4096
	MaxOutputTokensUL = 32768

	// MaxBrokerRequest bounds a broker request body (§2.2 #11, §2.10).
	MaxBrokerRequest = 256 << 10
	// MaxBrokerResponse bounds a broker answer as the worker reads it
	// (§4.2) and an upstream answer as the broker reads it (§2.10).
	MaxBrokerResponse = 1 << 20
	// MaxToolResult bounds the JSON {"text": …} of a host-tool result
	// (§2.3, §2.10).
	MaxToolResult = 1 << 20
	// BrokerCallTimeout is the broker's per-call deadline, also bounded by
	// the turn's (§2.10).
	BrokerCallTimeout = 60 * time.Second
	// StreamSilence is the silence limit of a streamed broker answer
	// (session spec §2.1): once the upstream's head arrived, a gap of this
	// long with no piece passed on cuts the answer off. A streamed call
	// stays bounded by BrokerCallTimeout and the turn too.
	StreamSilence = 120 * time.Second
	// MaxStreamedAnswer caps the upstream bytes of one model answer
	// passed on by the broker (session spec §2.4 step 18, §2.8): a
	// streamed answer, an error body, or a non-streamed Anthropic answer.
	MaxStreamedAnswer = 50 << 20
	// BrokerClientTimeout is the worker's per-call timeout (§4.2): a
	// little over BrokerCallTimeout, so the broker's answer wins.
	BrokerClientTimeout = 65 * time.Second
)

// Request decoding on the host (issue 21: four 96 MiB bodies of empty
// arrays took a host to 7 GB). A request body being read and decoded
// holds up to DecodeFactor times its size. Measured at the peak: a
// rebuilt 64 MiB text held 5 times it (the body, the decoded text, and
// encoding/json's buffer doubling as it encodes the request, then its
// copy), a tool_use input 4, a refused flood about 1 (the body: the rules
// count before they keep, and what they keep is bounded by
// jsontree.NodesFor). All the bodies being decoded at once, whatever
// their channels, hold at most DecodeBudget of the host's memory limit: a
// body waits for its share (broker.Intake).
const DecodeFactor = 5

// DecodeBudget is the share of a host's memory limit (bytes) that request
// decoding may hold at once: half of it. The other half is for the rest
// of the host: answers being relayed and scanned, surfaces, the database.
func DecodeBudget(memoryLimit int64) int64 { return memoryLimit / 2 }

// MaxDecodedBody is the largest request body a host of memoryLimit bytes
// can decode within DecodeBudget: the bound of every configurable body
// limit of session mode.
func MaxDecodedBody(memoryLimit int64) int64 { return DecodeBudget(memoryLimit) / DecodeFactor }

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
func ParseReply(stdout []byte) (Reply, error) {
	// A map tells a missing or null field from a typed one, and keeps the
	// last of duplicate keys as JS JSON.parse does.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(stdout, &fields); err != nil {
		return Reply{}, fmt.Errorf("%w: %v", ErrInvalidReply, err)
	}
	if fields == nil { // the JSON value null
		return Reply{}, fmt.Errorf("%w: not an object", ErrInvalidReply)
	}
	var r Reply
	okRaw := bytes.TrimSpace(fields["ok"])
	switch string(okRaw) {
	case "true":
		r.OK = true
	case "false":
	default:
		return Reply{}, fmt.Errorf("%w: ok is not a boolean", ErrInvalidReply)
	}
	textRaw := bytes.TrimSpace(fields["text"])
	if len(textRaw) == 0 || textRaw[0] != '"' || json.Unmarshal(textRaw, &r.Text) != nil {
		return Reply{}, fmt.Errorf("%w: text is not a string", ErrInvalidReply)
	}
	if n := UTF16Len(r.Text); n > MaxReplyText {
		return Reply{}, fmt.Errorf("%w: text has %d UTF-16 units", ErrInvalidReply, n)
	}
	if raw, ok := fields["state"]; ok {
		st, err := parseState(raw)
		if err != nil {
			return Reply{}, fmt.Errorf("%w: state: %v", ErrInvalidReply, err)
		}
		r.State = st
	}
	return r, nil
}

// parseState decodes the state object: both lists present and arrays, every
// field of every item a string.
func parseState(raw json.RawMessage) (*ChannelState, error) {
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
	st := &ChannelState{
		Memory:  make([]MemoryEntry, len(fields.Memory)),
		History: make([]HistoryEntry, len(fields.History)),
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
