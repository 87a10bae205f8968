package worker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// nearCapacityNotes is the reference's near-capacity store: 144 channel notes of 2,048
// characters, the first 32 CJK (3 bytes each).
func nearCapacityNotes() []rtsandbox.MemoryEntry {
	var notes []rtsandbox.MemoryEntry
	for i := range 144 {
		text := strings.Repeat("n", 2048)
		if i < 32 {
			text = strings.Repeat("\u4e01", 2048)
		}
		notes = append(notes, rtsandbox.MemoryEntry{Scope: "channel", Key: fmt.Sprintf("note_%d", i), Text: text})
	}
	return notes
}

// hugeHistory is the largest history the host keeps: 20 messages whose
// content is exactly the history budget JSON-encoded. (The reference's
// test wrote 20 × 100,000 characters into history.json; the worker never
// returns more than the budget, and that file would not fit the turn.)
func hugeHistory() []rtsandbox.HistoryEntry {
	var history []rtsandbox.HistoryEntry
	for i := range rtsandbox.MaxHistory {
		history = append(history, rtsandbox.HistoryEntry{Role: []string{"user", "assistant"}[i%2], Content: strings.Repeat("h", budgetHistory-2)})
	}
	return history
}

// exchange is the history a final answer adds for speaker's text.
func exchange(speaker, text, answer string) []rtsandbox.HistoryEntry {
	user, err := userContent(testTurn(speaker, text))
	if err != nil {
		panic(err)
	}
	return []rtsandbox.HistoryEntry{
		{Role: "user", Content: promptText(user, budgetHistory)},
		{Role: "assistant", Content: promptText(answer, budgetHistory)},
	}
}

// The reference's test "Near-capacity store and huge history still fit."
func TestAgentNearCapacityStoreAndHugeHistoryFit(t *testing.T) {
	ch := newChannel(nearCapacityNotes(), hugeHistory())
	b := startBroker(t,
		completion(nil, call("c1", "memory_remove", `{"scope":"channel","key":"note_0"}`)),
		completion("Removed."),
	)
	text := strings.Repeat("\u4e01", 20000)
	r := runWorker(t, b, ch, testTurn("alice", text))
	wantOK(t, r, "Removed.")

	bodies := b.gotBodies(wire.RouteModel)
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
	mem := &memory{entries: ch.state.Memory}
	if got, _ := mem.call("memory_get", fields(`{"scope":"channel","key":"note_0"}`), "alice"); got != "[]" {
		t.Errorf("memory_get note_0 = %q; want []", got)
	}
	if n := len(ch.state.Memory); n != 143 {
		t.Errorf("returned memory has %d entries; want 143", n)
	}
	// The history the budget dropped from the calls is still returned.
	want := append(hugeHistory()[2:], exchange("alice", text, "Removed.")...)
	if diff := cmp.Diff(want, ch.state.History); diff != "" {
		t.Errorf("returned history (-want +got):\n%s", diff)
	}
}

// The reference's test "Tool loop, scoping and history": the host passes back, turn after
// turn, the state the worker returned.
func TestAgentToolLoopScopingAndHistory(t *testing.T) {
	ch := newChannel(nil, nil)
	b := startBroker(t,
		completion(nil,
			call("set", "memory_set", `{"scope":"speaker","key":"drink","text":"Tea","speaker":"owner"}`),
			call("sh", "bash", `{}`),
		),
		completion("Remembered."),
	)
	wantOK(t, runWorker(t, b, ch, testTurn("alice", "Remember that I drink tea.")), "Remembered.")
	if bodies := b.gotBodies(wire.RouteModel); len(bodies) != 2 || !strings.Contains(bodies[1], refusedText) {
		t.Fatalf("second request = %q; want it to contain %q", bodies, refusedText)
	}
	tea := []rtsandbox.MemoryEntry{{Scope: "speaker:alice", Key: "drink", Text: "Tea"}}
	if diff := cmp.Diff(tea, ch.state.Memory); diff != "" {
		t.Errorf("memory after turn 1 (-want +got):\n%s", diff)
	}
	history := exchange("alice", "Remember that I drink tea.", "Remembered.")
	if diff := cmp.Diff(history, ch.state.History); diff != "" {
		t.Errorf("history after turn 1 (-want +got):\n%s", diff)
	}

	b2 := startBroker(t, completion("You drink Tea."))
	wantOK(t, runWorker(t, b2, ch, testTurn("alice", "What do I drink?")), "You drink Tea.")
	first := b2.gotBodies(wire.RouteModel)[0]
	for _, want := range []string{"Tea", "Remembered."} {
		if !strings.Contains(first, want) {
			t.Errorf("turn 2 request lacks %q", want)
		}
	}
	if n := len(ch.state.History); n != 4 {
		t.Errorf("history after turn 2 has %d messages; want 4", n)
	}

	b3 := startBroker(t, completion("Hello Bob."))
	turn := testTurn("bob", "Hello")
	turn.Reset = true
	wantOK(t, runWorker(t, b3, ch, turn), "Hello Bob.")
	first = b3.gotBodies(wire.RouteModel)[0]
	for _, unwanted := range []string{"Tea", "Remembered."} {
		if strings.Contains(first, unwanted) {
			t.Errorf("reset turn request contains %q", unwanted)
		}
	}
	if diff := cmp.Diff(exchange("bob", "Hello", "Hello Bob."), ch.state.History); diff != "" {
		t.Errorf("history after the reset turn (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tea, ch.state.Memory); diff != "" {
		t.Errorf("memory after the reset turn (-want +got):\n%s", diff)
	}
}

// The reply returns the whole store after the turn's tool calls, in stored
// order (an update moves to the end), and the history the turn received,
// truncated to the budget, plus this exchange, keeping the last 20.
func TestAgentReturnsState(t *testing.T) {
	memory := []rtsandbox.MemoryEntry{
		{Scope: "speaker:alice", Key: "color", Text: "blue"},
		{Scope: "channel", Key: "meeting", Text: "Wednesday"},
		{Scope: "speaker:bob", Key: "drink", Text: "Coffee"},
	}
	var history []rtsandbox.HistoryEntry
	for i := range rtsandbox.MaxHistory {
		history = append(history, rtsandbox.HistoryEntry{Role: []string{"user", "assistant"}[i%2], Content: fmt.Sprint("m", i)})
	}
	history[3].Content = strings.Repeat("h", 20000) // longer than the host keeps
	ch := newChannel(slices.Clone(memory), slices.Clone(history))
	answer := strings.Repeat("a", 9000)
	b := startBroker(t,
		completion(nil,
			call("a", "memory_set", `{"scope":"speaker","key":"color","text":"red"}`),
			call("b", "memory_remove", `{"scope":"channel","key":"meeting"}`),
			call("c", "memory_set", `{"scope":"channel","key":"lunch","text":" noon "}`),
		),
		completion(answer),
	)
	text := strings.Repeat("u", 9000)
	r := runWorker(t, b, ch, testTurn("alice", text))
	wantOK(t, r, answer)

	wantHistory := slices.Clone(history[2:])
	wantHistory[1].Content = promptText(history[3].Content, budgetHistory)
	wantHistory = append(wantHistory, exchange("alice", text, answer)...)
	want := rtsandbox.ChannelState{
		Memory: []rtsandbox.MemoryEntry{
			{Scope: "speaker:bob", Key: "drink", Text: "Coffee"},
			{Scope: "speaker:alice", Key: "color", Text: "red"},
			{Scope: "channel", Key: "lunch", Text: " noon "},
		},
		History: wantHistory,
	}
	if diff := cmp.Diff(want, ch.state); diff != "" {
		t.Errorf("returned state (-want +got):\n%s", diff)
	}
	// The whole reply is JS-style JSON in the wire order.
	out, _ := jsonjs.Marshal(rtsandbox.Reply{OK: true, Text: answer, State: &want})
	if r.stdout != string(out)+string(wire.ReplyEnd) {
		t.Errorf("stdout = %.120q; want %.120q", r.stdout, out)
	}
}

// A turn that fails after a memory tool ran returns the fixed failure reply
// and no state, so nothing the turn did is kept.
func TestAgentFailedTurnReturnsNoState(t *testing.T) {
	set := call("s", "memory_set", `{"scope":"channel","key":"new","text":"planted"}`)
	tests := []struct {
		name   string
		script []string
	}{
		{"no-final-text", []string{completion(nil, set), completion(nil)}},
		{"invalid-model-response", []string{completion(nil, set), `{"choices":[]}`}},
		{"too-many-tool-calls", []string{completion(nil, set), completion(nil, set, set, set, set, set, set, set, set, set)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			memory := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "old", Text: "kept"}}
			history := exchange("alice", "Earlier", "Earlier answer.")
			ch := newChannel(slices.Clone(memory), slices.Clone(history))
			b := startBroker(t, tt.script...)
			r := runWorker(t, b, ch, testTurn("alice", "Hi"))
			wantFailed(t, r)
			if strings.Contains(r.stdout, "planted") || strings.Contains(r.stdout, "state") {
				t.Errorf("stdout = %q; want no state", r.stdout)
			}
			if diff := cmp.Diff(rtsandbox.ChannelState{Memory: memory, History: history}, ch.state); diff != "" {
				t.Errorf("channel state changed (-want +got):\n%s", diff)
			}
		})
	}
}

// A refused memory change (the store is full) leaves the returned memory
// exactly as the turn passed it.
func TestAgentCapacityRefusalKeepsState(t *testing.T) {
	var full []rtsandbox.MemoryEntry
	for i := range maxMemoryEntries {
		full = append(full, rtsandbox.MemoryEntry{Scope: "channel", Key: fmt.Sprint("k", i), Text: "t"})
	}
	ch := newChannel(slices.Clone(full), nil)
	b := startBroker(t,
		completion(nil, call("s", "memory_set", `{"scope":"speaker","key":"new","text":"t"}`)),
		completion("Full."),
	)
	wantOK(t, runWorker(t, b, ch, testTurn("alice", "Remember")), "Full.")
	if bodies := b.gotBodies(wire.RouteModel); len(bodies) != 2 || !strings.Contains(bodies[1], refusedText) {
		t.Errorf("second request = %.200q; want the refusal", bodies)
	}
	if diff := cmp.Diff(full, ch.state.Memory); diff != "" {
		t.Errorf("returned memory (-want +got):\n%s", diff)
	}
}

// The reference's test "Declared routes only."
func TestAgentDeclaredRoutesOnly(t *testing.T) {
	b := startBroker(t,
		completion(nil, call("a", "host_clock", `{}`), call("b", "mcp_0_search", `{"query":"a"}`)),
		completion("Done."),
	)
	b.handle(wire.ToolRoute("clock"), func(string) (int, string) { return 200, `{"text":"noon"}` })
	b.handle(wire.MCPRoute("catalog"), func(string) (int, string) {
		return 200, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"found"}]}}`
	})
	turn := testTurn("alice", "What time is it?")
	params := json.RawMessage(`{"type":"object","properties":{}}`)
	turn.Tools = []rtsandbox.ToolSpec{{Name: "clock", Description: "Tell the time.", Parameters: params}}
	turn.MCP = []wire.MCPServerTools{{Server: "catalog", Tools: []rtsandbox.ToolSpec{{Name: "search", Description: "Search.", Parameters: params}}}}
	wantOK(t, runWorker(t, b, newChannel(nil, nil), turn), "Done.")

	want := []string{wire.RouteModel, wire.ToolRoute("clock"), wire.MCPRoute("catalog"), wire.RouteModel}
	if diff := cmp.Diff(want, b.gotRoutes()); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	bodies := b.gotBodies(wire.RouteModel)
	if !strings.Contains(bodies[0], `"name":"host_clock"`) {
		t.Errorf("first request tools lack host_clock: %s", bodies[0])
	}
	if got, want := b.gotBodies(wire.MCPRoute("catalog"))[0], `{"method":"tools/call","params":{"name":"search","arguments":{"query":"a"}}}`; got != want {
		t.Errorf("mcp body = %s; want %s", got, want)
	}
	for _, want := range []string{`{\"text\":\"noon\"}`, `\"text\":\"found\"`} {
		if !strings.Contains(bodies[1], want) {
			t.Errorf("second request lacks tool result %s", want)
		}
	}
}

// The reference's tests: the 13th model call is never made. The limit reply (exit 0)
// returns the memory changes the turn made and the history as it came (empty
// after a reset): no exchange is added without a final answer.
func TestAgentStopsAtModelCallLimit(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprint("reset=", reset), func(t *testing.T) {
			script := []string{completion(nil, call("set", "memory_set", `{"scope":"channel","key":"loop","text":"seen"}`))}
			for i := range maxModelCalls {
				script = append(script, completion(nil, call(fmt.Sprint("c", i), "memory_get", `{"scope":"channel"}`)))
			}
			b := startBroker(t, script...)
			memory := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "old", Text: "kept"}}
			history := exchange("alice", "Earlier", "Earlier answer.")
			ch := newChannel(slices.Clone(memory), slices.Clone(history))
			turn := testTurn("alice", "Loop")
			turn.Reset = reset
			r := runWorker(t, b, ch, turn)
			if r.code != 0 || r.reply.OK || r.reply.Text != limitText {
				t.Fatalf("Run() = %d, %.200q; want 0 and ok:false %q", r.code, r.stdout, limitText)
			}
			if n := len(b.gotBodies(wire.RouteModel)); n != maxModelCalls {
				t.Errorf("model calls = %d; want %d", n, maxModelCalls)
			}
			want := rtsandbox.ChannelState{
				Memory:  append(memory, rtsandbox.MemoryEntry{Scope: "channel", Key: "loop", Text: "seen"}),
				History: history,
			}
			if reset {
				want.History = []rtsandbox.HistoryEntry{}
			}
			if diff := cmp.Diff(want, ch.state); diff != "" {
				t.Errorf("returned state (-want +got):\n%s", diff)
			}
		})
	}
}

// The reference's tests: 9 tool calls fail the worker.
func TestAgentRefusesTooManyToolCalls(t *testing.T) {
	var calls []map[string]any
	for i := range rtsandbox.MaxToolCallsPerMessage + 1 {
		calls = append(calls, call(fmt.Sprint("c", i), "memory_get", `{"scope":"channel"}`))
	}
	b := startBroker(t, completion(nil, calls...))
	wantFailed(t, runWorker(t, b, newChannel(nil, nil), testTurn("alice", "Many")))
}

// The reference's tests: arguments over 2,048 bytes show the placeholder in context but run
// with the original arguments.
func TestAgentLargeArgumentsRunWithOriginal(t *testing.T) {
	args := `{"q":"` + strings.Repeat("x", 3000) + `"}`
	b := startBroker(t, completion(nil, call("big", "host_echo", args)), completion("Echoed."))
	b.handle(wire.ToolRoute("echo"), func(string) (int, string) { return 200, `{"text":"ok"}` })
	turn := testTurn("alice", "Echo")
	turn.Tools = []rtsandbox.ToolSpec{{Name: "echo", Description: "Echo.", Parameters: json.RawMessage(`{"type":"object"}`)}}
	wantOK(t, runWorker(t, b, newChannel(nil, nil), turn), "Echoed.")

	if got := b.gotBodies(wire.ToolRoute("echo")); len(got) != 1 || got[0] != args {
		t.Errorf("tool body = %.80q; want the original arguments", got)
	}
	second := b.gotBodies(wire.RouteModel)[1]
	placeholder, _ := json.Marshal(omittedArguments)
	if !strings.Contains(second, string(placeholder)) || strings.Contains(second, strings.Repeat("x", 3000)) {
		t.Errorf("second request does not show the placeholder instead of the arguments")
	}
}

// The reference's tests: invalid state in the turn (formerly a broken history.json or
// memory.json) fails the worker before any broker call.
func TestAgentRejectsInvalidTurnState(t *testing.T) {
	repeat := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	const msg, entry = `{"role":"user","content":"x"}`, `{"scope":"channel","key":"k","text":"t"}`
	tests := []struct{ name, in string }{
		{"history-21-entries", turnWith("history", repeat(21, msg))},
		{"history-system-role", turnWith("history", `[{"role":"system","content":"x"}]`)},
		{"history-role-missing", turnWith("history", `[{"content":"x"}]`)},
		{"history-not-array", turnWith("history", msg)},
		{"history-entry-not-object", turnWith("history", `["x"]`)},
		{"history-content-not-string", turnWith("history", `[{"role":"user","content":1}]`)},
		{"history-null", turnWith("history", `null`)},
		{"history-missing", turnWith("history", "")},
		{"history-missing-with-reset", strings.Replace(turnWith("history", ""), "{", `{"reset":true,`, 1)},
		{"memory-257-entries", turnWith("memory", repeat(257, entry))},
		{"memory-entry-not-string", turnWith("memory", `[{"scope":"channel","key":"k","text":null}]`)},
		{"memory-entry-key-missing", turnWith("memory", `[{"scope":"channel","text":"t"}]`)},
		{"memory-entry-null", turnWith("memory", `[null]`)},
		{"memory-not-array", turnWith("memory", entry)},
		{"memory-null", turnWith("memory", `null`)},
		{"memory-missing", turnWith("memory", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := startBroker(t)
			r := runWorkerRaw(t, b.sock, tt.in)
			wantFailed(t, r)
			field, _, _ := strings.Cut(tt.name, "-")
			if want := "invalid turn: " + field; !strings.Contains(r.stderr, want) {
				t.Errorf("stderr = %q; want %q", r.stderr, want)
			}
			if routes := b.gotRoutes(); len(routes) != 0 {
				t.Errorf("routes = %v; want none", routes)
			}
		})
	}
	// The limits themselves are accepted.
	for name, in := range map[string]string{
		"history-20-entries": turnWith("history", repeat(20, msg)),
		"memory-256-entries": turnWith("memory", repeat(256, entry)),
	} {
		t.Run(name, func(t *testing.T) {
			b := startBroker(t, completion("Fine."))
			wantOK(t, runWorkerRaw(t, b.sock, in), "Fine.")
		})
	}
}

// A reset turn ignores the history it is passed (the host sends none) and
// returns a history holding only its own exchange; memory is kept.
func TestAgentResetIgnoresAndReplacesHistory(t *testing.T) {
	memory := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: "kept"}}
	b := startBroker(t, completion("Fresh."))
	turn := testTurn("alice", "Hi")
	turn.Reset = true
	turn.Memory = memory
	turn.History = exchange("alice", "an old secret", "Old answer.")
	in, err := jsonjs.Marshal(turn)
	if err != nil {
		t.Fatal(err)
	}
	r := runWorkerRaw(t, b.sock, string(in))
	wantOK(t, r, "Fresh.")
	if body := b.gotBodies(wire.RouteModel)[0]; strings.Contains(body, "an old secret") || strings.Contains(body, "Old answer.") {
		t.Errorf("reset turn request contains the old history")
	}
	var reply rtsandbox.Reply
	json.Unmarshal([]byte(r.stdout), &reply)
	want := rtsandbox.ChannelState{Memory: memory, History: exchange("alice", "Hi", "Fresh.")}
	if diff := cmp.Diff(want, *reply.State); diff != "" {
		t.Errorf("returned state (-want +got):\n%s", diff)
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
		{"max-length-text", completion(strings.Repeat("a", rtsandbox.MaxReplyText)), 200, strings.Repeat("a", rtsandbox.MaxReplyText)},
		{"blank-text", completion(" \n\t\u3000"), 200, ""},
		{"null-content", completion(nil), 200, ""},
		{"trailing-blank-over-limit", completion(strings.Repeat("a", rtsandbox.MaxReplyText) + " "), 200, strings.Repeat("a", rtsandbox.MaxReplyText)},
		{"text-too-long-cut-with-notice", completion(strings.Repeat("a", rtsandbox.MaxReplyText+1)), 200,
			strings.Repeat("a", rtsandbox.MaxReplyText-rtsandbox.UTF16Len(answerCutNotice)) + answerCutNotice},
		{"astral-text-cut-on-a-character", completion(strings.Repeat("\U0001F600", rtsandbox.MaxReplyText)), 200,
			strings.Repeat("\U0001F600", (rtsandbox.MaxReplyText-rtsandbox.UTF16Len(answerCutNotice))/2) + answerCutNotice},
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
			b.handle(wire.RouteModel, func(string) (int, string) { return tt.status, tt.answer })
			r := runWorker(t, b, newChannel(nil, nil), testTurn("alice", "Hi"))
			if tt.want == "" {
				wantFailed(t, r)
				return
			}
			wantOK(t, r, tt.want)
			if got := r.reply.State.History; len(got) != 2 || got[1].Content != promptText(tt.want, budgetHistory) {
				t.Errorf("returned history = %.200v; want the answer as the last message", got)
			}
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
	b.handle(wire.ToolRoute("clock"), func(string) (int, string) { return 502, `{"error":"broker call failed"}` })
	turn := testTurn("alice", "Time?")
	turn.Tools = []rtsandbox.ToolSpec{{Name: "clock", Description: "Clock.", Parameters: json.RawMessage(`{}`)}}
	wantOK(t, runWorker(t, b, newChannel(nil, nil), turn), "Sorry.")
	if got := b.gotRoutes(); !cmp.Equal(got, []string{wire.RouteModel, wire.ToolRoute("clock"), wire.RouteModel}) {
		t.Errorf("routes = %v; want one tool call", got)
	}
	var p struct{ Messages []message }
	json.Unmarshal([]byte(b.gotBodies(wire.RouteModel)[1]), &p)
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
	wantOK(t, runWorker(t, b, newChannel(nil, nil), turn), "Hi.")
	var p struct {
		Model    string
		Messages []message
		Tools    []wire.ChatTool
	}
	if err := json.Unmarshal([]byte(b.gotBodies(wire.RouteModel)[0]), &p); err != nil {
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
	for name, turn := range map[string]wire.Turn{"tool-list-over-budget": huge, "unknown-time-zone": badZone, "empty-time-zone": emptyZone} {
		t.Run(name, func(t *testing.T) {
			b := startBroker(t)
			wantFailed(t, runWorker(t, b, newChannel(nil, nil), turn))
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
	a := &agent{model: openaiClient{}, histLeft: 2, payload: modelPayload{Model: "m", Messages: []message{
		{Role: "system", Content: "s"},
		{Role: "user", Content: big}, {Role: "assistant", Content: "old"},
		{Role: "user", Content: "current"},
		{Role: "assistant", Content: big, ToolCalls: []wire.ToolCall{{ID: "a", Type: "function"}}},
		{Role: "tool", ToolCallID: "a", Content: big},
		{Role: "assistant", Content: "x", ToolCalls: []wire.ToolCall{{ID: "b", Type: "function"}}},
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

// A session conversation outgrows the /model rule's message bound long
// before its size budget: fitContext drops whole exchanges, oldest first,
// until the request has at most rtsandbox.MaxModelMessages messages, and
// keeps the system prompt, the newest exchanges and the current message.
func TestAgentFitContextMessageBound(t *testing.T) {
	tests := []struct {
		name    string
		history int // user+assistant exchanges before the current message
		want    int // messages after fitContext
	}{
		{"within the bound", 63, 128},
		{"one exchange over", 64, 128},
		{"far over", 500, 128},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := []message{{Role: "system", Content: "s"}}
			for i := range tt.history {
				msgs = append(msgs, message{Role: "user", Content: fmt.Sprint("q", i)}, message{Role: "assistant", Content: fmt.Sprint("a", i)})
			}
			msgs = append(msgs, message{Role: "user", Content: "current"})
			if len(msgs) < tt.want {
				tt.want = len(msgs)
			}
			a := &agent{model: openaiClient{}, histLeft: 2 * tt.history, exchanges: true, maxPayload: bytesPerToken * newTiers(0, 0).native(),
				payload: modelPayload{Model: "m", Messages: msgs}}
			if err := a.fitContext(); err != nil {
				t.Fatal(err)
			}
			got := a.payload.Messages
			if len(got) > rtsandbox.MaxModelMessages || len(got) < tt.want-1 {
				t.Fatalf("%d messages; want at most %d, dropping whole exchanges only", len(got), rtsandbox.MaxModelMessages)
			}
			last := fmt.Sprint("a", tt.history-1)
			if got[0].Role != "system" || got[1].Role != "user" || got[len(got)-1].Content != "current" || got[len(got)-2].Content != last {
				t.Errorf("kept %q … %q; want the system prompt, whole exchanges, the newest ones and the current message",
					[]string{got[0].Content, got[1].Content}, []string{got[len(got)-2].Content, got[len(got)-1].Content})
			}
		})
	}
}
