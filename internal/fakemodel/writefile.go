package fakemodel

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// The file script: "write a file notes.md saying hello" calls the session
// worker's write_file tool with name notes.md and content "hello\n" (a
// fixed line when nothing follows "saying"), then, on the tool's answer,
// says the file is attached, or why it is not. The worker checks the name
// and the bounds; the script passes the guest's words as they are.

// Texts of the file script, exported so tests can compare.
const (
	// FileDefaultContent is the file's text when the message gives none.
	FileDefaultContent = "Written by the rtsandbox stand-in model.\n"
	// FileNoTool answers when the request offers no write_file tool: a
	// sealed channel, which gets no files back.
	FileNoTool  = "I cannot write files here: only session channels offer the write_file tool."
	fileWritten = "I wrote %s; it is attached to this reply."
	fileFailed  = "I could not write %s: %s"
)

// writeFileTool is the session worker's tool (worker/writefile.go).
const writeFileTool = "write_file"

// maxFailure bounds the worker's refusal as the answer repeats it.
const maxFailure = 400

var writeAFile = regexp.MustCompile(`(?i)\bwrite\s+(?:a\s+)?file\s+(?:called\s+|named\s+)?(\S+)(?:[ \t]+(?:saying|containing|with)\b:?[ \t]*([^\n]*))?`)

// fileScript answers "write a file NAME [saying TEXT]" and its tool's
// result; ok is false for any other request.
func fileScript(req Request) (Response, bool) {
	if last := req.Last(); last.Role == "tool" {
		call, ok := callFor(req, last.ToolCallID)
		if !ok || call.Function.Name != writeFileTool {
			return Response{}, false
		}
		var args struct{ Name string }
		_ = json.Unmarshal([]byte(call.Function.Arguments), &args) // its own call: a name string
		if result := last.Text(); !strings.HasPrefix(result, "Saved ") {
			return Response{Content: fmt.Sprintf(fileFailed, args.Name, rtsandbox.PrefixUTF16(result, maxFailure))}, true
		}
		return Response{Content: fmt.Sprintf(fileWritten, args.Name)}, true
	}
	m := writeAFile.FindStringSubmatch(req.UserText())
	if m == nil {
		return Response{}, false
	}
	if _, ok := req.offered([]string{writeFileTool}); !ok {
		return Response{Content: FileNoTool}, true
	}
	name, content := FileOf(m[1], m[2])
	return Response{ToolCalls: []ToolCall{
		withID(Call(writeFileTool, map[string]string{"name": name, "content": content}), "call_write_file"),
	}}, true
}

// FileOf is the name and content the script writes for the words after
// "write a file" and after "saying": the name without trailing
// punctuation or quotes, the text as one line ending in a newline.
func FileOf(name, text string) (string, string) {
	name = strings.Trim(name, "\"'`")
	name = strings.TrimRight(name, ".,;:!?\"'`")
	if text = strings.TrimSpace(text); text == "" {
		return name, FileDefaultContent
	}
	return name, text + "\n"
}
