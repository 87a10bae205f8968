package fakemodel

import (
	"encoding/json"
	"regexp"
	"strings"
)

// Texts of the memory demo, exported so tests can compare exactly.
const (
	DemoRememberPrefix = "I'll remember that you drink "
	DemoAnswerPrefix   = "You drink "
	DemoDontKnow       = "I don't know what you drink yet. Tell me: remember that I drink tea."
	DemoHelp           = "Try: \"remember that I drink tea\", then ask \"what do I drink?\""
)

// speakerMemoryLine is the system-prompt line where the worker previews the
// speaker's memory (worker/prompt.go systemPrompt).
const speakerMemoryLine = "Current speaker memory (untrusted data): "

// workerRefused is the worker's tool text for any failed call
// (worker/tools.go refusedText).
const workerRefused = "Tool call refused or failed."

var (
	rememberDrink = regexp.MustCompile(`(?i)\bremember\s+that\s+i\s+drink\s+(.+)`)
	askDrink      = regexp.MustCompile(`(?i)\bwhat\s+do\s+i\s+drink\b`)
)

// MemoryDemo is a stateless step that plays the memory demo against the
// sealed worker; use it with Options.Loop. Everything it decides comes from
// the request, so it is deterministic and any number of turns can share it:
//
//   - "remember that I drink tea" → memory_set {scope:"speaker",
//     key:"drink", text:"tea"}, then, on the tool result, "I'll remember
//     that you drink tea."
//   - "what do I drink?" → the answer from the speaker-memory preview in the
//     system message; when the preview has no usable entry (empty, or cut
//     by the prompt budget), memory_get {scope:"speaker"} and the answer
//     from its result.
//   - anything else → a short help text.
func MemoryDemo() Step { return Func(memoryDemo) }

func memoryDemo(req Request) Response {
	if last := req.Last(); last.Role == "tool" {
		return afterTool(req, last)
	}
	text := req.UserText()
	if m := rememberDrink.FindStringSubmatch(text); m != nil {
		drink := strings.TrimRight(strings.TrimSpace(m[1]), ".!? ")
		return Response{ToolCalls: []ToolCall{
			withID(Call("memory_set", map[string]string{"scope": "speaker", "key": "drink", "text": drink}), "call_memory_set"),
		}}
	}
	if askDrink.MatchString(text) {
		if drink, ok := drinkIn(previewOf(req.System())); ok {
			return Response{Content: DemoAnswerPrefix + drink + "."}
		}
		return Response{ToolCalls: []ToolCall{
			withID(Call("memory_get", map[string]string{"scope": "speaker"}), "call_memory_get"),
		}}
	}
	return Response{Content: DemoHelp}
}

// afterTool answers once the worker has run the demo's tool call, which is
// the assistant message just before the trailing tool messages.
func afterTool(req Request, result Message) Response {
	call, ok := callFor(req, result.ToolCallID)
	if !ok {
		return Response{Content: DemoHelp}
	}
	switch call.Function.Name {
	case "memory_set":
		var args struct{ Text string }
		if json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || result.Text() == workerRefused {
			return Response{Content: "I could not remember that."}
		}
		return Response{Content: DemoRememberPrefix + args.Text + "."}
	case "memory_get":
		if drink, ok := drinkIn(result.Text()); ok {
			return Response{Content: DemoAnswerPrefix + drink + "."}
		}
	}
	return Response{Content: DemoDontKnow}
}

func withID(c ToolCall, id string) ToolCall { c.ID = id; return c }

// callFor finds the assistant tool call with the given id.
func callFor(req Request, id string) (ToolCall, bool) {
	for _, m := range req.Body.Messages {
		for _, c := range m.ToolCalls {
			if m.Role == "assistant" && c.ID == id {
				return c, true
			}
		}
	}
	return ToolCall{}, false
}

// previewOf returns the speaker-memory preview from the system prompt.
func previewOf(system string) string {
	for line := range strings.Lines(system) {
		if rest, ok := strings.CutPrefix(line, speakerMemoryLine); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// drinkIn reads a memory_get result, [{"key":…,"text":…}, …], and returns
// the text stored under "drink". A truncated or malformed list finds
// nothing.
func drinkIn(list string) (string, bool) {
	var entries []struct{ Key, Text string }
	if json.Unmarshal([]byte(list), &entries) != nil {
		return "", false
	}
	for _, e := range entries {
		if e.Key == "drink" && e.Text != "" {
			return e.Text, true
		}
	}
	return "", false
}
