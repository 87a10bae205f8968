package modelapi

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

func TestBuildChatRequestBytes(t *testing.T) {
	tests := []struct {
		name string
		in   ChatInput
		want string
	}{
		{
			name: "no-tools-key",
			in:   ChatInput{Messages: []Message{{Role: "user", Content: "hi"}}},
			want: `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"stream":false,"max_tokens":4096}`,
		},
		{
			name: "nil-messages-as-empty-array",
			in:   ChatInput{},
			want: `{"model":"test-model","messages":[],"stream":false,"max_tokens":4096}`,
		},
		{
			name: "empty-tools-kept",
			in:   ChatInput{Messages: []Message{}, HasTools: true},
			want: `{"model":"test-model","messages":[],"tools":[],"stream":false,"max_tokens":4096}`,
		},
		{
			name: "tools-dropped-without-has-tools",
			in:   ChatInput{Messages: []Message{}, Tools: numberedTools(1)},
			want: `{"model":"test-model","messages":[],"stream":false,"max_tokens":4096}`,
		},
		{
			name: "tool-call-round-trip",
			in: ChatInput{
				Messages: []Message{
					{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Type: "function", Function: FunctionCall{Name: "lookup", Arguments: `{"q":"<a&b>"}`}}}},
					{Role: "tool", Content: "found\u2028", ToolCallID: "call_1"},
				},
				Tools: []Tool{{Type: "function", Function: Function{
					Name: "lookup", Description: "Look up.", Parameters: json.RawMessage(`{"type":"object","maximum":1.50}`),
				}}},
				HasTools: true,
			},
			want: `{"model":"test-model","messages":[` +
				`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":\"<a&b>\"}"}}]},` +
				"{\"role\":\"tool\",\"content\":\"found\u2028\",\"tool_call_id\":\"call_1\"}]," +
				`"tools":[{"type":"function","function":{"name":"lookup","description":"Look up.","parameters":{"type":"object","maximum":1.50}}}],` +
				`"stream":false,"max_tokens":4096}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := jsonjs.Marshal(BuildChatRequest("test-model", &tt.in, 4096))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("BuildChatRequest(%+v) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// TestBuildChatRequestPinsGuestFields is the body half of the reference's test "credential
// swap and pinning": the guest's model, max_tokens, stream and callback_url
// never reach upstream.
func TestBuildChatRequestPinsGuestFields(t *testing.T) {
	body := `{"messages":[],"model":"expensive","max_tokens":999999,"stream":true,"callback_url":"https://guest.example"}`
	in, err := NormalizeChat(decodeBody(t, body))
	if err != nil {
		t.Fatalf("NormalizeChat(%s) error: %v", body, err)
	}
	got, err := jsonjs.Marshal(BuildChatRequest("test-model", in, 4096))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"test-model","messages":[],"stream":false,"max_tokens":4096}`
	if string(got) != want {
		t.Errorf("NormalizeChat(%s) built = %s; want %s", body, got, want)
	}
}
