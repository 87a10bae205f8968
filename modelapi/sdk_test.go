//go:build sdk

package modelapi

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// What the official Anthropic SDK sends for an ordinary tool-using
// conversation passes the normaliser with messages, system and tools
// unchanged: a real client is not refused for anything it does by default.
func TestNormalizeMessagesAcceptsSDKRequests(t *testing.T) {
	srv := fakemodel.New(fakemodel.Reply("ok"), fakemodel.Reply("ok"))
	t.Cleanup(srv.Close)
	c := anthropic.NewClient(option.WithBaseURL(srv.URL()), option.WithAuthToken("k"), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 4096,
		System: []anthropic.TextBlockParam{{Text: "be brief", CacheControl: anthropic.NewCacheControlEphemeralParam()}},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name: "lookup", Description: anthropic.String("Look up."),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"url": map[string]any{"type": "string"}}, Required: []string{"url"}},
		}}},
		Thinking:      anthropic.ThinkingConfigParamOfEnabled(2048),
		StopSequences: []string{"END"},
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("look it up"), anthropic.NewImageBlockBase64("image/png", "AQID")),
			anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("toolu_1", map[string]string{"url": "https://example.com"}, "lookup")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("toolu_1", "found", false)),
		},
	}
	if _, err := c.Messages.New(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	stream := c.Messages.NewStreaming(context.Background(), params)
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	stream.Close()
	for i, r := range srv.Requests() {
		got, err := NormalizeMessages(decodeBody(t, string(r.Raw)), MessagesParams{Model: "host-model", Level: LevelHigh})
		if err != nil {
			t.Fatalf("request %d: NormalizeMessages(%s) = %v; want the SDK's body accepted", i, r.Raw, err)
		}
		out, err := jsonjs.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		var sent, rebuilt map[string]any
		if json.Unmarshal(r.Raw, &sent) != nil || json.Unmarshal(out, &rebuilt) != nil {
			t.Fatalf("request %d does not decode", i)
		}
		dropFalseIsError(sent) // the rule sends is_error only when true
		for _, key := range []string{"messages", "system", "tools", "thinking", "stop_sequences", "max_tokens"} {
			if diff := cmp.Diff(sent[key], rebuilt[key]); diff != "" {
				t.Errorf("request %d: %s changed (-sent +rebuilt):\n%s", i, key, diff)
			}
		}
		if rebuilt["model"] != "host-model" || rebuilt["stream"] != (i == 1) {
			t.Errorf("request %d: model %v stream %v; want host-model, stream only on the second", i, rebuilt["model"], rebuilt["stream"])
		}
	}
}

// dropFalseIsError removes every "is_error": false member from v.
func dropFalseIsError(v any) {
	switch v := v.(type) {
	case map[string]any:
		if v["is_error"] == false {
			delete(v, "is_error")
		}
		for _, e := range v {
			dropFalseIsError(e)
		}
	case []any:
		for _, e := range v {
			dropFalseIsError(e)
		}
	}
}
