package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// Memory limits (spec §4.6), from the shared contract.
const (
	maxMemoryEntries = rtsandbox.MaxMemoryEntries
	maxMemoryBytes   = rtsandbox.MaxMemoryBytes
	maxMemoryKey     = rtsandbox.MaxMemoryKey
	maxMemoryText    = rtsandbox.MaxMemoryText
)

var errMemory = errors.New("memory tool refused")

// memory is the channel's store for one turn, as the host passed it in the
// turn JSON; the tools change it here and the reply carries it back. The
// worker is sequential, so it needs no lock, and it touches no file.
type memory struct {
	entries []rtsandbox.MemoryEntry
}

// call runs a memory tool. speakerID is the turn's speaker, never a tool
// argument, so a guest cannot reach another speaker's namespace; extra
// arguments are ignored.
func (m *memory) call(name string, input map[string]json.RawMessage, speakerID string) (string, error) {
	scope, err := memoryScope(input, speakerID)
	if err != nil {
		return "", err
	}
	key, hasKey, err := memoryKey(input)
	if err != nil {
		return "", err
	}
	if name == "memory_get" {
		return m.get(scope, key, hasKey, input)
	}
	if !hasKey {
		return "", fmt.Errorf("%w: key is required", errMemory)
	}
	next := make([]rtsandbox.MemoryEntry, 0, len(m.entries)+1)
	for _, e := range m.entries {
		if e.Scope != scope || e.Key != key {
			next = append(next, e)
		}
	}
	result := "Forgotten."
	switch name {
	case "memory_remove":
	case "memory_set":
		text, ok := str(input["text"])
		if !ok || rtsandbox.TrimJS(text) == "" || rtsandbox.UTF16Len(text) > maxMemoryText {
			return "", fmt.Errorf("%w: text must be 1..2048 characters", errMemory)
		}
		// Stored untrimmed; appending moves an updated entry to the end.
		next = append(next, rtsandbox.MemoryEntry{Scope: scope, Key: key, Text: text})
		result = "Saved."
	default:
		return "", fmt.Errorf("%w: unknown memory tool", errMemory)
	}
	return result, m.save(next)
}

// memoryScope checks input.scope first, for any tool name, as the reference.
func memoryScope(input map[string]json.RawMessage, speakerID string) (string, error) {
	switch s, _ := str(input["scope"]); s {
	case "channel":
		return "channel", nil
	case "speaker":
		return "speaker:" + speakerID, nil
	}
	return "", fmt.Errorf("%w: scope must be speaker or channel", errMemory)
}

// memoryKey trims a string key; a key of any other JSON type counts as
// absent, as in the reference.
func memoryKey(input map[string]json.RawMessage) (key string, ok bool, err error) {
	raw, ok := str(input["key"])
	if !ok {
		return "", false, nil
	}
	key = rtsandbox.TrimJS(raw)
	if n := rtsandbox.UTF16Len(key); n < 1 || n > maxMemoryKey {
		return "", false, fmt.Errorf("%w: key must be 1..128 characters", errMemory)
	}
	return key, true, nil
}

// get lists the entries of scope, in stored order, that match the key (if
// given) and contain the query case-insensitively in "<key> <text>".
func (m *memory) get(scope, key string, hasKey bool, input map[string]json.RawMessage) (string, error) {
	query, _ := str(input["query"])
	query = strings.ToLower(query)
	type found struct {
		Key  string `json:"key"`
		Text string `json:"text"`
	}
	out := []found{}
	for _, e := range m.entries {
		if e.Scope != scope || (hasKey && e.Key != key) {
			continue
		}
		if strings.Contains(strings.ToLower(e.Key+" "+e.Text), query) {
			out = append(out, found{e.Key, e.Text})
		}
	}
	b, err := jsonjs.Marshal(out)
	return string(b), err
}

// save checks capacity before replacing the entries, so a refused change
// leaves the store as it was.
func (m *memory) save(next []rtsandbox.MemoryEntry) error {
	if len(next) > maxMemoryEntries || jsonjs.Size(next) > maxMemoryBytes {
		return fmt.Errorf("%w: memory capacity reached", errMemory)
	}
	m.entries = next
	return nil
}

// memoryTools declares the memory tools to the model.
var memoryTools = []rtsandbox.ToolSpec{
	{
		Name:        "memory_set",
		Description: "Remember a fact about the current speaker (scope speaker; only they see it) or a shared channel note (scope channel). Setting an existing key replaces it.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"},"text":{"type":"string"}},"required":["scope","key","text"],"additionalProperties":false}`),
	},
	{
		Name:        "memory_get",
		Description: "Read or search remembered entries of a scope. Leave out key to list everything; query filters case-insensitively.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"},"query":{"type":"string"}},"required":["scope"],"additionalProperties":false}`),
	},
	{
		Name:        "memory_remove",
		Description: "Forget one remembered entry of a scope by key.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"}},"required":["scope","key"],"additionalProperties":false}`),
	},
}
