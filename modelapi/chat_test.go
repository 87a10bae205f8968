package modelapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// chatCase is one /model body. want nil means the whole request is refused.
type chatCase struct {
	name string
	body string
	want *ChatInput
}

// jsonList joins n copies of elem into a JSON array; fmt verbs in elem
// receive the index.
func jsonList(elem string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = elem
		if strings.Contains(elem, "%d") {
			parts[i] = fmt.Sprintf(elem, i)
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

const (
	userHi  = `{"role":"user","content":"hi"}`
	callF   = `{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}`
	toolFnI = `{"type":"function","function":{"name":"f%d","description":"","parameters":{}}}`
)

// refusedChatCases: the reference's refusals, the /model bullets of its extra tests, and the other
// rules of docs/protocol.md, "Model calls".
var refusedChatCases = []chatCase{
	// The reference's refused messages.
	{name: "image-url-content-part", body: `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://guest.example/a.png"}}]}]}`},
	{name: "file-content-part", body: `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`},
	{name: "input-audio-content-part", body: `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]}`},
	{name: "extra-file-id-key", body: `{"messages":[{"role":"user","content":"hi","file_id":"file-1"}]}`},
	{name: "developer-role", body: `{"messages":[{"role":"developer","content":"hi"}]}`},
	{name: "assistant-tool-call-web-search", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"web_search","function":{"name":"f","arguments":"{}"}}]}]}`},
	// The reference's refused tools.
	{name: "tool-web-search", body: `{"messages":[],"tools":[{"type":"web_search"}]}`},
	{name: "tool-file-search", body: `{"messages":[],"tools":[{"type":"file_search","file_ids":["file-1"]}]}`},
	{name: "tool-parameters-remote-ref", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":{"$ref":"https://guest.example/schema"}}}]}`},
	// The reference's tests /model bullets.
	{name: "tool-calls-null", body: `{"messages":[{"role":"assistant","content":"","tool_calls":null}]}`},
	{name: "tool-call-id-on-user", body: `{"messages":[{"role":"user","content":"hi","tool_call_id":"call_1"}]}`},
	{name: "message-key-name", body: `{"messages":[{"role":"user","content":"hi","name":"alice"}]}`},
	{name: "content-null", body: `{"messages":[{"role":"user","content":null}]}`},
	{name: "messages-129", body: `{"messages":` + jsonList(userHi, 129) + `}`},
	{name: "tool-calls-9", body: `{"messages":[{"role":"assistant","content":"","tool_calls":` + jsonList(`{"id":"call_%d","type":"function","function":{"name":"f","arguments":"{}"}}`, 9) + `}]}`},
	{name: "tools-129", body: `{"messages":[],"tools":` + jsonList(toolFnI, 129) + `}`},
	{name: "duplicate-tool-names", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":{}}},{"type":"function","function":{"name":"f","description":"","parameters":{}}}]}`},
	{name: "parameters-schema-absolute-uri", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":{"$schema":"http://json-schema.org/draft-07/schema#"}}}]}`},
	// The rest of docs/protocol.md, "Model calls".
	{name: "messages-absent", body: `{}`},
	{name: "messages-null", body: `{"messages":null}`},
	{name: "messages-object", body: `{"messages":{"0":{"role":"user","content":"hi"}}}`},
	{name: "message-null", body: `{"messages":[null]}`},
	{name: "message-string", body: `{"messages":["hi"]}`},
	{name: "role-function", body: `{"messages":[{"role":"function","content":"hi"}]}`},
	{name: "role-absent", body: `{"messages":[{"content":"hi"}]}`},
	{name: "role-not-string", body: `{"messages":[{"role":1,"content":"hi"}]}`},
	{name: "role-upper-case", body: `{"messages":[{"role":"User","content":"hi"}]}`},
	{name: "content-absent", body: `{"messages":[{"role":"user"}]}`},
	{name: "content-number", body: `{"messages":[{"role":"user","content":1}]}`},
	{name: "content-text-part-array", body: `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`},
	{name: "message-key-refusal", body: `{"messages":[{"role":"assistant","content":"","refusal":null}]}`},
	{name: "message-key-audio", body: `{"messages":[{"role":"assistant","content":"","audio":{"id":"a"}}]}`},
	{name: "tool-calls-on-user", body: `{"messages":[{"role":"user","content":"","tool_calls":[` + callF + `]}]}`},
	{name: "tool-calls-on-tool", body: `{"messages":[{"role":"tool","content":"","tool_call_id":"call_1","tool_calls":[]}]}`},
	{name: "tool-calls-empty-on-user", body: `{"messages":[{"role":"user","content":"","tool_calls":[]}]}`},
	{name: "tool-calls-object", body: `{"messages":[{"role":"assistant","content":"","tool_calls":` + callF + `}]}`},
	{name: "tool-call-null", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[null]}]}`},
	{name: "tool-call-type-absent", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"call_1","function":{"name":"f","arguments":"{}"}}]}]}`},
	{name: "tool-call-id-empty", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`},
	{name: "tool-call-id-129-units", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"` + strings.Repeat("i", 129) + `","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`},
	// 65 astral characters are 65 runes but 130 UTF-16 units.
	{name: "tool-call-id-130-utf16-units", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"` + strings.Repeat("😀", 65) + `","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`},
	{name: "tool-call-id-number", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":1,"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`},
	{name: "tool-call-function-null", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":null}]}]}`},
	{name: "tool-call-name-invalid", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"Memory-Get","arguments":"{}"}}]}]}`},
	{name: "tool-call-arguments-object", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":{}}}]}]}`},
	{name: "tool-call-arguments-absent", body: `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f"}}]}]}`},
	{name: "tool-call-id-null-on-assistant", body: `{"messages":[{"role":"assistant","content":"","tool_call_id":null}]}`},
	{name: "tool-call-id-null-on-user", body: `{"messages":[{"role":"user","content":"hi","tool_call_id":null}]}`},
	{name: "tool-message-without-id", body: `{"messages":[{"role":"tool","content":"r"}]}`},
	{name: "tool-message-id-null", body: `{"messages":[{"role":"tool","content":"r","tool_call_id":null}]}`},
	{name: "tool-message-id-empty", body: `{"messages":[{"role":"tool","content":"r","tool_call_id":""}]}`},
	{name: "tools-null", body: `{"messages":[],"tools":null}`},
	{name: "tools-object", body: `{"messages":[],"tools":{}}`},
	{name: "tool-null", body: `{"messages":[],"tools":[null]}`},
	{name: "tool-function-absent", body: `{"messages":[],"tools":[{"type":"function"}]}`},
	{name: "tool-name-invalid", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"1f","description":"","parameters":{}}}]}`},
	{name: "tool-name-65-chars", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"` + strings.Repeat("f", 65) + `","description":"","parameters":{}}}]}`},
	{name: "tool-description-absent", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`},
	{name: "tool-description-null", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":null,"parameters":{}}}]}`},
	{name: "tool-parameters-absent", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":""}}]}`},
	{name: "tool-parameters-true", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":true}}]}`},
	{name: "tool-parameters-array", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":[]}}]}`},
	{name: "tool-parameters-null", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":null}}]}`},
	{name: "refused-message-after-valid-ones", body: `{"messages":[` + userHi + `,` + userHi + `,{"role":"user","content":"hi","name":"x"}]}`},
}

// conversation is the accepted case of the reference's tests: system, user, an assistant tool
// call whose function has an extra url, a tool reply, and a tool with an
// extra provider option.
const conversation = `{
  "model": "guest-model",
  "messages": [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "look it up"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "call_1", "type": "function", "extra": 1,
       "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}", "url": "https://guest.example/hook"}}
    ]},
    {"role": "tool", "content": "found", "tool_call_id": "call_1"}
  ],
  "tools": [
    {"type": "function", "extra_provider_option": "https://guest.example/tool",
     "function": {"name": "lookup", "description": "Look up.", "strict": true,
                  "extra_provider_option": {"url": "https://guest.example/fn"},
                  "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
  ],
  "extra_provider_option": true, "stream": true, "max_tokens": 999999
}`

func hiMessages(n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Role: "user", Content: "hi"}
	}
	return msgs
}

func numberedTools(n int) []Tool {
	tools := make([]Tool, n)
	for i := range tools {
		tools[i] = Tool{Type: "function", Function: Function{Name: fmt.Sprintf("f%d", i), Parameters: json.RawMessage(`{}`)}}
	}
	return tools
}

func numberedCalls(n int) []ToolCall {
	calls := make([]ToolCall, n)
	for i := range calls {
		calls[i] = ToolCall{ID: fmt.Sprintf("call_%d", i), Type: "function", Function: FunctionCall{Name: "f", Arguments: "{}"}}
	}
	return calls
}

var acceptedChatCases = []chatCase{
	{
		name: "conversation-drops-extra-fields",
		body: conversation,
		want: &ChatInput{
			Messages: []Message{
				{Role: "system", Content: "be brief"},
				{Role: "user", Content: "look it up"},
				{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Type: "function", Function: FunctionCall{Name: "lookup", Arguments: `{"q":"x"}`}}}},
				{Role: "tool", Content: "found", ToolCallID: "call_1"},
			},
			Tools: []Tool{{Type: "function", Function: Function{
				Name: "lookup", Description: "Look up.",
				Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`),
			}}},
			HasTools: true,
		},
	},
	{name: "messages-empty", body: `{"messages":[]}`, want: &ChatInput{Messages: []Message{}}},
	{
		// The reference's credential swap body: every guest field but messages is ignored.
		name: "guest-model-and-options-ignored",
		body: `{"messages":[],"model":"expensive","max_tokens":999999,"callback_url":"https://guest.example","stream":true,"tool_choice":"required","temperature":2,"n":9}`,
		want: &ChatInput{Messages: []Message{}},
	},
	{name: "tools-empty-kept", body: `{"messages":[],"tools":[]}`, want: &ChatInput{Messages: []Message{}, Tools: []Tool{}, HasTools: true}},
	{name: "messages-128", body: `{"messages":` + jsonList(userHi, 128) + `}`, want: &ChatInput{Messages: hiMessages(128)}},
	{
		name: "tool-calls-8",
		body: `{"messages":[{"role":"assistant","content":"","tool_calls":` + jsonList(`{"id":"call_%d","type":"function","function":{"name":"f","arguments":"{}"}}`, 8) + `}]}`,
		want: &ChatInput{Messages: []Message{{Role: "assistant", ToolCalls: numberedCalls(8)}}},
	},
	{
		name: "tools-128",
		body: `{"messages":[],"tools":` + jsonList(toolFnI, 128) + `}`,
		want: &ChatInput{Messages: []Message{}, Tools: numberedTools(128), HasTools: true},
	},
	{
		// Decision: an empty tool_calls list means no calls and is dropped.
		name: "tool-calls-empty-dropped",
		body: `{"messages":[{"role":"assistant","content":"ok","tool_calls":[]}]}`,
		want: &ChatInput{Messages: []Message{{Role: "assistant", Content: "ok"}}},
	},
	{
		name: "tool-call-id-128-utf16-units",
		body: `{"messages":[{"role":"tool","content":"r","tool_call_id":"` + strings.Repeat("😀", 64) + `"}]}`,
		want: &ChatInput{Messages: []Message{{Role: "tool", Content: "r", ToolCallID: strings.Repeat("😀", 64)}}},
	},
	{
		// Not checked by docs/protocol.md, "Model calls": replies matching calls, duplicate ids, where
		// system messages sit.
		name: "unchecked-order-and-duplicate-ids",
		body: `{"messages":[{"role":"tool","content":"r","tool_call_id":"x"},{"role":"tool","content":"r","tool_call_id":"x"},{"role":"system","content":"late"}]}`,
		want: &ChatInput{Messages: []Message{
			{Role: "tool", Content: "r", ToolCallID: "x"},
			{Role: "tool", Content: "r", ToolCallID: "x"},
			{Role: "system", Content: "late"},
		}},
	},
	{
		// Numbers and unknown keywords in parameters are forwarded as
		// written; only whitespace goes.
		name: "parameters-passed-through",
		body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{ "x-vendor" : 1.50, "maximum": 1e2, "enum": [{"$ref": "https://guest.example"}] }}}]}`,
		want: &ChatInput{Messages: []Message{}, HasTools: true, Tools: []Tool{{Type: "function", Function: Function{
			Name: "f", Description: "d", Parameters: json.RawMessage(`{"x-vendor":1.50,"maximum":1e2,"enum":[{"$ref":"https://guest.example"}]}`),
		}}}},
	},
	{
		// JSON.parse keeps the last of repeated keys; so do we, and the
		// rebuilt message carries only that value.
		name: "repeated-message-key-last-wins",
		body: `{"messages":[{"role":"system","role":"user","content":"hi"}]}`,
		want: &ChatInput{Messages: []Message{{Role: "user", Content: "hi"}}},
	},
}

func decodeBody(tb testing.TB, body string) map[string]json.RawMessage {
	tb.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		tb.Fatalf("test body does not decode: %v\n%s", err, body)
	}
	return m
}

// short abbreviates a body for failure messages.
func short(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

func TestNormalizeChatRefuses(t *testing.T) {
	for _, tt := range refusedChatCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeChat(decodeBody(t, tt.body))
			if !errors.Is(err, rtsandbox.ErrRefused) {
				t.Errorf("NormalizeChat(%s) = %+v, %v; want an error wrapping ErrRefused", short(tt.body), got, err)
			}
		})
	}
}

func TestNormalizeChatAccepts(t *testing.T) {
	for _, tt := range acceptedChatCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeChat(decodeBody(t, tt.body))
			if err != nil {
				t.Fatalf("NormalizeChat(%s) error: %v", short(tt.body), err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("NormalizeChat(%s) mismatch (-want +got):\n%s", short(tt.body), diff)
			}
		})
	}
}

// TestNormalizeChatConversationLeaksNothing is the assertion of the reference's tests: the
// forwarded JSON names neither the guest URLs nor the provider option, and
// keeps the tool reply's id.
func TestNormalizeChatConversationLeaksNothing(t *testing.T) {
	in, err := NormalizeChat(decodeBody(t, conversation))
	if err != nil {
		t.Fatalf("NormalizeChat(conversation) error: %v", err)
	}
	out, err := jsonjs.Marshal(BuildChatRequest("test-model", in, 4096))
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"guest.example", "extra_provider_option", "guest-model", "strict", "999999"} {
		if strings.Contains(string(out), banned) {
			t.Errorf("NormalizeChat(conversation) = %s; want no %q", out, banned)
		}
	}
	if !strings.Contains(string(out), `"tool_call_id":"call_1"`) {
		t.Errorf("NormalizeChat(conversation) = %s; want tool_call_id kept", out)
	}
}

func TestNormalizeChatNilBody(t *testing.T) {
	if got, err := NormalizeChat(nil); !errors.Is(err, rtsandbox.ErrRefused) {
		t.Errorf("NormalizeChat(nil) = %+v, %v; want an error wrapping ErrRefused", got, err)
	}
}

// TestNormalizeChatParametersDoNotAlias checks that the rebuilt parameters
// do not share the caller's buffer, which the broker may reuse.
func TestNormalizeChatParametersDoNotAlias(t *testing.T) {
	body := decodeBody(t, `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":{"type":"object"}}}]}`)
	in, err := NormalizeChat(body)
	if err != nil {
		t.Fatal(err)
	}
	clear(body["tools"])
	if got, want := string(in.Tools[0].Function.Parameters), `{"type":"object"}`; got != want {
		t.Errorf("parameters after clearing the body = %q; want %q", got, want)
	}
}
