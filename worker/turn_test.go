package worker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

const validTurnJSON = `{"text":"Hi","speaker":{"id":"u1","name":"Ann"},"model":"m","prompt":"p","timeZone":"UTC","memory":[],"history":[],"tools":[],"mcp":[]}`

// stateTurnJSON carries memory and history (for the fuzz seeds).
const stateTurnJSON = `{"text":"Hi","speaker":{"id":"u1","name":"Ann"},"model":"m","prompt":"p","timeZone":"UTC",` +
	`"memory":[{"scope":"channel","key":"k","text":"<\u2028>"},{"scope":"speaker:u1","key":"../x","text":" t "}],` +
	`"history":[{"role":"user","content":"{\"speaker\":{\"id\":\"u1\",\"name\":\"Ann\"},\"message\":\"q\"}"},{"role":"assistant","content":"a"}],` +
	`"tools":[],"mcp":[]}`

// turnWith returns validTurnJSON with key set to value (raw JSON), or
// removed when value is "".
func turnWith(key, value string) string {
	var m map[string]json.RawMessage
	json.Unmarshal([]byte(validTurnJSON), &m)
	if value == "" {
		delete(m, key)
	} else {
		m[key] = json.RawMessage(value)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// repeatJSON is a JSON array of n copies of item.
func repeatJSON(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

var turnDecodeTests = []struct {
	name, in string
	ok       bool
}{
	{"minimal", validTurnJSON, true},
	{"extra-fields-ignored", turnWith("extra", `{"a":1}`), true},
	{"reset-true", turnWith("reset", `true`), true},
	{"reset-false", turnWith("reset", `false`), true},
	{"reset-null", turnWith("reset", `null`), false},
	{"reset-string", turnWith("reset", `"true"`), false},
	{"text-missing", turnWith("text", ""), false},
	{"text-null", turnWith("text", `null`), false},
	{"text-number", turnWith("text", `1`), false},
	{"model-missing", turnWith("model", ""), false},
	{"prompt-null", turnWith("prompt", `null`), false},
	{"time-zone-missing", turnWith("timeZone", ""), false},
	{"speaker-array", turnWith("speaker", `["u1","Ann"]`), false},
	{"speaker-id-number", turnWith("speaker", `{"id":1,"name":"Ann"}`), false},
	{"speaker-name-missing", turnWith("speaker", `{"id":"u1"}`), false},
	{"speaker-extra-field", turnWith("speaker", `{"id":"u1","name":"Ann","principal_id":"p"}`), true},
	{"tools-missing", turnWith("tools", ""), false},
	{"tools-null", turnWith("tools", `null`), false},
	{"tool-valid", turnWith("tools", `[{"name":"clock","description":"d","parameters":{"type":"object"}}]`), true},
	{"tool-name-upper", turnWith("tools", `[{"name":"Clock","description":"d","parameters":{}}]`), false},
	{"tool-name-49", turnWith("tools", `[{"name":"`+strings.Repeat("a", 49)+`","description":"d","parameters":{}}]`), false},
	{"tool-name-48", turnWith("tools", `[{"name":"`+strings.Repeat("a", 48)+`","description":"d","parameters":{}}]`), true},
	{"tool-description-missing", turnWith("tools", `[{"name":"clock","parameters":{}}]`), false},
	{"tool-parameters-array", turnWith("tools", `[{"name":"clock","description":"d","parameters":[]}]`), false},
	{"tool-parameters-null", turnWith("tools", `[{"name":"clock","description":"d","parameters":null}]`), false},
	{"mcp-valid", turnWith("mcp", `[{"server":"catalog","tools":[{"name":"search","description":"d","parameters":{}}]}]`), true},
	{"mcp-server-invalid", turnWith("mcp", `[{"server":"cat/alog","tools":[]}]`), false},
	{"mcp-tools-missing", turnWith("mcp", `[{"server":"catalog"}]`), false},
	{"mcp-not-array", turnWith("mcp", `{}`), false},
	{"state", stateTurnJSON, true},
	{"memory-missing", turnWith("memory", ""), false},
	{"memory-null", turnWith("memory", `null`), false},
	{"memory-object", turnWith("memory", `{}`), false},
	{"memory-entry-null", turnWith("memory", `[null]`), false},
	{"memory-entry-array", turnWith("memory", `[["channel","k","t"]]`), false},
	{"memory-entry-text-missing", turnWith("memory", `[{"scope":"channel","key":"k"}]`), false},
	{"memory-entry-scope-number", turnWith("memory", `[{"scope":1,"key":"k","text":"t"}]`), false},
	{"memory-entry-extra-field", turnWith("memory", `[{"scope":"channel","key":"k","text":"t","x":1}]`), true},
	{"memory-256-entries", turnWith("memory", repeatJSON(256, `{"scope":"channel","key":"k","text":"t"}`)), true},
	{"memory-257-entries", turnWith("memory", repeatJSON(257, `{"scope":"channel","key":"k","text":"t"}`)), false},
	{"history-missing", turnWith("history", ""), false},
	{"history-null", turnWith("history", `null`), false},
	{"history-string", turnWith("history", `"[]"`), false},
	{"history-entry-null", turnWith("history", `[null]`), false},
	{"history-role-system", turnWith("history", `[{"role":"system","content":"x"}]`), false},
	{"history-role-tool", turnWith("history", `[{"role":"tool","content":"x"}]`), false},
	{"history-role-missing", turnWith("history", `[{"content":"x"}]`), false},
	{"history-content-null", turnWith("history", `[{"role":"user","content":null}]`), false},
	{"history-content-missing", turnWith("history", `[{"role":"assistant"}]`), false},
	{"history-entry-extra-field", turnWith("history", `[{"role":"user","content":"x","tool_calls":[]}]`), true},
	{"history-20-entries", turnWith("history", repeatJSON(20, `{"role":"user","content":"x"}`)), true},
	{"history-21-entries", turnWith("history", repeatJSON(21, `{"role":"user","content":"x"}`)), false},
	{"top-level-array", `[]`, false},
	{"top-level-null", `null`, false},
	{"trailing-garbage", validTurnJSON + "x", false},
	{"surrounding-space", " \n" + validTurnJSON + "\n", true},
	{"empty", ``, false},
}

func TestDecodeTurn(t *testing.T) {
	for _, tt := range turnDecodeTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeTurn([]byte(tt.in))
			if (err == nil) != tt.ok {
				t.Errorf("decodeTurn(%.60s) = %v; want ok %v", tt.in, err, tt.ok)
			}
		})
	}
}

func TestDecodeTurnValues(t *testing.T) {
	in := turnWith("tools", `[{"name":"clock","description":"Time","parameters":{ "type" : "object" , "b":1,"a":2}}]`)
	in = strings.Replace(in, `"mcp":[]`, `"mcp":[{"server":"cat","tools":[{"name":"s","description":"","parameters":{}}]}],"reset":true`, 1)
	in = strings.Replace(in, `"memory":[]`, `"memory":[{"scope":"speaker:u1","key":"k","text":"t","extra":1}]`, 1)
	in = strings.Replace(in, `"history":[]`, `"history":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]`, 1)
	got, err := decodeTurn([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := wire.Turn{
		Text: "Hi", Speaker: wire.TurnSpeaker{ID: "u1", Name: "Ann"}, Model: "m", Prompt: "p", TimeZone: "UTC", Reset: true,
		Memory:  []rtsandbox.MemoryEntry{{Scope: "speaker:u1", Key: "k", Text: "t"}},
		History: []rtsandbox.HistoryEntry{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}},
		Tools:   []rtsandbox.ToolSpec{{Name: "clock", Description: "Time", Parameters: json.RawMessage(`{"type":"object","b":1,"a":2}`)}},
		MCP:     []wire.MCPServerTools{{Server: "cat", Tools: []rtsandbox.ToolSpec{{Name: "s", Description: "", Parameters: json.RawMessage(`{}`)}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decodeTurn (-want +got):\n%s", diff)
	}
}

// The stdin bound is rtsandbox.MaxTurnBytes (2 MiB, room for the channel's
// state), not the reference's 262,144 bytes.
func TestReadTurnLimit(t *testing.T) {
	if got := maxTurnBytes; got != 2<<20 {
		t.Fatalf("maxTurnBytes = %d; want 2 MiB", got)
	}
	pad := strings.Repeat(" ", maxTurnBytes-len(validTurnJSON))
	if _, err := readTurn(strings.NewReader(validTurnJSON + pad)); err != nil {
		t.Errorf("readTurn(%d bytes) = %v; want ok", maxTurnBytes, err)
	}
	if _, err := readTurn(strings.NewReader(validTurnJSON + pad + " ")); err == nil {
		t.Errorf("readTurn(%d bytes) = nil; want error", maxTurnBytes+1)
	}
}

// rawAsValue compares raw JSON by value: re-encoding may change escapes
// (such as \u2028) without changing the data.
var rawAsValue = cmp.Transformer("json", func(r json.RawMessage) any {
	var v any
	if json.Unmarshal(r, &v) != nil {
		return string(r)
	}
	return v
})

// FuzzTurnDecode checks that the stdin parser never panics and that an
// accepted turn survives a round trip through its own encoding.
func FuzzTurnDecode(f *testing.F) {
	for _, tt := range turnDecodeTests {
		f.Add([]byte(tt.in))
	}
	f.Add([]byte(turnWith("tools", `[{"name":"a","description":"<\u2028>","parameters":{"x":"<&>\u2028\u00e9"}}]`)))
	f.Add([]byte(stateTurnJSON))
	f.Add([]byte(strings.Replace(stateTurnJSON, `"memory":`, `"reset":true,"memory":`, 1)))
	f.Add([]byte(turnWith("history", `[{"role":"assistant","content":"\u0000\ud83d\ude00\u2029"}]`)))
	f.Fuzz(func(t *testing.T, in []byte) {
		turn, err := decodeTurn(in)
		if err != nil {
			if !errors.Is(err, errInvalidTurn) {
				t.Fatalf("decodeTurn error %v is not errInvalidTurn", err)
			}
			return
		}
		again, err := jsonjs.Marshal(turn)
		if err != nil {
			t.Fatalf("marshal accepted turn: %v", err)
		}
		turn2, err := decodeTurn(again)
		if err != nil {
			t.Fatalf("decodeTurn(re-encoded %s) = %v", again, err)
		}
		if diff := cmp.Diff(turn, turn2, rawAsValue); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
