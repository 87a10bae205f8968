package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// The worker↔broker protocol, in one place. The in-container worker and
// the host broker both build on these declarations, so a route, a call
// shape or a limit cannot drift between the two sides. docs/protocol.md
// describes the protocol.

// Where the worker finds the broker and what it presents (docs/protocol.md, "Where the worker finds the broker").
const (
	// BrokerSocketPath is where the broker socket appears in the container.
	BrokerSocketPath = "/broker/broker.sock"
	// ReplyEnd is the byte a sealed worker writes after its reply on
	// success, and only then: the host takes the reply at it without
	// waiting for the exit (docs/sealed-turn.md, "The early reply"). A
	// JSON object as the worker encodes it holds no raw newline, so the
	// first one ends it.
	ReplyEnd = '\n'

	// WorkspacePath is the container's scratch workspace: in the sealed
	// mode a size-limited tmpfs that dies with the container.
	WorkspacePath = "/workspace"
	// DummyKey is the placeholder credential the sealed worker sends to
	// the broker, as "Authorization: Bearer sandbox-dummy-key". The real
	// credential never enters the container.
	DummyKey = "sandbox-dummy-key"
	// BrokerHost is the only Host header value the broker accepts.
	BrokerHost = "broker"
	// BrokerTokenHeader carries the turn's token on every request to the
	// broker's network listener (docs/broker.md, "The network listener");
	// the listener removes it before the turn's own header rules.
	BrokerTokenHeader = "Rtsandbox-Token"
)

// Broker routes (docs/broker.md, "Routes"). Every call is a POST with a JSON object body; the
// broker matches the escaped path exactly, so a name is never decoded.
const (
	// RouteModel takes a chat-completions request (docs/protocol.md, "Model calls") and answers with
	// the upstream's JSON.
	RouteModel = "/model"
	// RouteToolPrefix + a host tool's name runs that tool with the body as
	// its input and answers {"text": …} (ToolResult).
	RouteToolPrefix = "/tools/"
	// RouteMCPPrefix + an MCP server's name makes one MCPCall of a
	// declared tool (the broker is the server's MCP client) and answers
	// with one JSON-RPC answer, {"jsonrpc":"2.0","id":1,"result"|"error"}.
	RouteMCPPrefix = "/mcp/"
	// RouteAnthropicMessages takes an Anthropic Messages request
	// (docs/protocol.md, "Model calls"), streamed or not, when the host's model speaks that API;
	// the answer is the upstream's, in the Anthropic wire shape.
	RouteAnthropicMessages = "/anthropic/v1/messages"
	// RouteAnthropicCountTokens is the count_tokens variant (docs/protocol.md, "Model calls").
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

// ToolResult is the broker's answer to a host-tool call (docs/broker.md, "Routes"); its JSON is
// at most MaxToolResult bytes.
type ToolResult struct {
	Text string `json:"text"`
}

// MCP JSON-RPC constants (docs/broker.md, "Routes").
const (
	MCPMethodCall = "tools/call"
	MCPJSONRPC    = "2.0"
)

// MCPCall is the one MCP request the protocol knows (docs/broker.md, "Routes"; docs/protocol.md, "The sealed turn"): a
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
// broker forwards (docs/protocol.md, "Model calls"; docs/protocol.md, "The sealed turn"). A message is declared twice on
// purpose: the worker's (ChatMessage) and the broker's rebuilt one
// (modelapi.Message) keep different key orders, each the reference's; the
// parts inside a message are declared here once.

// ChatMessage is a chat-completions message as the worker writes it.
// Field order gives the reference's key order for every role: {role,
// content}, {role, content, tool_calls} and {role, tool_call_id, content}.
// PrivateTo is never on the wire: the session worker marks a tool result
// with the only reader who may see it (a host tool's privateTo,
// docs/session.md, "Privacy projection"), keeps the mark beside the message in its conversation file
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

// ParseReply validates a worker's stdout (docs/sealed-turn.md, "The container"; docs/protocol.md, "The sealed reply"): a JSON object with a
// boolean "ok" and a string "text" of at most MaxReplyText UTF-16 units, and
// an optional "state" object {"memory": […], "history": […]} decoded by
// type only (the runtime's state store checks its limits before it keeps
// anything). Other fields are dropped. Errors wrap ErrInvalidReply. The
// caller bounds stdout and checks the worker's success first: a reply
// only counts when the worker ended it with ReplyEnd or exited with 0.
//
// The members are read by fill (wirefield.go): exact names, the last of
// repeated members, as JS JSON.parse does, and null as no value.
func ParseReply(stdout []byte) (rtsandbox.Reply, error) {
	obj, ok := jsonMembers(stdout)
	if !ok {
		return rtsandbox.Reply{}, fmt.Errorf("%w: not a JSON object", ErrInvalidReply)
	}
	var w replyWire
	if name, err := badMember(obj, &w); err != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: %s", ErrInvalidReply, replyMemberErrors[name])
	}
	r := rtsandbox.Reply{OK: bool(w.OK), Text: string(w.Text)}
	if w.State != nil {
		r.State = &rtsandbox.ChannelState{Memory: w.State.Memory, History: w.State.History}
	}
	if err := r.Validate(); err != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: %v", ErrInvalidReply, err)
	}
	return r, nil
}

// replyWire is a worker's reply as ParseReply reads it.
type replyWire struct {
	OK    Bool       `json:"ok"`
	Text  String     `json:"text"`
	State *stateWire `json:"state,omitempty"`
}

// replyMemberErrors say, for the operator log, which member of a reply
// is missing or of the wrong type.
var replyMemberErrors = map[string]string{
	"ok":    "ok is not a boolean",
	"text":  "text is not a string",
	"state": "state is not an object with the arrays memory and history of string entries",
}

// stateWire is a reply's state: both lists present and arrays, every
// member of every entry a string. The lists are matched as encoding/json
// matches names (under case folding), as they always were; the entries'
// members exactly.
type stateWire struct {
	Memory  []rtsandbox.MemoryEntry
	History []rtsandbox.HistoryEntry
}

func (s *stateWire) UnmarshalJSON(b []byte) error {
	// The entries are read into their members in the one pass over the
	// lists, then filled by exact name: an entry decoded by its own
	// UnmarshalJSON would be scanned three times over.
	var lists struct {
		Memory  []map[string]json.RawMessage `json:"memory"`
		History []map[string]json.RawMessage `json:"history"`
	}
	if err := json.Unmarshal(b, &lists); err != nil {
		return err
	}
	if lists.Memory == nil || lists.History == nil {
		return errors.New("memory and history must be arrays")
	}
	s.Memory = make([]rtsandbox.MemoryEntry, len(lists.Memory))
	for i, obj := range lists.Memory {
		var e MemoryEntryWire
		if !fillFrom(obj, &e) { // a null entry is a nil map: its members are missing
			return fmt.Errorf("memory %d: %w", i, errWireType)
		}
		s.Memory[i] = e.Entry()
	}
	s.History = make([]rtsandbox.HistoryEntry, len(lists.History))
	for i, obj := range lists.History {
		var e HistoryEntryWire
		if !fillFrom(obj, &e) {
			return fmt.Errorf("history %d: %w", i, errWireType)
		}
		s.History[i] = e.Entry()
	}
	return nil
}

// MemoryEntryWire is one memory entry on the wire, in a reply's state or
// a turn's memory: scope, key and text, each a string, by exact name.
// Decoded alone (an element of a list json.Unmarshal reads), it is
// filled by Fill; the reply's state fills it from the members it already
// read.
type MemoryEntryWire struct {
	Scope String `json:"scope"`
	Key   String `json:"key"`
	Text  String `json:"text"`
}

func (e *MemoryEntryWire) UnmarshalJSON(b []byte) error {
	type plain MemoryEntryWire
	return Fill(b, (*plain)(e))
}

// Entry is e as the domain's entry.
func (e MemoryEntryWire) Entry() rtsandbox.MemoryEntry {
	return rtsandbox.MemoryEntry{Scope: string(e.Scope), Key: string(e.Key), Text: string(e.Text)}
}

// HistoryEntryWire is one history entry on the wire, in a reply's state
// or a turn's history: role and content, each a string, by exact name.
// Which roles are allowed is the reader's rule.
type HistoryEntryWire struct {
	Role    String `json:"role"`
	Content String `json:"content"`
}

func (e *HistoryEntryWire) UnmarshalJSON(b []byte) error {
	type plain HistoryEntryWire
	return Fill(b, (*plain)(e))
}

// Entry is e as the domain's entry.
func (e HistoryEntryWire) Entry() rtsandbox.HistoryEntry {
	return rtsandbox.HistoryEntry{Role: string(e.Role), Content: string(e.Content)}
}
