package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

func knownTool(name string) bool {
	return name == "memory_get" || name == "host_clock" || name == invalidToolName
}

var repairTests = []struct {
	name  string
	step  int
	used  []string
	calls string // JSON array of model calls
	want  []wire.ToolCall
}{
	{
		name: "valid-call-without-type", calls: `[{"id":"a","function":{"name":"memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{tc("a", "memory_get", "{}")},
	},
	{
		name: "unknown-name", calls: `[{"id":"a","type":"function","function":{"name":"bash","arguments":"{}"}}]`,
		want: []wire.ToolCall{tc("a", invalidToolName, "{}")},
	},
	{
		name: "invalid-name-pattern", calls: `[{"id":"a","function":{"name":"Memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{tc("a", invalidToolName, "{}")},
	},
	{
		name: "name-not-string", calls: `[{"id":"a","function":{"name":1,"arguments":"{}"}}]`,
		want: []wire.ToolCall{tc("a", invalidToolName, "{}")},
	},
	{
		name: "missing-id", step: 3, calls: `[{"function":{"name":"memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{tc("call_3_0", "memory_get", "{}")},
	},
	{
		name: "empty-id", step: 1, calls: `[{"id":"","function":{"name":"memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{tc("call_1_0", "memory_get", "{}")},
	},
	{
		name: "id-129", calls: `[{"id":"` + strings.Repeat("i", 129) + `","function":{"name":"memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{tc("call_0_0", "memory_get", "{}")},
	},
	{
		name: "id-128", calls: `[{"id":"` + strings.Repeat("i", 128) + `","function":{"name":"memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{tc(strings.Repeat("i", 128), "memory_get", "{}")},
	},
	{
		name: "duplicate-ids-in-one-answer", step: 2,
		calls: `[{"id":"a","function":{"name":"memory_get","arguments":"{}"}},{"id":"a","function":{"name":"memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{
			tc("a", "memory_get", "{}"),
			tc("call_2_1", "memory_get", "{}"),
		},
	},
	{
		name: "id-used-in-earlier-step", step: 1, used: []string{"a"},
		calls: `[{"id":"a","function":{"name":"memory_get","arguments":"{}"}}]`,
		want:  []wire.ToolCall{tc("call_1_0", "memory_get", "{}")},
	},
	{
		name: "generated-id-taken-gets-suffixes", step: 1, used: []string{"call_1_0", "call_1_0_1"},
		calls: `[{"id":"call_1_0","function":{"name":"memory_get","arguments":"{}"}}]`,
		want:  []wire.ToolCall{tc("call_1_0_2", "memory_get", "{}")},
	},
	{
		name: "model-claims-later-generated-id", step: 0,
		calls: `[{"function":{"name":"memory_get","arguments":"{}"}},{"id":"call_0_0","function":{"name":"memory_get","arguments":"{}"}}]`,
		want: []wire.ToolCall{
			tc("call_0_0", "memory_get", "{}"),
			tc("call_0_1", "memory_get", "{}"),
		},
	},
	{
		name: "arguments-not-string", calls: `[{"id":"a","function":{"name":"memory_get","arguments":{"scope":"channel"}}}]`,
		want: []wire.ToolCall{tc("a", "memory_get", omittedArguments)},
	},
	{
		name: "arguments-2048-json-bytes", calls: `[{"id":"a","function":{"name":"host_clock","arguments":"` + strings.Repeat("x", 2046) + `"}}]`,
		want: []wire.ToolCall{tc("a", "host_clock", strings.Repeat("x", 2046))},
	},
	{
		name: "arguments-2049-json-bytes", calls: `[{"id":"a","function":{"name":"host_clock","arguments":"` + strings.Repeat("x", 2047) + `"}}]`,
		want: []wire.ToolCall{tc("a", "host_clock", omittedArguments)},
	},
	{
		name: "arguments-escapes-count", calls: `[{"id":"a","function":{"name":"host_clock","arguments":"` + strings.Repeat(`\"`, 1024) + `"}}]`,
		want: []wire.ToolCall{tc("a", "host_clock", omittedArguments)},
	},
	{
		name: "call-not-object", step: 4, calls: `[null]`,
		want: []wire.ToolCall{tc("call_4_0", invalidToolName, omittedArguments)},
	},
	{
		name: "function-not-object", calls: `[{"id":"a","function":"memory_get"}]`,
		want: []wire.ToolCall{tc("a", invalidToolName, omittedArguments)},
	},
}

func TestRepairToolCalls(t *testing.T) {
	for _, tt := range repairTests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []json.RawMessage
			if err := json.Unmarshal([]byte(tt.calls), &calls); err != nil {
				t.Fatal(err)
			}
			used := map[string]bool{}
			for _, id := range tt.used {
				used[id] = true
			}
			got := repairToolCalls(calls, tt.step, used, knownTool)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("repairToolCalls(%.60s) (-want +got):\n%s", tt.calls, diff)
			}
			for _, c := range got {
				if !used[c.ID] {
					t.Errorf("id %q not recorded as used", c.ID)
				}
			}
		})
	}
}

func TestCallInput(t *testing.T) {
	tests := []struct {
		name, call string
		ok         bool
		raw        string
	}{
		{"object", `{"function":{"arguments":"{ \"a\" : 1 }"}}`, true, `{"a":1}`},
		{"array", `{"function":{"arguments":"[1]"}}`, false, ""},
		{"null", `{"function":{"arguments":"null"}}`, false, ""},
		{"not-json", `{"function":{"arguments":"{a"}}`, false, ""},
		{"not-string", `{"function":{"arguments":{"a":1}}}`, false, ""},
		{"missing", `{"function":{}}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, ok := callInput(parseModelCall(json.RawMessage(tt.call)))
			if ok != tt.ok || string(in.raw) != tt.raw {
				t.Errorf("callInput(%s) = %s, %v; want %s, %v", tt.call, in.raw, ok, tt.raw, tt.ok)
			}
		})
	}
}

// FuzzRepairToolCalls checks the invariants every repaired call keeps,
// whatever the model sent: a valid, unique, recorded id; a known function
// name or invalid_tool; arguments within budget or the placeholder; and
// type "function".
func FuzzRepairToolCalls(f *testing.F) {
	for _, tt := range repairTests {
		f.Add([]byte(tt.calls), tt.step)
	}
	f.Fuzz(func(t *testing.T, data []byte, step int) {
		var calls []json.RawMessage
		if json.Unmarshal(data, &calls) != nil || len(calls) > rtsandbox.MaxToolCallsPerMessage {
			return
		}
		used := map[string]bool{"a": true, "call_0_0": true}
		got := repairToolCalls(calls, step, used, knownTool)
		if len(got) != len(calls) {
			t.Fatalf("repaired %d calls; want %d", len(got), len(calls))
		}
		seen := map[string]bool{}
		for _, c := range got {
			if !rtsandbox.ValidToolCallID(c.ID) || seen[c.ID] || !used[c.ID] {
				t.Fatalf("bad id %q", c.ID)
			}
			seen[c.ID] = true
			if !rtsandbox.ValidFunctionName(c.Function.Name) || !knownTool(c.Function.Name) {
				t.Fatalf("bad name %q", c.Function.Name)
			}
			if c.Function.Arguments != omittedArguments && jsonjs.StringSize(c.Function.Arguments) > maxArgumentsJSON {
				t.Fatalf("arguments of %d JSON bytes kept", jsonjs.StringSize(c.Function.Arguments))
			}
			if c.Type != "function" {
				t.Fatalf("type %q", c.Type)
			}
		}
		for _, c := range got {
			if c.ID == "a" || c.ID == "call_0_0" {
				t.Fatalf("id %q was already used before this step", c.ID)
			}
		}
	})
}

// tc is a normalized tool call.
func tc(id, name, args string) wire.ToolCall {
	return wire.ToolCall{ID: id, Type: wire.FunctionType, Function: wire.FunctionCall{Name: name, Arguments: args}}
}
