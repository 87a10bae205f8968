package worker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// writeJSON writes v as JS-style JSON to path.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := jsonjs.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// §6.8 "Near-capacity store and huge history still fit."
func TestAgentNearCapacityStoreAndHugeHistoryFit(t *testing.T) {
	ws := t.TempDir()
	var notes []memoryEntry
	for i := range 144 {
		text := strings.Repeat("n", 2048)
		if i < 32 {
			text = strings.Repeat("\u4e01", 2048)
		}
		notes = append(notes, memoryEntry{Scope: "channel", Key: fmt.Sprintf("note_%d", i), Text: text})
	}
	writeJSON(t, filepath.Join(ws, "memory.json"), notes)
	var history []message
	for i := range 20 {
		role := []string{"user", "assistant"}[i%2]
		history = append(history, message{Role: role, Content: strings.Repeat("h", 100000)})
	}
	writeJSON(t, filepath.Join(ws, "history.json"), history)

	b := startBroker(t,
		completion(nil, call("c1", "memory_remove", `{"scope":"channel","key":"note_0"}`)),
		completion("Removed."),
	)
	r := runWorker(t, b, ws, testTurn("alice", strings.Repeat("\u4e01", 20000)))
	wantOK(t, r, "Removed.")

	bodies := b.gotBodies("/model")
	if len(bodies) != 2 {
		t.Fatalf("model calls = %d; want 2", len(bodies))
	}
	for i, body := range bodies {
		if len(body) >= maxPayload {
			t.Errorf("model body %d is %d bytes; want < %d", i, len(body), maxPayload)
		}
	}
	for i, s := range b.gotStatuses() {
		if s != http.StatusOK {
			t.Errorf("broker status %d = %d; want 200", i, s)
		}
	}
	mem, err := openMemory(ws)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := mem.call("memory_get", fields(`{"scope":"channel","key":"note_0"}`), "alice"); got != "[]" {
		t.Errorf("memory_get note_0 = %q; want []", got)
	}
}

// §6.8 "Tool loop, scoping and history."
func TestAgentToolLoopScopingAndHistory(t *testing.T) {
	ws := t.TempDir()
	b := startBroker(t,
		completion(nil,
			call("set", "memory_set", `{"scope":"speaker","key":"drink","text":"Tea","speaker":"owner"}`),
			call("sh", "bash", `{}`),
		),
		completion("Remembered."),
	)
	wantOK(t, runWorker(t, b, ws, testTurn("alice", "Remember that I drink tea.")), "Remembered.")
	if bodies := b.gotBodies("/model"); len(bodies) != 2 || !strings.Contains(bodies[1], refusedText) {
		t.Fatalf("second request = %q; want it to contain %q", bodies, refusedText)
	}

	b2 := startBroker(t, completion("You drink Tea."))
	wantOK(t, runWorker(t, b2, ws, testTurn("alice", "What do I drink?")), "You drink Tea.")
	first := b2.gotBodies("/model")[0]
	for _, want := range []string{"Tea", "Remembered."} {
		if !strings.Contains(first, want) {
			t.Errorf("turn 2 request lacks %q", want)
		}
	}

	b3 := startBroker(t, completion("Hello Bob."))
	turn := testTurn("bob", "Hello")
	turn.Reset = true
	wantOK(t, runWorker(t, b3, ws, turn), "Hello Bob.")
	first = b3.gotBodies("/model")[0]
	for _, unwanted := range []string{"Tea", "Remembered."} {
		if strings.Contains(first, unwanted) {
			t.Errorf("reset turn request contains %q", unwanted)
		}
	}
}

// §6.8 "Declared routes only."
func TestAgentDeclaredRoutesOnly(t *testing.T) {
	b := startBroker(t,
		completion(nil, call("a", "host_clock", `{}`), call("b", "mcp_0_search", `{"query":"a"}`)),
		completion("Done."),
	)
	b.handle("/tools/clock", func(string) (int, string) { return 200, `{"text":"noon"}` })
	b.handle("/mcp/catalog", func(string) (int, string) {
		return 200, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"found"}]}}`
	})
	turn := testTurn("alice", "What time is it?")
	params := json.RawMessage(`{"type":"object","properties":{}}`)
	turn.Tools = []rtsandbox.ToolSpec{{Name: "clock", Description: "Tell the time.", Parameters: params}}
	turn.MCP = []rtsandbox.MCPServerTools{{Server: "catalog", Tools: []rtsandbox.ToolSpec{{Name: "search", Description: "Search.", Parameters: params}}}}
	wantOK(t, runWorker(t, b, t.TempDir(), turn), "Done.")

	want := []string{"/model", "/tools/clock", "/mcp/catalog", "/model"}
	if diff := cmp.Diff(want, b.gotRoutes()); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	bodies := b.gotBodies("/model")
	if !strings.Contains(bodies[0], `"name":"host_clock"`) {
		t.Errorf("first request tools lack host_clock: %s", bodies[0])
	}
	if got, want := b.gotBodies("/mcp/catalog")[0], `{"method":"tools/call","params":{"name":"search","arguments":{"query":"a"}}}`; got != want {
		t.Errorf("mcp body = %s; want %s", got, want)
	}
	for _, want := range []string{`{\"text\":\"noon\"}`, `\"text\":\"found\"`} {
		if !strings.Contains(bodies[1], want) {
			t.Errorf("second request lacks tool result %s", want)
		}
	}
}

// §6.11: the 13th model call is never made.
func TestAgentStopsAtModelCallLimit(t *testing.T) {
	var script []string
	for i := range maxModelCalls + 1 {
		script = append(script, completion(nil, call(fmt.Sprint("c", i), "memory_get", `{"scope":"channel"}`)))
	}
	b := startBroker(t, script...)
	r := runWorker(t, b, t.TempDir(), testTurn("alice", "Loop"))
	want, _ := json.Marshal(rtsandbox.Reply{OK: false, Text: limitText})
	if r.code != 0 || r.stdout != string(want) {
		t.Fatalf("Run() = %d, %q; want 0, %q", r.code, r.stdout, want)
	}
	if n := len(b.gotBodies("/model")); n != maxModelCalls {
		t.Errorf("model calls = %d; want %d", n, maxModelCalls)
	}
}

// §6.11: 9 tool calls fail the worker.
func TestAgentRefusesTooManyToolCalls(t *testing.T) {
	var calls []map[string]any
	for i := range maxToolCalls + 1 {
		calls = append(calls, call(fmt.Sprint("c", i), "memory_get", `{"scope":"channel"}`))
	}
	b := startBroker(t, completion(nil, calls...))
	wantFailed(t, runWorker(t, b, t.TempDir(), testTurn("alice", "Many")))
}

// §6.11: arguments over 2,048 bytes show the placeholder in context but run
// with the original arguments.
func TestAgentLargeArgumentsRunWithOriginal(t *testing.T) {
	args := `{"q":"` + strings.Repeat("x", 3000) + `"}`
	b := startBroker(t, completion(nil, call("big", "host_echo", args)), completion("Echoed."))
	b.handle("/tools/echo", func(string) (int, string) { return 200, `{"text":"ok"}` })
	turn := testTurn("alice", "Echo")
	turn.Tools = []rtsandbox.ToolSpec{{Name: "echo", Description: "Echo.", Parameters: json.RawMessage(`{"type":"object"}`)}}
	wantOK(t, runWorker(t, b, t.TempDir(), turn), "Echoed.")

	if got := b.gotBodies("/tools/echo"); len(got) != 1 || got[0] != args {
		t.Errorf("tool body = %.80q; want the original arguments", got)
	}
	second := b.gotBodies("/model")[1]
	placeholder, _ := json.Marshal(omittedArguments)
	if !strings.Contains(second, string(placeholder)) || strings.Contains(second, strings.Repeat("x", 3000)) {
		t.Errorf("second request does not show the placeholder instead of the arguments")
	}
}

// §6.11: invalid workspace state fails the worker before any model call.
func TestAgentRejectsInvalidWorkspaceState(t *testing.T) {
	msgs := func(n int, role string) []message {
		out := make([]message, n)
		for i := range out {
			out[i] = message{Role: role, Content: "x"}
		}
		return out
	}
	entries := func(n int) []memoryEntry {
		out := make([]memoryEntry, n)
		for i := range out {
			out[i] = memoryEntry{Scope: "channel", Key: fmt.Sprint("k", i), Text: "t"}
		}
		return out
	}
	tests := []struct {
		name, file string
		content    any
	}{
		{"history-21-entries", "history.json", msgs(21, "user")},
		{"history-system-role", "history.json", msgs(1, "system")},
		{"history-not-array", "history.json", map[string]string{"role": "user"}},
		{"history-content-not-string", "history.json", []any{map[string]any{"role": "user", "content": 1}}},
		{"history-not-json", "history.json", json.RawMessage(`[`)},
		{"memory-257-entries", "memory.json", entries(257)},
		{"memory-entry-not-string", "memory.json", []any{map[string]any{"scope": "channel", "key": "k", "text": nil}}},
		{"memory-not-json", "memory.json", json.RawMessage(`{`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			if raw, ok := tt.content.(json.RawMessage); ok {
				os.WriteFile(filepath.Join(ws, tt.file), raw, 0o600)
			} else {
				writeJSON(t, filepath.Join(ws, tt.file), tt.content)
			}
			b := startBroker(t)
			wantFailed(t, runWorker(t, b, ws, testTurn("alice", "Hi")))
			if routes := b.gotRoutes(); len(routes) != 0 {
				t.Errorf("routes = %v; want none", routes)
			}
		})
	}
}

// A reset turn does not read history at all, so even a broken file passes,
// and the file is overwritten on success.
func TestAgentResetIgnoresAndReplacesHistory(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "history.json"), []byte("not json"), 0o600)
	b := startBroker(t, completion("Fresh."))
	turn := testTurn("alice", "Hi")
	turn.Reset = true
	wantOK(t, runWorker(t, b, ws, turn), "Fresh.")
	got, err := loadHistory(ws, false)
	if err != nil || len(got) != 2 {
		t.Fatalf("loadHistory() = %v, %v; want 2 entries", got, err)
	}
}

func TestAgentFinalAnswerRules(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		status int
		want   string // "" means worker failure
	}{
		{"trimmed-text", completion("  Hi there.\n"), 200, "Hi there."},
		{"empty-tool-calls-is-final", `{"choices":[{"message":{"content":"Final.","tool_calls":[]}}]}`, 200, "Final."},
		{"null-tool-calls-is-final", `{"choices":[{"message":{"content":"Final.","tool_calls":null}}]}`, 200, "Final."},
		{"max-length-text", completion(strings.Repeat("a", maxFinalText)), 200, strings.Repeat("a", maxFinalText)},
		{"blank-text", completion(" \n\t\u3000"), 200, ""},
		{"null-content", completion(nil), 200, ""},
		{"text-too-long", completion(strings.Repeat("a", maxFinalText) + " "), 200, ""},
		{"no-choices", `{"choices":[]}`, 200, ""},
		{"choice-not-object", `{"choices":[1]}`, 200, ""},
		{"message-not-object", `{"choices":[{"message":"hi"}]}`, 200, ""},
		{"answer-is-array", `[]`, 200, ""},
		{"broker-refuses", `{"error":"broker call failed"}`, 502, ""},
		{"broker-not-json", `nope`, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := startBroker(t)
			b.handle("/model", func(string) (int, string) { return tt.status, tt.answer })
			r := runWorker(t, b, t.TempDir(), testTurn("alice", "Hi"))
			if tt.want == "" {
				wantFailed(t, r)
				return
			}
			wantOK(t, r, tt.want)
		})
	}
}

// A refused tool call (broker non-200, bad arguments, unknown name) becomes
// the fixed refusal text and the loop goes on.
func TestAgentToolFailuresAreRefusals(t *testing.T) {
	b := startBroker(t,
		completion("Let me look.",
			call("a", "host_clock", `{}`),
			call("b", "host_clock", `[1]`),
			call("c", "host_clock", `{bad`),
			call("d", "host_nope", `{}`),
			map[string]any{"id": "e"},
		),
		completion("Sorry."),
	)
	b.handle("/tools/clock", func(string) (int, string) { return 502, `{"error":"broker call failed"}` })
	turn := testTurn("alice", "Time?")
	turn.Tools = []rtsandbox.ToolSpec{{Name: "clock", Description: "Clock.", Parameters: json.RawMessage(`{}`)}}
	wantOK(t, runWorker(t, b, t.TempDir(), turn), "Sorry.")
	if got := b.gotRoutes(); !cmp.Equal(got, []string{"/model", "/tools/clock", "/model"}) {
		t.Errorf("routes = %v; want one tool call", got)
	}
	var p struct{ Messages []message }
	json.Unmarshal([]byte(b.gotBodies("/model")[1]), &p)
	var tools int
	for _, m := range p.Messages {
		if m.Role == "tool" {
			tools++
			if m.Content != refusedText {
				t.Errorf("tool %s content = %q; want %q", m.ToolCallID, m.Content, refusedText)
			}
		}
	}
	if tools != 5 {
		t.Errorf("tool messages = %d; want 5", tools)
	}
}

func TestAgentSystemPromptAndTools(t *testing.T) {
	b := startBroker(t, completion("Hi."))
	turn := testTurn("alice", "Hi")
	turn.TimeZone = "America/New_York"
	wantOK(t, runWorker(t, b, t.TempDir(), turn), "Hi.")
	var p struct {
		Model    string
		Messages []message
		Tools    []modelTool
	}
	if err := json.Unmarshal([]byte(b.gotBodies("/model")[0]), &p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Messages[0].Content, "Current time: 1/2/2026, 10:04:05 AM.") {
		t.Errorf("system = %q; want the New York time", p.Messages[0].Content)
	}
	var names []string
	for _, tool := range p.Tools {
		names = append(names, tool.Function.Name)
	}
	if diff := cmp.Diff([]string{"invalid_tool", "memory_set", "memory_get", "memory_remove"}, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	user := p.Messages[len(p.Messages)-1]
	if want := `{"speaker":{"id":"alice","name":"ALICE"},"message":"Hi"}`; user.Role != "user" || user.Content != want {
		t.Errorf("user message = %+v; want content %s", user, want)
	}
}

func TestAgentRefusesBadTurnSetup(t *testing.T) {
	huge := testTurn("alice", "Hi")
	huge.Tools = []rtsandbox.ToolSpec{{Name: "big", Description: strings.Repeat("d", maxToolList), Parameters: json.RawMessage(`{}`)}}
	badZone := testTurn("alice", "Hi")
	badZone.TimeZone = "Mars/Olympus"
	emptyZone := testTurn("alice", "Hi")
	emptyZone.TimeZone = ""
	for name, turn := range map[string]rtsandbox.Turn{"tool-list-over-budget": huge, "unknown-time-zone": badZone, "empty-time-zone": emptyZone} {
		t.Run(name, func(t *testing.T) {
			b := startBroker(t)
			wantFailed(t, runWorker(t, b, t.TempDir(), turn))
			if routes := b.gotRoutes(); len(routes) != 0 {
				t.Errorf("routes = %v; want none", routes)
			}
		})
	}
}

// The budget rule drops history first, then whole assistant+tool groups,
// never leaving an orphan tool reply.
func TestAgentFitContext(t *testing.T) {
	big := strings.Repeat("z", 70*1024)
	a := &agent{histLeft: 2, payload: modelPayload{Model: "m", Messages: []message{
		{Role: "system", Content: "s"},
		{Role: "user", Content: big}, {Role: "assistant", Content: "old"},
		{Role: "user", Content: "current"},
		{Role: "assistant", Content: big, ToolCalls: []toolCall{{ID: "a", Type: "function"}}},
		{Role: "tool", ToolCallID: "a", Content: big},
		{Role: "assistant", Content: "x", ToolCalls: []toolCall{{ID: "b", Type: "function"}}},
		{Role: "tool", ToolCallID: "b", Content: big},
	}}}
	if err := a.fitContext(); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range a.payload.Messages {
		roles = append(roles, m.Role+":"+m.ToolCallID)
	}
	if diff := cmp.Diff([]string{"system:", "user:", "assistant:", "tool:b"}, roles); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if jsonjs.Size(a.payload) > maxPayload {
		t.Errorf("payload still over budget")
	}

	a.payload.Messages = []message{{Role: "system", Content: strings.Repeat("s", maxPayload)}, {Role: "user", Content: "u"}}
	if err := a.fitContext(); err == nil {
		t.Errorf("fitContext() with an oversized system message = nil; want error")
	}
}
