package compactor

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
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
			if got := renderMessage(json.RawMessage(tc.msg)); got != tc.want {
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
		line := render([]json.RawMessage{msg})[0]
		if len(line) > maxMessageBytes+64 {
			t.Fatalf("rendered message of %d bytes", len(line))
		}
		if utf8.Valid(msg) && !utf8.ValidString(line) {
			t.Fatalf("rendered message is not UTF-8: %q", line)
		}
		req := rtsandbox.CompactRequest{Reason: rtsandbox.CompactManual, FirstKeptEntryID: "e", MessagesToSummarize: []json.RawMessage{msg, msg}}
		room = MinMaxInputBytes + int(uint(room)%uint(MaxMaxInputBytes-MinMaxInputBytes))
		text, n, err := transcript(req, room)
		if err != nil || n > 2 || len(text) > room+512 {
			t.Fatalf("transcript = %d bytes, %d messages, %v (room %d)", len(text), n, err, room)
		}
	})
}
