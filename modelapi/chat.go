package modelapi

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Limits of the /model rule (docs/protocol.md, "Model calls").
const (
	MaxMessages  = rtsandbox.MaxModelMessages       // entries in messages
	MaxToolCalls = rtsandbox.MaxToolCallsPerMessage // entries in one assistant message's tool_calls
	MaxTools     = 128                              // entries in tools
)

// ChatInput is a normalised chat-completions request: only what the guest
// may choose. HasTools reports that the guest sent a tools key; an empty
// tools array then stays an empty array upstream, while an absent key stays
// absent.
type ChatInput struct {
	Messages []Message
	Tools    []Tool
	HasTools bool
}

// Message is one rebuilt chat message. ToolCalls is nil when the guest sent
// no calls or an empty tool_calls array: an empty list is dropped rather
// than forwarded, because it means the same as no list and OpenAI refuses
// tool_calls arrays with fewer than one entry.
//
// Parts, set only under ChatOptions.ImageParts and only on a user message,
// is the content when the guest sent an array of parts (Content is then
// ""); MarshalJSON writes it in content's place.
type Message struct {
	Role       string        `json:"role"`
	Content    string        `json:"content"`
	Parts      []ContentPart `json:"-"`
	ToolCalls  []ToolCall    `json:"tool_calls,omitempty"`
	ToolCallID string        `json:"tool_call_id,omitempty"`
}

// ToolCall is one rebuilt assistant tool call; Type is always "function".
// The wire shape is the protocol's (root package), shared with the worker.
type ToolCall = wire.ToolCall

// FunctionCall names the called function and carries its arguments as the
// model wrote them (a string, not parsed).
type FunctionCall = wire.FunctionCall

// Tool is one rebuilt tool declaration; Type is always "function".
type Tool = wire.ChatTool

// Function declares a callable function. In a rebuilt Tool, Parameters is
// the guest's schema as received, compacted but otherwise byte for byte,
// unknown keywords included; it has passed [CheckSchema].
type Function = rtsandbox.ToolSpec

var (
	// chatMessageKeys are the only keys a message may carry; any other
	// key (name, refusal, audio, file_id, …) could smuggle a provider
	// feature.
	chatMessageKeys = []string{"role", "content", "tool_calls", "tool_call_id"}
	// roles excludes developer and function on purpose: the spec admits
	// exactly these four.
	roles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true}
	// The members of a tool call, its function, a tool and its function
	// that the rule reads; others are dropped.
	toolCallFields = []string{"type", "id", "function"}
	callFnFields   = []string{"name", "arguments"}
	toolFields     = []string{"type", "function"}
	toolFnFields   = []string{"name", "description", "parameters"}
)

// Indexes into chatMessageKeys.
const (
	chatRole = iota
	chatContent
	chatToolCalls
	chatToolCallID
)

// NormalizeChat validates a decoded /model request object (top-level keys as
// raw JSON, so that absent and null differ) and rebuilds it. Top-level keys
// other than messages and tools are ignored. Any violation rejects the whole
// request with an error wrapping rtsandbox.ErrRefused (the message may say
// which rule, for the operator log only).
func NormalizeChat(body map[string]json.RawMessage) (*ChatInput, error) {
	return NormalizeChatWith(body, ChatOptions{})
}

// NormalizeChatWith is NormalizeChat under opts: the session broker admits
// image parts in user messages (ChatOptions.ImageParts). The body is read
// under opts.Budget: over its node count the request is refused, and once
// its context ends the error wraps jsontree.ErrStopped instead of
// rtsandbox.ErrRefused (the call is over).
func NormalizeChatWith(body map[string]json.RawMessage, opts ChatOptions) (*ChatInput, error) {
	b := budgetFor(opts.Budget, body)
	in, err := normalizeChat(b, body, opts)
	if err := budgetError(b); err != nil {
		return nil, err
	}
	return in, err
}

// body is a map on purpose: the guest's request, split and read under the
// budget (the seal issue's memory bound), rebuilt member by member.
func normalizeChat(b *jsontree.Budget, body map[string]json.RawMessage, opts ChatOptions) (*ChatInput, error) {
	msgs, err := normalizeChatMessages(b, body["messages"], opts)
	if err != nil {
		return nil, refused(err)
	}
	in := &ChatInput{Messages: msgs}
	if raw, ok := body["tools"]; ok {
		// Present even as null: null is refused below, not treated as absent.
		if in.Tools, err = normalizeTools(b, raw); err != nil {
			return nil, refused(err)
		}
		in.HasTools = true
	}
	return in, nil
}

func normalizeChatMessages(b *jsontree.Budget, raw json.RawMessage, opts ChatOptions) ([]Message, error) {
	items, n, ok := b.Array(raw, MaxMessages)
	if !ok {
		return nil, errors.New("messages is not an array")
	}
	if n > MaxMessages {
		return nil, fmt.Errorf("more than %d messages", MaxMessages)
	}
	msgs := make([]Message, 0, len(items)) // never nil: [] stays [] upstream
	var tally *imageTally
	if opts.ImageParts {
		tally = &imageTally{}
	}
	for i, item := range items {
		m, err := normalizeMessage(b, item, tally)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// normalizeMessage rebuilds one message; tally is nil unless image parts
// are admitted, and then counts the request's images.
func normalizeMessage(b *jsontree.Budget, raw json.RawMessage, tally *imageTally) (Message, error) {
	var obj [4]json.RawMessage
	if kind(raw) != '{' {
		return Message{}, errors.New("not an object")
	}
	other, hasOther, ok := b.Fields(raw, chatMessageKeys, obj[:])
	if !ok {
		return Message{}, errors.New("not an object")
	}
	if hasOther {
		return Message{}, notAllowed(other)
	}
	role, ok := asString(b, obj[chatRole])
	if !ok || !roles[role] {
		return Message{}, errors.New("role is not system, user, assistant or tool")
	}
	m := Message{Role: role}
	var err error
	content, ok := asString(b, obj[chatContent])
	switch {
	case ok:
		m.Content = content
	case tally != nil && role == "user" && kind(obj[chatContent]) == '[':
		if m.Parts, err = contentParts(b, obj[chatContent], tally); err != nil {
			return Message{}, err
		}
	default:
		// Refuses null and content-part arrays (but a session user
		// message's text and data-URL images), and with them remote
		// image_url, file, input_audio and every other multimodal part.
		return Message{}, errors.New("content is not a string")
	}
	if raw := obj[chatToolCalls]; raw != nil {
		if m.ToolCalls, err = normalizeToolCalls(b, role, raw); err != nil {
			return Message{}, err
		}
	}
	m.ToolCallID, err = normalizeToolCallID(b, role, obj[chatToolCallID])
	return m, err
}

// notAllowed refuses key, the first in sorted order that a rule does not
// list (Budget.Fields finds it), so that the log is stable.
func notAllowed(key string) error {
	return fmt.Errorf("key %.64q not allowed", key)
}

func normalizeToolCalls(b *jsontree.Budget, role string, raw json.RawMessage) ([]ToolCall, error) {
	if role != "assistant" {
		return nil, errors.New("tool_calls on a non-assistant message")
	}
	items, n, ok := b.Array(raw, MaxToolCalls)
	if !ok {
		return nil, errors.New("tool_calls is not an array")
	}
	if n > MaxToolCalls {
		return nil, fmt.Errorf("more than %d tool calls", MaxToolCalls)
	}
	var calls []ToolCall // stays nil for [], see Message
	for i, item := range items {
		c, err := normalizeToolCall(b, item)
		if err != nil {
			return nil, fmt.Errorf("tool_calls[%d]: %w", i, err)
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// normalizeToolCall rebuilds {id, type, function: {name, arguments}};
// every other field, such as function.url, is dropped.
func normalizeToolCall(b *jsontree.Budget, raw json.RawMessage) (ToolCall, error) {
	var obj, fn [3]json.RawMessage
	if !fields(b, raw, toolCallFields, obj[:]) {
		return ToolCall{}, errors.New("not an object")
	}
	if typ, _ := asString(b, obj[0]); typ != wire.FunctionType {
		return ToolCall{}, errors.New("type is not function")
	}
	id, ok := asString(b, obj[1])
	if !ok || !rtsandbox.ValidToolCallID(id) {
		return ToolCall{}, errors.New("id is not 1..128 UTF-16 units")
	}
	if !fields(b, obj[2], callFnFields, fn[:2]) {
		return ToolCall{}, errors.New("function is not an object")
	}
	name, ok := asString(b, fn[0])
	if !ok || !rtsandbox.ValidFunctionName(name) {
		return ToolCall{}, errors.New("function.name is not a valid function name")
	}
	args, ok := asString(b, fn[1])
	if !ok {
		return ToolCall{}, errors.New("function.arguments is not a string")
	}
	return ToolCall{ID: id, Type: wire.FunctionType, Function: FunctionCall{Name: name, Arguments: args}}, nil
}

// normalizeToolCallID returns the id a tool message must carry. On any other
// role the key must be absent (raw nil): even null is refused.
func normalizeToolCallID(b *jsontree.Budget, role string, raw json.RawMessage) (string, error) {
	if role != "tool" {
		if raw != nil {
			return "", errors.New("tool_call_id on a non-tool message")
		}
		return "", nil
	}
	id, ok := asString(b, raw)
	if !ok || !rtsandbox.ValidToolCallID(id) {
		return "", errors.New("tool message without a valid tool_call_id")
	}
	return id, nil
}

func normalizeTools(b *jsontree.Budget, raw json.RawMessage) ([]Tool, error) {
	items, n, ok := b.Array(raw, MaxTools)
	if !ok {
		return nil, errors.New("tools is not an array")
	}
	if n > MaxTools {
		return nil, fmt.Errorf("more than %d tools", MaxTools)
	}
	tools := make([]Tool, 0, len(items)) // never nil: [] stays [] upstream
	seen := make(map[string]bool, len(items))
	for i, item := range items {
		t, err := normalizeTool(b, item)
		if err != nil {
			return nil, fmt.Errorf("tools[%d]: %w", i, err)
		}
		if seen[t.Function.Name] {
			return nil, fmt.Errorf("tools[%d]: duplicate function name", i)
		}
		seen[t.Function.Name] = true
		tools = append(tools, t)
	}
	return tools, nil
}

// normalizeTool rebuilds {type, function: {name, description, parameters}}.
// Native provider tools (web_search, file_search, …) fail the type check.
func normalizeTool(b *jsontree.Budget, raw json.RawMessage) (Tool, error) {
	var obj [2]json.RawMessage
	var fn [3]json.RawMessage
	if !fields(b, raw, toolFields, obj[:]) {
		return Tool{}, errors.New("not an object")
	}
	if typ, _ := asString(b, obj[0]); typ != wire.FunctionType {
		return Tool{}, errors.New("type is not function")
	}
	if !fields(b, obj[1], toolFnFields, fn[:]) {
		return Tool{}, errors.New("function is not an object")
	}
	name, ok := asString(b, fn[0])
	if !ok || !rtsandbox.ValidFunctionName(name) {
		return Tool{}, errors.New("function.name is not a valid function name")
	}
	desc, ok := asString(b, fn[1])
	if !ok {
		return Tool{}, errors.New("function.description is not a string")
	}
	params, err := normalizeParameters(b, fn[2])
	if err != nil {
		return Tool{}, fmt.Errorf("function.parameters: %w", err)
	}
	return Tool{Type: wire.FunctionType, Function: Function{Name: name, Description: desc, Parameters: params}}, nil
}

// normalizeParameters checks the schema and returns a compacted copy, so the
// result does not alias the caller's buffer. Compacting only drops
// insignificant whitespace; numbers and strings stay as written.
func normalizeParameters(b *jsontree.Budget, raw json.RawMessage) (json.RawMessage, error) {
	if kind(raw) != '{' {
		return nil, errors.New("not an object")
	}
	if err := checkSchema(b, raw); err != nil {
		return nil, err
	}
	out, ok := b.Compact(make([]byte, 0, len(raw)), raw)
	if !ok {
		return nil, errors.New("not valid JSON")
	}
	return out, nil
}
