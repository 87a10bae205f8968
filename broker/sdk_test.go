//go:build sdk

package broker_test

// The official Anthropic and OpenAI Go SDKs (test-only dependencies) call
// the broker through its Unix socket, streamed and not, with the stand-in
// model behind it: real clients get correct answers through the broker.

import (
	"context"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/wire"
)

const sdkAnswer = "Tea is hot. ☕ \"quoted\"\n\nnext paragraph with a \\ backslash"

// sdkBroker serves a broker turn in front of a stand-in model that answers
// sdkAnswer (with a tool call first when tools is set), and returns the
// socket's client and the stand-in.
func sdkBroker(t *testing.T, api string) (*http.Client, *fakemodel.Server) {
	t.Helper()
	model := fakemodel.NewWithOptions(fakemodel.Options{Loop: true}, fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		return fakemodel.Response{Content: sdkAnswer, Usage: &fakemodel.Usage{PromptTokens: 5, CompletionTokens: 9, TotalTokens: 14}}
	}))
	t.Cleanup(model.Close)
	f := newFixture(t, nil, withFakeModel(model, api))
	srv := f.listen(t, broker.ListenOptions{})
	return socketClient(srv.Path()), model
}

func TestAnthropicSDKThroughBroker(t *testing.T) {
	hc, model := sdkBroker(t, rtsandbox.ModelAPIAnthropic)
	// The client as a worker would configure it: the broker's base URL
	// and the dummy key; nothing else changed.
	c := anthropic.NewClient(aoption.WithBaseURL("http://"+wire.BrokerHost+"/anthropic"),
		aoption.WithAPIKey(wire.DummyKey), aoption.WithHTTPClient(hc), aoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model: "guest-choice", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("what is tea?"))},
		System:   []anthropic.TextBlockParam{{Text: "be brief"}},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name: "lookup", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}},
		}}},
	}
	ctx := context.Background()
	for _, streamed := range []bool{false, true} {
		var m anthropic.Message
		if streamed {
			stream := c.Messages.NewStreaming(ctx, params)
			for stream.Next() {
				if err := m.Accumulate(stream.Current()); err != nil {
					t.Fatalf("Accumulate: %v", err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("streamed: %v", err)
			}
			stream.Close()
		} else {
			got, err := c.Messages.New(ctx, params)
			if err != nil {
				t.Fatalf("not streamed: %v", err)
			}
			m = *got
		}
		if len(m.Content) != 1 || m.Content[0].Text != sdkAnswer || m.StopReason != anthropic.StopReasonEndTurn || m.Usage.OutputTokens != 9 {
			t.Errorf("streamed %v: message %+v; want the answer %q", streamed, m, sdkAnswer)
		}
	}
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "guest-choice", Messages: params.Messages})
	if err != nil || n.InputTokens < 1 {
		t.Errorf("CountTokens = %+v, %v", n, err)
	}
	reqs := model.Requests()
	var paths []string
	for _, r := range reqs {
		paths = append(paths, r.Path)
		if r.Header.Get("X-Api-Key") != realKey || r.Header.Get("Authorization") != "" || r.Header.Get("X-Stainless-Lang") != "" {
			t.Errorf("upstream headers %v; want the real x-api-key only", r.Header)
		}
		if r.API != fakemodel.AnthropicCountTokens && (r.Body.Model != testModel || len(r.Body.Tools) != 1) {
			t.Errorf("upstream body model %q, %d tools; want the host's model and the tool", r.Body.Model, len(r.Body.Tools))
		}
	}
	if diff := cmp.Diff([]string{"/v1/messages", "/v1/messages", "/v1/messages/count_tokens"}, paths); diff != "" {
		t.Errorf("upstream paths mismatch (-want +got):\n%s", diff)
	}
}

func TestOpenAISDKThroughBroker(t *testing.T) {
	hc, model := sdkBroker(t, rtsandbox.ModelAPIOpenAI)
	// The client as a worker would configure it: the broker's base URL
	// and the dummy key; nothing else changed (no path or header shim).
	c := openai.NewClient(ooption.WithBaseURL("http://"+wire.BrokerHost+"/openai/v1"), ooption.WithAPIKey(wire.DummyKey),
		ooption.WithHTTPClient(hc), ooption.WithMaxRetries(0))
	params := openai.ChatCompletionNewParams{
		Model:    "guest-choice",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("what is tea?")},
	}
	ctx := context.Background()
	for _, streamed := range []bool{false, true} {
		var got string
		if streamed {
			stream := c.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("streamed: %v", err)
			}
			stream.Close()
			if len(acc.Choices) == 1 {
				got = acc.Choices[0].Message.Content
			}
			if acc.Usage.TotalTokens != 14 {
				t.Errorf("streamed usage = %+v; want 14 tokens (the broker asks for the usage chunk)", acc.Usage)
			}
		} else {
			cc, err := c.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatalf("not streamed: %v", err)
			}
			got = cc.Choices[0].Message.Content
		}
		if got != sdkAnswer {
			t.Errorf("streamed %v: answer %q; want %q", streamed, got, sdkAnswer)
		}
	}
	for i, r := range model.Requests() {
		if r.Body.Model != testModel || r.Body.Stream != (i == 1) || r.Header.Get("Authorization") != "Bearer "+realKey {
			t.Errorf("upstream request %d: model %q stream %v auth %q", i, r.Body.Model, r.Body.Stream, r.Header.Get("Authorization"))
		}
	}
}
