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
	// DemoNoMemoryTool answers a memory request when the request offers
	// no memory tool under either name.
	DemoNoMemoryTool = "I have no memory tool in this channel, so I cannot remember or recall anything."
)

// Where each mode's worker hands the model the speaker's memory. Both are
// a label and a JSON list [{"key":…,"text":…}, …] on one line.
const (
	// speakerMemoryLine is the sealed worker's system-prompt preview
	// (worker/prompt.go systemPrompt).
	speakerMemoryLine = "Current speaker memory (untrusted data): "
	// sessionMemoryLine is the session prompt's memory block, built by
	// the host (memstore/prompt.go speakerLabel); a cut list is followed
	// by a note after the JSON.
	sessionMemoryLine = "Speaker memory (this speaker's own entries, JSON data): "
)

// workerRefused is the worker's tool text for any failed call
// (worker/tools.go refusedText).
const workerRefused = "Tool call refused or failed."

// The memory tools under each mode's name, the sealed name first: the
// sealed worker offers memory_set and memory_get, the session worker the
// host tools host_memory_set and host_memory_get (docs/session-mode.md,
// "Memory").
var (
	memorySetNames = []string{"memory_set", "host_memory_set"}
	memoryGetNames = []string{"memory_get", "host_memory_get"}
)

var (
	rememberDrink = regexp.MustCompile(`(?i)\bremember\s+that\s+i\s+drink\s+(.+)`)
	askDrink      = regexp.MustCompile(`(?i)\bwhat\s+do\s+i\s+drink\b`)
)

// MemoryDemo is a stateless step that plays the memory demo against either
// worker; use it with Options.Loop. Everything it decides comes from the
// request, so it is deterministic and any number of turns can share it:
//
//   - "remember that I drink tea" → memory_set {scope:"speaker",
//     key:"drink", text:"tea"} (host_memory_set when the request offers
//     that name instead), then, on the tool result, "I'll remember that
//     you drink tea."
//   - "what do I drink?" → the answer from the speaker's memory in the
//     system message (the sealed preview or the session memory block);
//     when it has no usable entry (empty, or cut by the prompt budget),
//     memory_get {scope:"speaker"} (or host_memory_get) and the answer
//     from its result.
//   - anything else → a short help text.
//
// It calls only a tool the request offers; with no memory tool offered it
// says so (DemoNoMemoryTool).
func MemoryDemo() Step {
	return Func(func(req Request) Response {
		if resp, ok := memoryScript(req); ok {
			return resp
		}
		return Response{Content: DemoHelp}
	})
}

// memoryScript answers the memory demo's turns: a remember or a question
// in the last user message, or the result of its own tool call. ok is
// false when the request is none of these.
func memoryScript(req Request) (Response, bool) {
	if last := req.Last(); last.Role == "tool" {
		call, ok := callFor(req, last.ToolCallID)
		if !ok {
			return Response{}, false
		}
		switch {
		case isOneOf(call.Function.Name, memorySetNames):
			return afterMemorySet(call, last), true
		case isOneOf(call.Function.Name, memoryGetNames):
			if drink, ok := drinkIn(last.Text()); ok {
				return Response{Content: DemoAnswerPrefix + drink + "."}, true
			}
			return Response{Content: DemoDontKnow}, true
		}
		return Response{}, false
	}
	text := req.UserText()
	if m := rememberDrink.FindStringSubmatch(text); m != nil {
		name, ok := req.offered(memorySetNames)
		if !ok {
			return Response{Content: DemoNoMemoryTool}, true
		}
		drink := strings.TrimRight(strings.TrimSpace(m[1]), ".!? ")
		return Response{ToolCalls: []ToolCall{
			withID(Call(name, map[string]string{"scope": "speaker", "key": "drink", "text": drink}), "call_memory_set"),
		}}, true
	}
	if askDrink.MatchString(text) {
		if drink, ok := drinkIn(memoryOf(req.System())); ok {
			return Response{Content: DemoAnswerPrefix + drink + "."}, true
		}
		name, ok := req.offered(memoryGetNames)
		if !ok {
			return Response{Content: DemoNoMemoryTool}, true
		}
		return Response{ToolCalls: []ToolCall{
			withID(Call(name, map[string]string{"scope": "speaker"}), "call_memory_get"),
		}}, true
	}
	return Response{}, false
}

// afterMemorySet confirms a stored drink, or says it was not stored.
func afterMemorySet(call ToolCall, result Message) Response {
	var args struct{ Text string }
	if json.Unmarshal([]byte(call.Function.Arguments), &args) != nil || result.Text() == workerRefused {
		return Response{Content: "I could not remember that."}
	}
	return Response{Content: DemoRememberPrefix + args.Text + "."}
}

func withID(c ToolCall, id string) ToolCall { c.ID = id; return c }

func isOneOf(name string, names []string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// offered returns the first of names that the request's tools list
// offers, so a script never calls a tool the worker did not offer.
func (r Request) offered(names []string) (string, bool) {
	for _, n := range names {
		for _, t := range r.Body.Tools {
			if t.Function.Name == n {
				return n, true
			}
		}
	}
	return "", false
}

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

// memoryOf returns the speaker's memory list from the system prompt: the
// sealed preview's or the session block's, whatever follows the list on
// its line left out.
func memoryOf(system string) string {
	for line := range strings.Lines(system) {
		for _, label := range []string{speakerMemoryLine, sessionMemoryLine} {
			if rest, ok := strings.CutPrefix(line, label); ok {
				var list json.RawMessage
				if json.NewDecoder(strings.NewReader(rest)).Decode(&list) != nil {
					return strings.TrimSpace(rest) // cut: drinkIn finds nothing in it
				}
				return string(list)
			}
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
