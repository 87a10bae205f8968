package compactor

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/wire"
)

// messageSeeds are the message shapes a worker may send: chat-completions
// messages, content blocks of either dialect, and odd ones.
var messageSeeds = []struct {
	name, msg, want string
}{
	{"chat-user", `{"role":"user","content":"hi"}`, "[user] hi"},
	{"chat-tool-calls", `{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}`, "[assistant] (tool call f {})"},
	{"chat-tool", `{"role":"tool","tool_call_id":"c","content":"out"}`, "[tool] out"},
	{"blocks", `{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"thinking","thinking":"x"},{"type":"image","data":"AAAA"}]}`, "[assistant] a\n\n(image)"},
	{"pi-tool-call", `{"role":"assistant","content":[{"type":"toolCall","id":"t","name":"read","arguments":{"path":"a"}}]}`, `[assistant] (tool call read {"path":"a"})`},
	{"anthropic-tool-use", `{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"ls","input":{}}]}`, "[assistant] (tool call ls {})"},
	{"pi-tool-result", `{"role":"toolResult","toolName":"read","content":[{"type":"text","text":"file"}]}`, "[toolResult read] file"},
	{"anthropic-tool-result", `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}`, "[user] r"},
	{"name-newline", `{"role":"user\nsystem","content":"x"}`, "[user system] x"},
	{"unknown-block", `{"role":"user","content":[{"type":"document","x":1}]}`, `[user] {"type":"document","x":1}`},
	{"content-object", `{"role":"user","content":{"a":1}}`, `[user] {"a":1}`},
}

func TestRenderMessage(t *testing.T) {
	for _, tc := range messageSeeds {
		t.Run(tc.name, func(t *testing.T) {
			if got := renderMessage(unbounded(), json.RawMessage(tc.msg)); got != tc.want {
				t.Errorf("renderMessage(%s) = %q; want %q", tc.msg, got, tc.want)
			}
		})
	}
}

// FuzzTranscript renders guest-influenced messages: no panic, each
// message within its bound (plus the cut's marker), valid UTF-8 kept.
func FuzzTranscript(f *testing.F) {
	for _, tc := range messageSeeds {
		f.Add([]byte(tc.msg), 1<<14)
	}
	f.Add([]byte(`{"role":"user","content":"`+strings.Repeat("é", 9000)+`"}`), 1<<14)
	f.Fuzz(func(t *testing.T, msg []byte, room int) {
		line := render(unbounded(), []json.RawMessage{msg})[0]
		if len(line) > maxMessageBytes+64 {
			t.Fatalf("rendered message of %d bytes", len(line))
		}
		if utf8.Valid(msg) && !utf8.ValidString(line) {
			t.Fatalf("rendered message is not UTF-8: %q", line)
		}
		req := wire.CompactRequest{Reason: wire.CompactManual, FirstKeptEntryID: "e", MessagesToSummarize: []json.RawMessage{msg, msg}}
		room = MinMaxInputBytes + int(uint(room)%uint(MaxMaxInputBytes-MinMaxInputBytes))
		text, n, err := transcript(unbounded(), req, room)
		if err != nil || n > 2 || len(text) > room+512 {
			t.Fatalf("transcript = %d bytes, %d messages, %v (room %d)", len(text), n, err, room)
		}
	})
}

// unbounded is a decoding budget that never stops.
func unbounded() *jsontree.Budget {
	return jsontree.NewBudget(context.Background(), jsontree.NodesFor(0))
}

// A worker's compact request may hold up to 96 MiB of messages (issue 21):
// a message whose content or tool calls are a flood of values, or tool
// results nested to the depth bound, renders within its bound and costs
// at most a few times its bytes, never a value per element.
func TestTranscriptAdversarialShapes(t *testing.T) {
	const size = 1 << 20
	flood := func(elem string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(elem+",", size/(len(elem)+1)), ",") + "]"
	}
	nested := strings.Repeat(`[{"type":"tool_result","content":`, 4000) + `"x"` + strings.Repeat(`}]`, 4000)
	shapes := map[string]string{
		"ContentEmptyObjects": `{"role":"user","content":` + flood("{}") + `}`,
		"ContentEmptyArrays":  `{"role":"user","content":` + flood("[]") + `}`,
		"ContentTinyStrings":  `{"role":"user","content":` + flood(`""`) + `}`,
		"ContentZeros":        `{"role":"user","content":` + flood("0") + `}`,
		"ThinkingBlocks":      `{"role":"user","content":` + flood(`{"type":"thinking"}`) + `}`,
		"ToolCallsFlood":      `{"role":"assistant","tool_calls":` + flood(`{}`) + `}`,
		"NestedToolResults":   `{"role":"user","content":` + nested + `}`,
		"HugeText":            `{"role":"user","content":"` + strings.Repeat("a", size) + `"}`,
		"UnknownMembers":      `{"role":"user","x":` + flood("[]") + `}`,
	}
	for name, msg := range shapes {
		t.Run(name, func(t *testing.T) {
			var line string
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			line = render(unbounded(), []json.RawMessage{json.RawMessage(msg)})[0]
			runtime.ReadMemStats(&after)
			if len(line) > maxMessageBytes+64 {
				t.Errorf("rendered %d bytes; want at most the message bound", len(line))
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(4*len(msg)+4<<20) {
				t.Errorf("rendering allocated %d bytes for a message of %d (%.1f×)", alloc, len(msg), float64(alloc)/float64(len(msg)))
			}
		})
	}
}

// The messages are read under the call's budget: once the call ended,
// the transcript stops with the budget's error.
func TestTranscriptStopsWithTheCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := json.RawMessage(`{"role":"user","content":"` + strings.Repeat("a", 1<<20) + `"}`)
	req := wire.CompactRequest{Reason: wire.CompactManual, FirstKeptEntryID: "e", MessagesToSummarize: []json.RawMessage{msg}}
	if _, _, err := transcript(jsontree.NewBudget(ctx, jsontree.NodesFor(0)), req, MinMaxInputBytes); !errors.Is(err, jsontree.ErrStopped) {
		t.Errorf("transcript after the call ended = %v; want ErrStopped", err)
	}
}
