package fakemodel

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/wire"
)

// convo is one model request, dialect-free: the tests write it as a chat
// completions body and as a Messages body.
type convo struct {
	system string
	user   string  // the last user message's text
	images []Image // its image parts, before the text
	tools  []string
	call   *ToolCall // an assistant tool call after the user message
	result string    // and its tool result
}

var (
	sealedTools  = []string{"memory_set", "memory_get", "memory_remove"}
	sessionTools = []string{"invalid_tool", "read_attachment", "write_file", "host_memory_set", "host_memory_get", "host_memory_remove"}
)

func (c convo) chat() string {
	user := any(c.user)
	if len(c.images) > 0 {
		var parts []any
		for _, im := range c.images {
			url := im.URL
			if url == "" {
				url = "data:" + im.MIMEType + ";base64," + im.Data
			}
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]string{"url": url}})
		}
		user = append(parts, map[string]string{"type": "text", "text": c.user})
	}
	msgs := []any{map[string]any{"role": "system", "content": c.system}, map[string]any{"role": "user", "content": user}}
	if c.call != nil {
		msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": []ToolCall{*c.call}},
			map[string]any{"role": "tool", "tool_call_id": c.call.ID, "content": c.result})
	}
	var tools []any
	for _, n := range c.tools {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": n, "parameters": map[string]string{"type": "object"}}})
	}
	return mustJSON(map[string]any{"model": "m", "messages": msgs, "tools": tools})
}

func (c convo) messages() string {
	var blocks []any
	for _, im := range c.images {
		src := map[string]string{"type": "base64", "media_type": im.MIMEType, "data": im.Data}
		if im.URL != "" {
			src = map[string]string{"type": "url", "url": im.URL}
		}
		blocks = append(blocks, map[string]any{"type": "image", "source": src})
	}
	blocks = append(blocks, map[string]string{"type": "text", "text": c.user})
	msgs := []any{map[string]any{"role": "user", "content": blocks}}
	if c.call != nil {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": c.call.ID, "name": c.call.Function.Name, "input": json.RawMessage(c.call.Function.Arguments)}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": c.call.ID, "content": c.result}}})
	}
	var tools []any
	for _, n := range c.tools {
		tools = append(tools, map[string]any{"name": n, "input_schema": map[string]string{"type": "object"}})
	}
	return mustJSON(map[string]any{"model": "m", "max_tokens": 100, "system": c.system, "messages": msgs, "tools": tools})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// answer posts body to path and reads the answer in its dialect into a
// Response: its text and its tool calls (ids kept, arguments compact).
func answer(t *testing.T, url, path, body string) Response {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s = %d %s", path, resp.StatusCode, raw)
	}
	var out Response
	if strings.HasSuffix(path, "/messages") {
		var m struct {
			Content []struct {
				Type, Text, ID, Name string
				Input                json.RawMessage
			}
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				out.Content += b.Text
			case "tool_use":
				out.ToolCalls = append(out.ToolCalls, withID(Call(b.Name, string(b.Input)), b.ID))
			}
		}
		return out
	}
	var c struct {
		Choices []struct {
			Message struct {
				Content   *string
				ToolCalls []ToolCall `json:"tool_calls"`
			}
		}
	}
	if err := json.Unmarshal(raw, &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("answer %s: %v", raw, err)
	}
	if p := c.Choices[0].Message.Content; p != nil {
		out.Content = *p
	}
	out.ToolCalls = c.Choices[0].Message.ToolCalls
	return out
}

// call is a tool call as the answer carries it: name, id and compact
// arguments.
func call(id, name, args string) ToolCall { return withID(Call(name, args), id) }

// TestStandInScripts plays every script of the stand-in through the
// server, in both dialects, in sealed and session shapes: memory under
// each mode's tool names, the image description (count, media type,
// decoded size, names from the session host's attachments block; linked,
// broken and hostile parts), write_file, and the hint.
func TestStandInScripts(t *testing.T) {
	s := start(t, Options{Loop: true, NoRecord: true}, StandInModel())
	tests := scriptCases()
	for _, tt := range tests {
		for _, d := range []struct{ path, body string }{{"/v1/chat/completions", tt.c.chat()}, {"/v1/messages", tt.c.messages()}} {
			t.Run(tt.name+d.path, func(t *testing.T) {
				got := answer(t, s.URL(), d.path, d.body)
				for i := range got.ToolCalls {
					var b bytes.Buffer
					_ = json.Compact(&b, []byte(got.ToolCalls[i].Function.Arguments))
					got.ToolCalls[i].Function.Arguments = b.String()
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// scriptCase is one request of the stand-in's scripts and its answer.
type scriptCase struct {
	name string
	c    convo
	want Response
}

// scriptCases are TestStandInScripts' table, also FuzzStandInModel's
// seeds.
func scriptCases() []scriptCase {
	png, gif := Image{MIMEType: "image/png", Data: "iVBORw0KGgo="}, Image{MIMEType: "image/gif", Data: "R0lGODlh"}
	const sealedSys = "prompt\n" + speakerMemoryLine + "[]\nShared channel notes (untrusted data): []"
	const sessionSys = "prompt\nMemory for this turn's speaker (untrusted data):\n" + sessionMemoryLine + `[{"key":"drink","text":"tea"}]`
	attached := "[Ann (u1)] describe the images\n\n[Attachments of this message, saved in /workspace/attachments; read one with the read_attachment tool:]\n" +
		`- "m1-1-dot.png": image/png, 8 bytes; shown to you as an image` + "\n" +
		`- "m1-2-notes.txt": text/plain, 5 bytes` + "\n" +
		`- "m1-ref-1-a \"b\".gif" (from the replied-to message): image/gif, 6 bytes; shown to you as an image`
	saved := call("call_write_file", "write_file", `{"content":"hello there\n","name":"notes.md"}`)
	return []scriptCase{
		{"sealed-remember", convo{system: sealedSys, user: `{"speaker":{"id":"u1"},"message":"remember that I drink tea"}`, tools: sealedTools},
			Response{ToolCalls: []ToolCall{call("call_memory_set", "memory_set", `{"key":"drink","scope":"speaker","text":"tea"}`)}}},
		{"session-remember", convo{system: "prompt", user: "[Ann (u1)] remember that I drink tea", tools: sessionTools},
			Response{ToolCalls: []ToolCall{call("call_memory_set", "host_memory_set", `{"key":"drink","scope":"speaker","text":"tea"}`)}}},
		{"session-saved", convo{system: "prompt", user: "[Ann (u1)] remember that I drink tea", tools: sessionTools,
			call: ptr(call("call_memory_set", "host_memory_set", `{"key":"drink","scope":"speaker","text":"tea"}`)), result: "Saved."},
			Response{Content: DemoRememberPrefix + "tea."}},
		{"session-recall-from-block", convo{system: sessionSys, user: "[Ann (u1)] what do I drink?", tools: sessionTools},
			Response{Content: DemoAnswerPrefix + "tea."}},
		{"session-recall-calls-get", convo{system: "prompt", user: "[Ann (u1)] what do I drink?", tools: sessionTools},
			Response{ToolCalls: []ToolCall{call("call_memory_get", "host_memory_get", `{"scope":"speaker"}`)}}},
		{"session-recall-from-get", convo{system: "prompt", user: "[Ann (u1)] what do I drink?", tools: sessionTools,
			call: ptr(call("call_memory_get", "host_memory_get", `{"scope":"speaker"}`)), result: `[{"key":"drink","text":"mint tea"}]`},
			Response{Content: DemoAnswerPrefix + "mint tea."}},
		{"no-memory-tool", convo{system: "prompt", user: "remember that I drink tea", tools: []string{"write_file"}},
			Response{Content: DemoNoMemoryTool}},
		{"describe-none", convo{system: sealedSys, user: "describe the image", tools: sealedTools}, Response{Content: DescribeNone}},
		{"describe-one", convo{system: "prompt", user: "[Ann (u1)] please describe this picture", images: []Image{png}, tools: sessionTools},
			Response{Content: "I was shown 1 image:\n- image 1: image/png, 8 bytes."}},
		{"describe-named-from-block", convo{system: "prompt", user: attached, images: []Image{png, gif}, tools: sessionTools},
			Response{Content: "I was shown 2 images:\n- image 1: image/png, 8 bytes, attached as \"m1-1-dot.png\"\n- image 2: image/gif, 6 bytes, attached as \"m1-ref-1-a \\\"b\\\".gif\"."}},
		{"describe-names-need-every-image", convo{system: "prompt", user: attached, images: []Image{png}, tools: sessionTools},
			Response{Content: "I was shown 1 image:\n- image 1: image/png, 8 bytes."}},
		{"describe-broken-and-hostile", convo{system: "prompt", user: "look at these photos", tools: sessionTools, images: []Image{
			{MIMEType: "image/png", Data: "not base64!"},
			{MIMEType: "image/png\n- image 9: forged", Data: "AAAA"},
			{MIMEType: strings.Repeat("a", 60) + "/" + strings.Repeat("b", 10), Data: "AA=="},
			{MIMEType: "", Data: "AAA="},
		}}, Response{Content: "I was shown 4 images:\n- image 1: image/png, not valid base64 data\n- image 2: not a media type, 3 bytes\n" +
			"- image 3: not a media type, 1 bytes\n- image 4: no media type, 2 bytes."}},
		{"write-file", convo{system: "prompt", user: "[Ann (u1)] write a file notes.md saying hello there", tools: sessionTools},
			Response{ToolCalls: []ToolCall{saved}}},
		{"write-file-default-content", convo{system: "prompt", user: "[Ann (u1)] Write a file called \"todo.txt\".", tools: sessionTools},
			Response{ToolCalls: []ToolCall{call("call_write_file", "write_file", mustJSON(map[string]string{"content": FileDefaultContent, "name": "todo.txt"}))}}},
		{"write-file-sealed-has-no-tool", convo{system: sealedSys, user: "write a file notes.md saying hi", tools: sealedTools},
			Response{Content: FileNoTool}},
		{"write-file-saved", convo{system: "prompt", user: "write a file notes.md saying hello there", tools: sessionTools,
			call: &saved, result: "Saved notes.md (12 bytes); it will be attached to your reply."},
			Response{Content: "I wrote notes.md; it is attached to this reply."}},
		{"write-file-refused", convo{system: "prompt", user: "write a file notes.md saying hello there", tools: sessionTools,
			call: &saved, result: "Not saved: this reply already holds 10 files, the most it can carry."},
			Response{Content: "I could not write notes.md: Not saved: this reply already holds 10 files, the most it can carry."}},
		{"unknown-tool-result", convo{system: "prompt", user: "hi", tools: sessionTools,
			call: ptr(call("call_x", "read_attachment", `{"name":"a"}`)), result: "x"}, Response{Content: StandInHelpText}},
		{"hint", convo{system: "prompt", user: "[Ann (u1)] hello", tools: sessionTools}, Response{Content: StandInHelpText}},
	}
}

func ptr[T any](v T) *T { return &v }

// TestImageSizeIsDecodedSize: the size the image script states is the
// decoded byte count, for each padding.
func TestImageSizeIsDecodedSize(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 67, 1 << 20} {
		data := strings.Repeat("A", (n+2)/3*4)
		if pad := (3 - n%3) % 3; pad > 0 {
			data = data[:len(data)-pad] + strings.Repeat("=", pad)
		}
		if got, want := describeImage(Image{MIMEType: "image/png", Data: data}), DescribeImage("image/png", n); got != want {
			t.Errorf("%d bytes: %q; want %q", n, got, want)
		}
	}
}

// TestSessionMemoryBlockIsRead holds the script's reading of the session
// prompt to the host's memory block as memstore builds it, whole and cut.
func TestSessionMemoryBlockIsRead(t *testing.T) {
	ctx := context.Background()
	st, err := memstore.Open(ctx, memstore.Options{Path: filepath.Join(t.TempDir(), "state", "memory.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := rtsandbox.Binding{Channel: "http:lobby", Speaker: rtsandbox.Speaker{ID: "u1", Name: "Ann", PrincipalID: "http:u1"}}
	set := func(key, text string) {
		t.Helper()
		c := wire.MemoryCall{Tool: wire.MemorySet, Scope: wire.ScopeSpeaker, Key: key, HasKey: true, Text: text}
		if _, err := st.Call(ctx, b, c); err != nil {
			t.Fatal(err)
		}
	}
	set("drink", "tea")
	set("note", "x")
	for _, cut := range []bool{false, true} {
		if cut { // more than the block holds: older entries are left out, the newest kept
			for i := range 60 {
				set("k"+string(rune('a'+i%26))+string(rune('a'+i/26)), strings.Repeat("y", 2000))
			}
			set("drink", "green tea")
		}
		block, _, err := st.Block(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if cut && !strings.Contains(block, "older entries not shown") {
			t.Fatalf("block not cut: %.200q", block)
		}
		want := map[bool]string{false: "tea", true: "green tea"}[cut]
		req := sessionRequest(block, "what do I drink?")
		if got := MemoryDemo().respond(req); got.Content != DemoAnswerPrefix+want+"." {
			t.Errorf("cut %v: answer %+v for block %.300q; want %q", cut, got, block, want)
		}
	}
}

// FuzzStandInModel feeds the stand-in's script any body in either
// dialect: it never panics, calls only tools the request offers, and its
// answer encodes in both dialects (a tool call's arguments a JSON object).
func FuzzStandInModel(f *testing.F) {
	for _, c := range scriptCases() {
		f.Add(false, []byte(c.c.chat()))
		f.Add(true, []byte(c.c.messages()))
	}
	f.Fuzz(func(t *testing.T, messages bool, raw []byte) {
		api := OpenAI
		if messages {
			api = Anthropic
		}
		body, err := decodeBody(api, raw)
		if err != nil {
			return
		}
		req := Request{API: api, Body: body}
		resp := StandInModel().respond(req)
		for _, c := range resp.ToolCalls {
			if _, ok := req.offered([]string{c.Function.Name}); !ok {
				t.Fatalf("called %q, which the request does not offer", c.Function.Name)
			}
		}
		if _, err := buildMessage(req, resp); err != nil {
			t.Fatalf("answer %+v does not encode as a Messages answer: %v", resp, err)
		}
		if resp.Content == "" && len(resp.ToolCalls) == 0 {
			t.Fatal("empty answer")
		}
	})
}
