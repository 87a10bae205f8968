package worker

// The field-by-field turn decoder the typed turn wire replaced, kept as
// the oracle of FuzzTurnAgreesWithFieldByField: the typed decoding
// accepts exactly what it accepted, with the same turn and the same
// error text (the operator reads which member was refused).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// FuzzTurnAgreesWithFieldByField holds decodeTurn to the field-by-field
// decoder it replaced.
func FuzzTurnAgreesWithFieldByField(f *testing.F) {
	for _, tt := range turnDecodeTests {
		f.Add([]byte(tt.in))
	}
	for _, tt := range turnMembersCases {
		f.Add([]byte(tt.in))
	}
	f.Add([]byte(stateTurnJSON))
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := decodeTurn(in)
		want, oldErr := oldDecodeTurn(in)
		if fmt.Sprint(err) != fmt.Sprint(oldErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeTurn(%q) = %+v, %v; field by field %+v, %v", in, got, err, want, oldErr)
		}
	})
}

// TestTurnMembersExact pins the member rules of the turn that a plain
// encoding/json struct decode would change, and the member each refusal
// names: exact names, the last of repeated members, no nulls, the first
// bad member in the reference's order.
func TestTurnMembersExact(t *testing.T) {
	for _, tt := range turnMembersCases {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeTurn([]byte(tt.in))
			if fmt.Sprint(err) != tt.err {
				t.Fatalf("decodeTurn(%s) = %v; want %s", tt.in, err, tt.err)
			}
		})
	}
}

var turnMembersCases = []struct{ name, in, err string }{
	{"text-folded", `{"Text":"a",` + turnWith("text", "")[1:], "invalid turn: text"},
	{"model-repeated-last-wins", `{"model":1,` + validTurnJSON[1:], "<nil>"},
	{"model-repeated-last-null", validTurnJSON[:len(validTurnJSON)-1] + `,"model":null}`, "invalid turn: model"},
	{"speaker-folded-id", turnWith("speaker", `{"ID":"u1","name":"Ann"}`), "invalid turn: speaker"},
	{"speaker-extra", turnWith("speaker", `{"id":"u1","name":"Ann","x":null}`), "<nil>"},
	{"memory-null", turnWith("memory", `null`), "invalid turn: memory"},
	{"memory-entry-null", turnWith("memory", `[null]`), "invalid turn: memory"},
	{"memory-over-cap", turnWith("memory", repeatJSON(rtsandbox.MaxMemoryEntries+1, `{"scope":"s","key":"k","text":"t"}`)), "invalid turn: memory"},
	{"memory-at-cap", turnWith("memory", repeatJSON(rtsandbox.MaxMemoryEntries, `{"scope":"s","key":"k","text":"t"}`)), "<nil>"},
	{"memory-over-cap-before-bad-history", turnWith("memory", repeatJSON(rtsandbox.MaxMemoryEntries+1, `{"scope":"s","key":"k","text":"t"}`))[:1] + `"history":7,` + turnWith("memory", repeatJSON(rtsandbox.MaxMemoryEntries+1, `{"scope":"s","key":"k","text":"t"}`))[1:], "invalid turn: memory"},
	{"history-role-system", turnWith("history", `[{"role":"system","content":"c"}]`), "invalid turn: history"},
	{"history-role-missing", turnWith("history", `[{"content":"c"}]`), "invalid turn: history"},
	{"history-over-cap", turnWith("history", repeatJSON(rtsandbox.MaxHistory+1, `{"role":"user","content":"c"}`)), "invalid turn: history"},
	{"history-bad-before-stream", `{"stream":"no",` + turnWith("history", `[{"role":"system","content":"c"}]`)[1:], "invalid turn: history"},
	{"tools-bad-name", turnWith("tools", `[{"name":"a b","description":"d","parameters":{}}]`), "invalid turn: tools"},
	{"tools-params-array", turnWith("tools", `[{"name":"a","description":"d","parameters":[]}]`), "invalid turn: tools"},
	{"tools-params-spaced", turnWith("tools", `[{"name":"a","description":"d","parameters":{ "x" : [ 1 ] }}]`), "<nil>"},
	{"mcp-server-bad-name", turnWith("mcp", `[{"server":"a b","tools":[]}]`), "invalid turn: mcp"},
	{"mcp-tool", turnWith("mcp", `[{"server":"s","tools":[{"name":"t","description":"d","parameters":{}}]}]`), "<nil>"},
	{"mcp-tools-null", turnWith("mcp", `[{"server":"s","tools":null}]`), "invalid turn: mcp"},
	{"model-api-empty", turnWith("modelApi", `""`), "<nil>"},
	{"model-api-folded", turnWith("ModelApi", `"gemini"`), "<nil>"},
	{"stream-null", turnWith("stream", `null`), "invalid turn: stream"},
	{"thinking-empty", turnWith("thinking", `""`), "<nil>"},
	{"thinking-high", turnWith("thinking", `"high"`), "<nil>"},
	{"api-bad-before-stream", `{"stream":1,` + turnWith("modelApi", `"x"`)[1:], "invalid turn: modelApi"},
	{"not-object", `[]`, "invalid turn"},
	{"leading-vt", "\v" + validTurnJSON, "invalid turn"},
	{"trailing-ff", validTurnJSON + "\f", "invalid turn"},
	{"leading-nbsp", "\u00a0" + validTurnJSON, "invalid turn"},
	{"spaced", " \t\r\n" + validTurnJSON + "\n", "<nil>"},
	{"trailing", validTurnJSON + `{}`, "invalid turn"},
}

func oldDecodeTurn(b []byte) (wire.Turn, error) {
	obj, ok := oldObject(b)
	if !ok {
		return wire.Turn{}, errInvalidTurn
	}
	var t wire.Turn
	fields := []struct {
		key string
		dst *string
	}{{"text", &t.Text}, {"model", &t.Model}, {"prompt", &t.Prompt}, {"timeZone", &t.TimeZone}}
	for _, f := range fields {
		if *f.dst, ok = oldStr(obj[f.key]); !ok {
			return wire.Turn{}, fmt.Errorf("%w: %s", errInvalidTurn, f.key)
		}
	}
	if t.Speaker, ok = oldSpeaker(obj["speaker"]); !ok {
		return wire.Turn{}, fmt.Errorf("%w: speaker", errInvalidTurn)
	}
	if raw, present := obj["reset"]; present {
		if t.Reset, ok = oldBoolean(raw); !ok {
			return wire.Turn{}, fmt.Errorf("%w: reset", errInvalidTurn)
		}
	}
	if t.Memory, ok = oldMemoryEntries(obj["memory"]); !ok {
		return wire.Turn{}, fmt.Errorf("%w: memory", errInvalidTurn)
	}
	if t.History, ok = oldHistoryList(obj["history"]); !ok {
		return wire.Turn{}, fmt.Errorf("%w: history", errInvalidTurn)
	}
	if t.Tools, ok = oldToolSpecs(obj["tools"], rtsandbox.ValidToolName); !ok {
		return wire.Turn{}, fmt.Errorf("%w: tools", errInvalidTurn)
	}
	if t.MCP, ok = oldMcpServers(obj["mcp"], rtsandbox.ValidToolName); !ok {
		return wire.Turn{}, fmt.Errorf("%w: mcp", errInvalidTurn)
	}
	if err := oldModelFields(obj, &t); err != nil {
		return wire.Turn{}, err
	}
	return t, nil
}

// modelFields reads the optional model settings: modelApi (a known API),
// stream (a boolean) and thinking (a known level). Absent means the
// sealed default: openai, not streamed, no thinking.
func oldModelFields(obj map[string]json.RawMessage, t *wire.Turn) error {
	ok := true
	if raw, present := obj["modelApi"]; present {
		t.ModelAPI, ok = oldStr(raw)
		if !ok || !rtsandbox.ValidModelAPI(t.ModelAPI) {
			return fmt.Errorf("%w: modelApi", errInvalidTurn)
		}
	}
	if raw, present := obj["stream"]; present {
		if t.Stream, ok = oldBoolean(raw); !ok {
			return fmt.Errorf("%w: stream", errInvalidTurn)
		}
	}
	if raw, present := obj["thinking"]; present {
		t.Thinking, ok = oldStr(raw)
		if _, known := rtsandbox.ThinkingBudget(t.Thinking); !ok || (t.Thinking != "" && !known) {
			return fmt.Errorf("%w: thinking", errInvalidTurn)
		}
	}
	return nil
}

func oldSpeaker(raw json.RawMessage) (wire.TurnSpeaker, bool) {
	obj, ok := oldObject(raw)
	if !ok {
		return wire.TurnSpeaker{}, false
	}
	id, okID := oldStr(obj["id"])
	name, okName := oldStr(obj["name"])
	return wire.TurnSpeaker{ID: id, Name: name}, okID && okName
}

// memoryEntries checks the channel's memory as the reference's load did
// (docs/protocol.md, "Memory tools"): an array of at most 256 entries with string scope, key and
// text. The host checks the finer rules before it stores anything.
func oldMemoryEntries(raw json.RawMessage) ([]rtsandbox.MemoryEntry, bool) {
	items, ok := oldArray(raw)
	if !ok || len(items) > rtsandbox.MaxMemoryEntries {
		return nil, false
	}
	out := make([]rtsandbox.MemoryEntry, 0, len(items))
	for _, item := range items {
		obj, ok := oldObject(item)
		if !ok {
			return nil, false
		}
		scope, ok1 := oldStr(obj["scope"])
		key, ok2 := oldStr(obj["key"])
		text, ok3 := oldStr(obj["text"])
		if !ok1 || !ok2 || !ok3 {
			return nil, false
		}
		out = append(out, rtsandbox.MemoryEntry{Scope: scope, Key: key, Text: text})
	}
	return out, true
}

// historyList checks the channel's history (docs/protocol.md, "The sealed turn"): an array of
// at most 20 messages with role user or assistant and string content.
func oldHistoryList(raw json.RawMessage) ([]rtsandbox.HistoryEntry, bool) {
	items, ok := oldArray(raw)
	if !ok || len(items) > rtsandbox.MaxHistory {
		return nil, false
	}
	out := make([]rtsandbox.HistoryEntry, 0, len(items))
	for _, item := range items {
		obj, ok := oldObject(item)
		if !ok {
			return nil, false
		}
		role, _ := oldStr(obj["role"])
		content, ok := oldStr(obj["content"])
		if !ok || (role != "user" && role != "assistant") {
			return nil, false
		}
		out = append(out, rtsandbox.HistoryEntry{Role: role, Content: content})
	}
	return out, true
}

// toolSpecs parses a list of tool declarations whose names pass valid
// (host tools and MCP tools have different name rules).
func oldToolSpecs(raw json.RawMessage, valid func(string) bool) ([]rtsandbox.ToolSpec, bool) {
	items, ok := oldArray(raw)
	if !ok {
		return nil, false
	}
	specs := make([]rtsandbox.ToolSpec, 0, len(items))
	for _, item := range items {
		spec, ok := oldToolSpec(item, valid)
		if !ok {
			return nil, false
		}
		specs = append(specs, spec)
	}
	return specs, true
}

func oldToolSpec(raw json.RawMessage, valid func(string) bool) (rtsandbox.ToolSpec, bool) {
	obj, ok := oldObject(raw)
	if !ok {
		return rtsandbox.ToolSpec{}, false
	}
	name, okName := oldStr(obj["name"])
	desc, okDesc := oldStr(obj["description"])
	params := obj["parameters"]
	_, okParams := oldObject(params)
	if !okName || !valid(name) || !okDesc || !okParams {
		return rtsandbox.ToolSpec{}, false
	}
	return rtsandbox.ToolSpec{Name: name, Description: desc, Parameters: oldCompact(params)}, true
}

// mcpServers reads [{server, tools}], each server name passing validName.
func oldMcpServers(raw json.RawMessage, validName func(string) bool) ([]wire.MCPServerTools, bool) {
	items, ok := oldArray(raw)
	if !ok {
		return nil, false
	}
	servers := make([]wire.MCPServerTools, 0, len(items))
	for _, item := range items {
		obj, ok := oldObject(item)
		if !ok {
			return nil, false
		}
		name, okName := oldStr(obj["server"])
		tools, okTools := oldToolSpecs(obj["tools"], rtsandbox.ValidMCPToolName)
		if !okName || !validName(name) || !okTools {
			return nil, false
		}
		servers = append(servers, wire.MCPServerTools{Server: name, Tools: tools})
	}
	return servers, true
}

// The helpers below test the JSON type of a raw value the way the
// reference's typeof checks do: an object is not null and not an array.

func oldObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if oldFirstByte(raw) != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	return m, true
}

func oldArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if oldFirstByte(raw) != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

func oldStr(raw json.RawMessage) (string, bool) {
	if oldFirstByte(raw) != '"' {
		return "", false
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

func oldBoolean(raw json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

func oldFirstByte(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// compact strips insignificant whitespace, as JSON.stringify of the parsed
// value would; key order is kept. raw must be valid JSON.
func oldCompact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}
