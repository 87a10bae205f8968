package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// maxTurnBytes bounds stdin: the host never writes more, and an unbounded
// read would let a broken host exhaust the container's memory.
const maxTurnBytes = rtsandbox.MaxTurnBytes

var errInvalidTurn = errors.New("invalid turn")

// readTurn reads at most maxTurnBytes from r and decodes the turn.
func readTurn(r io.Reader) (wire.Turn, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTurnBytes+1))
	if err != nil {
		return wire.Turn{}, fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > maxTurnBytes {
		return wire.Turn{}, fmt.Errorf("stdin exceeds %d bytes", maxTurnBytes)
	}
	return decodeTurn(b)
}

// decodeTurn parses and validates the turn JSON. It decodes through raw
// objects rather than into wire.Turn directly because encoding/json
// accepts null for strings and booleans, where the reference requires the
// JSON type itself. Extra fields are ignored.
func decodeTurn(b []byte) (wire.Turn, error) {
	obj, ok := object(b)
	if !ok {
		return wire.Turn{}, errInvalidTurn
	}
	var t wire.Turn
	fields := []struct {
		key string
		dst *string
	}{{"text", &t.Text}, {"model", &t.Model}, {"prompt", &t.Prompt}, {"timeZone", &t.TimeZone}}
	for _, f := range fields {
		if *f.dst, ok = str(obj[f.key]); !ok {
			return wire.Turn{}, fmt.Errorf("%w: %s", errInvalidTurn, f.key)
		}
	}
	if t.Speaker, ok = speaker(obj["speaker"]); !ok {
		return wire.Turn{}, fmt.Errorf("%w: speaker", errInvalidTurn)
	}
	if raw, present := obj["reset"]; present {
		if t.Reset, ok = boolean(raw); !ok {
			return wire.Turn{}, fmt.Errorf("%w: reset", errInvalidTurn)
		}
	}
	if t.Memory, ok = memoryEntries(obj["memory"]); !ok {
		return wire.Turn{}, fmt.Errorf("%w: memory", errInvalidTurn)
	}
	if t.History, ok = historyList(obj["history"]); !ok {
		return wire.Turn{}, fmt.Errorf("%w: history", errInvalidTurn)
	}
	if t.Tools, ok = toolSpecs(obj["tools"], rtsandbox.ValidToolName); !ok {
		return wire.Turn{}, fmt.Errorf("%w: tools", errInvalidTurn)
	}
	if t.MCP, ok = mcpServers(obj["mcp"], rtsandbox.ValidToolName); !ok {
		return wire.Turn{}, fmt.Errorf("%w: mcp", errInvalidTurn)
	}
	if err := modelFields(obj, &t); err != nil {
		return wire.Turn{}, err
	}
	return t, nil
}

// modelFields reads the optional model settings: modelApi (a known API),
// stream (a boolean) and thinking (a known level). Absent means the
// sealed default: openai, not streamed, no thinking.
func modelFields(obj map[string]json.RawMessage, t *wire.Turn) error {
	ok := true
	if raw, present := obj["modelApi"]; present {
		t.ModelAPI, ok = str(raw)
		if !ok || !rtsandbox.ValidModelAPI(t.ModelAPI) {
			return fmt.Errorf("%w: modelApi", errInvalidTurn)
		}
	}
	if raw, present := obj["stream"]; present {
		if t.Stream, ok = boolean(raw); !ok {
			return fmt.Errorf("%w: stream", errInvalidTurn)
		}
	}
	if raw, present := obj["thinking"]; present {
		t.Thinking, ok = str(raw)
		if _, known := rtsandbox.ThinkingBudget(t.Thinking); !ok || (t.Thinking != "" && !known) {
			return fmt.Errorf("%w: thinking", errInvalidTurn)
		}
	}
	return nil
}

func speaker(raw json.RawMessage) (wire.TurnSpeaker, bool) {
	obj, ok := object(raw)
	if !ok {
		return wire.TurnSpeaker{}, false
	}
	id, okID := str(obj["id"])
	name, okName := str(obj["name"])
	return wire.TurnSpeaker{ID: id, Name: name}, okID && okName
}

// memoryEntries checks the channel's memory as the reference's load did
// (spec §4.6): an array of at most 256 entries with string scope, key and
// text. The host checks the finer rules before it stores anything.
func memoryEntries(raw json.RawMessage) ([]rtsandbox.MemoryEntry, bool) {
	items, ok := array(raw)
	if !ok || len(items) > rtsandbox.MaxMemoryEntries {
		return nil, false
	}
	out := make([]rtsandbox.MemoryEntry, 0, len(items))
	for _, item := range items {
		obj, ok := object(item)
		if !ok {
			return nil, false
		}
		scope, ok1 := str(obj["scope"])
		key, ok2 := str(obj["key"])
		text, ok3 := str(obj["text"])
		if !ok1 || !ok2 || !ok3 {
			return nil, false
		}
		out = append(out, rtsandbox.MemoryEntry{Scope: scope, Key: key, Text: text})
	}
	return out, true
}

// historyList checks the channel's history (spec §4.3 item 2): an array of
// at most 20 messages with role user or assistant and string content.
func historyList(raw json.RawMessage) ([]rtsandbox.HistoryEntry, bool) {
	items, ok := array(raw)
	if !ok || len(items) > rtsandbox.MaxHistory {
		return nil, false
	}
	out := make([]rtsandbox.HistoryEntry, 0, len(items))
	for _, item := range items {
		obj, ok := object(item)
		if !ok {
			return nil, false
		}
		role, _ := str(obj["role"])
		content, ok := str(obj["content"])
		if !ok || (role != "user" && role != "assistant") {
			return nil, false
		}
		out = append(out, rtsandbox.HistoryEntry{Role: role, Content: content})
	}
	return out, true
}

// toolSpecs parses a list of tool declarations whose names pass valid
// (host tools and MCP tools have different name rules).
func toolSpecs(raw json.RawMessage, valid func(string) bool) ([]rtsandbox.ToolSpec, bool) {
	items, ok := array(raw)
	if !ok {
		return nil, false
	}
	specs := make([]rtsandbox.ToolSpec, 0, len(items))
	for _, item := range items {
		spec, ok := toolSpec(item, valid)
		if !ok {
			return nil, false
		}
		specs = append(specs, spec)
	}
	return specs, true
}

func toolSpec(raw json.RawMessage, valid func(string) bool) (rtsandbox.ToolSpec, bool) {
	obj, ok := object(raw)
	if !ok {
		return rtsandbox.ToolSpec{}, false
	}
	name, okName := str(obj["name"])
	desc, okDesc := str(obj["description"])
	params := obj["parameters"]
	_, okParams := object(params)
	if !okName || !valid(name) || !okDesc || !okParams {
		return rtsandbox.ToolSpec{}, false
	}
	return rtsandbox.ToolSpec{Name: name, Description: desc, Parameters: compact(params)}, true
}

// mcpServers reads [{server, tools}], each server name passing validName.
func mcpServers(raw json.RawMessage, validName func(string) bool) ([]wire.MCPServerTools, bool) {
	items, ok := array(raw)
	if !ok {
		return nil, false
	}
	servers := make([]wire.MCPServerTools, 0, len(items))
	for _, item := range items {
		obj, ok := object(item)
		if !ok {
			return nil, false
		}
		name, okName := str(obj["server"])
		tools, okTools := toolSpecs(obj["tools"], rtsandbox.ValidMCPToolName)
		if !okName || !validName(name) || !okTools {
			return nil, false
		}
		servers = append(servers, wire.MCPServerTools{Server: name, Tools: tools})
	}
	return servers, true
}

// The helpers below test the JSON type of a raw value the way the
// reference's typeof checks do: an object is not null and not an array.

func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if firstByte(raw) != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	return m, true
}

func array(raw json.RawMessage) ([]json.RawMessage, bool) {
	if firstByte(raw) != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

func str(raw json.RawMessage) (string, bool) {
	if firstByte(raw) != '"' {
		return "", false
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

func boolean(raw json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

func firstByte(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// compact strips insignificant whitespace, as JSON.stringify of the parsed
// value would; key order is kept. raw must be valid JSON.
func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}
