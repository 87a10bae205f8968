package wire

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// The memory tools (docs/protocol.md, "Memory tools"). Sealed mode runs them inside the
// worker on the turn's memory; session mode runs them on the host, bound
// to the turn's speaker (package memstore). Both sides parse a call here,
// so the input rules and the refusal texts are the same in both modes.

// Memory tool names.
const (
	MemorySet    = "memory_set"
	MemoryGet    = "memory_get"
	MemoryRemove = "memory_remove"
)

// Memory scopes as a tool call names them; the stored scope of a speaker
// entry is "speaker:<speaker id>" (MemoryCall.StoredScope).
const (
	ScopeSpeaker = "speaker"
	ScopeChannel = "channel"
)

// Results of a memory change.
const (
	MemorySaved     = "Saved."
	MemoryForgotten = "Forgotten."
)

// ErrMemoryRefused matches every MemoryRefusal under errors.Is.
var ErrMemoryRefused = fmt.Errorf("%w: memory tool refused", rtsandbox.ErrInvalid)

// MemoryRefusal is a memory tool call refused by a rule. Its text is
// fixed, names no data of the call, and may be shown to the model. It
// matches ErrMemoryRefused and ErrInvalid under errors.Is.
type MemoryRefusal string

func (r MemoryRefusal) Error() string { return "memory tool refused: " + string(r) }

// Is matches ErrMemoryRefused and ErrInvalid.
func (r MemoryRefusal) Is(target error) bool {
	return target == ErrMemoryRefused || target == rtsandbox.ErrInvalid
}

// Text is the refusal's fixed text.
func (r MemoryRefusal) Text() string { return string(r) }

// The refusals, in the order the rules are applied (docs/protocol.md, "Memory tools" call steps 1–7).
const (
	ErrMemoryScope    MemoryRefusal = "scope must be speaker or channel"
	ErrMemoryKey      MemoryRefusal = "key must be 1..128 characters"
	ErrMemoryNoKey    MemoryRefusal = "key is required"
	ErrMemoryText     MemoryRefusal = "text must be 1..2048 characters"
	ErrMemoryTool     MemoryRefusal = "unknown memory tool"
	ErrMemoryCapacity MemoryRefusal = "memory capacity reached"
)

// MemoryCall is one memory tool call, parsed and checked.
type MemoryCall struct {
	Tool   string // MemorySet, MemoryGet or MemoryRemove
	Scope  string // ScopeSpeaker or ScopeChannel
	Key    string // trimmed, 1..128 UTF-16 units when HasKey
	HasKey bool   // only memory_get may go without a key
	Text   string // memory_set: stored untrimmed
	Query  string // memory_get: lowercased, "" matches everything
}

// MemoryItem is one entry as memory_get lists it.
type MemoryItem struct {
	Key  string `json:"key"`
	Text string `json:"text"`
}

// ParseMemoryCall applies the input rules of docs/protocol.md, "Memory tools" in the reference's
// order: the scope first, for any tool name; a key that is a string is
// trimmed and must then be 1..128 units (a key of any other JSON type
// counts as absent); memory_get needs nothing more; the others need a key,
// the name must be memory_set or memory_remove, and a set's text must be
// a string that is not blank and at most 2,048 units. Extra members of
// input (a "speaker" naming someone else, say) are ignored: the speaker is
// always the turn's. Errors are MemoryRefusal values.
func ParseMemoryCall(tool string, input map[string]json.RawMessage) (MemoryCall, error) {
	var w memoryInputWire
	_ = FillFrom(input, &w) // cannot fail: every member is an optional OptString
	c := MemoryCall{Tool: tool, Scope: w.Scope.Value, HasKey: w.Key.Set, Key: rtsandbox.TrimJS(w.Key.Value)}
	switch tool {
	case MemoryGet:
		c.Query = strings.ToLower(w.Query.Value)
	case MemorySet:
		c.Text = w.Text.Value
	}
	if err := c.Validate(); err != nil {
		return MemoryCall{}, err
	}
	return c, nil
}

// memoryInputWire is a memory tool's input (docs/protocol.md, "Memory tools"): every member a string
// or absent, any other value counting as absent; the rest is dropped.
type memoryInputWire struct {
	Scope OptString `json:"scope,omitempty"`
	Key   OptString `json:"key,omitempty"`
	Text  OptString `json:"text,omitempty"`
	Query OptString `json:"query,omitempty"`
}

// Validate applies the input rules of docs/protocol.md, "Memory tools" to a call in the reference's
// order (ParseMemoryCall): the scope; the key, trimmed, when there is
// one; for memory_get nothing more; else a key, a known tool, and for
// memory_set a text that is not blank and at most MaxMemoryText units.
func (c MemoryCall) Validate() error {
	if c.Scope != ScopeSpeaker && c.Scope != ScopeChannel {
		return ErrMemoryScope
	}
	if n := rtsandbox.UTF16Len(c.Key); c.HasKey && (n < 1 || n > rtsandbox.MaxMemoryKey) {
		return ErrMemoryKey
	}
	switch {
	case c.Tool == MemoryGet:
		return nil
	case !c.HasKey:
		return ErrMemoryNoKey
	case c.Tool == MemoryRemove:
		return nil
	case c.Tool != MemorySet:
		return ErrMemoryTool
	case rtsandbox.TrimJS(c.Text) == "" || rtsandbox.UTF16Len(c.Text) > rtsandbox.MaxMemoryText:
		return ErrMemoryText
	}
	return nil
}

// DecodeMemoryCall is ParseMemoryCall on a tool input that must be one
// JSON object (the body member "input" of a host tool call).
func DecodeMemoryCall(tool string, input json.RawMessage) (MemoryCall, error) {
	var fields map[string]json.RawMessage // read by ParseMemoryCall, whose callers hold a model's tool arguments
	if err := decodeObjectStrict(input, &fields); err != nil {
		return MemoryCall{}, ErrMemoryScope // no object, so no scope: the first rule
	}
	return ParseMemoryCall(tool, fields)
}

// StoredScope is the scope the call's entries are stored under: "channel",
// or "speaker:<speakerID>" with the turn's speaker, never one the input
// names. The id is data, never a path.
func (c MemoryCall) StoredScope(speakerID string) string {
	if c.Scope == ScopeChannel {
		return ScopeChannel
	}
	return ScopeSpeaker + ":" + speakerID
}

// Select lists what memory_get answers: the entries of scope, in stored
// order, that match the key when one was given and contain the query
// case-insensitively in "<key> <text>". Never nil, so it encodes as [].
func (c MemoryCall) Select(entries []rtsandbox.MemoryEntry, scope string) []MemoryItem {
	out := []MemoryItem{}
	for _, e := range entries {
		if c.Matches(e, scope) {
			out = append(out, MemoryItem{Key: e.Key, Text: e.Text})
		}
	}
	return out
}

// Matches reports whether memory_get lists e (see Select).
func (c MemoryCall) Matches(e rtsandbox.MemoryEntry, scope string) bool {
	if e.Scope != scope || (c.HasKey && e.Key != c.Key) {
		return false
	}
	return strings.Contains(strings.ToLower(e.Key+" "+e.Text), c.Query)
}

// Apply returns the entries after a memory_set or memory_remove, as a new
// slice, and the call's result text: any entry of (scope, key) is dropped
// and a set appends its entry, so an update moves to the end; removing
// nothing still succeeds. The caller checks capacity (MaxMemoryEntries,
// MaxMemoryBytes) on the result before it keeps it, and answers
// ErrMemoryCapacity when the result breaks it.
func (c MemoryCall) Apply(entries []rtsandbox.MemoryEntry, scope string) ([]rtsandbox.MemoryEntry, string) {
	next := make([]rtsandbox.MemoryEntry, 0, len(entries)+1)
	for _, e := range entries {
		if e.Scope != scope || e.Key != c.Key {
			next = append(next, e)
		}
	}
	if c.Tool != MemorySet {
		return next, MemoryForgotten
	}
	return append(next, rtsandbox.MemoryEntry{Scope: scope, Key: c.Key, Text: c.Text}), MemorySaved
}

// MemoryToolSpecs declares the memory tools (docs/protocol.md, "Memory tools": objects without extra
// properties, scope an enum of speaker and channel); a new slice on every
// call.
func MemoryToolSpecs() []rtsandbox.ToolSpec {
	const scope = `"scope":{"type":"string","enum":["speaker","channel"]}`
	return []rtsandbox.ToolSpec{
		{
			Name:        MemorySet,
			Description: "Remember a fact about the current speaker (scope speaker; only they see it) or a shared channel note (scope channel). Setting an existing key replaces it.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{` + scope + `,"key":{"type":"string"},"text":{"type":"string"}},"required":["scope","key","text"],"additionalProperties":false}`),
		},
		{
			Name:        MemoryGet,
			Description: "Read or search remembered entries of a scope. Leave out key to list everything; query filters case-insensitively.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{` + scope + `,"key":{"type":"string"},"query":{"type":"string"}},"required":["scope"],"additionalProperties":false}`),
		},
		{
			Name:        MemoryRemove,
			Description: "Forget one remembered entry of a scope by key.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{` + scope + `,"key":{"type":"string"}},"required":["scope","key"],"additionalProperties":false}`),
		},
	}
}
