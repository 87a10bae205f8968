//go:build sdk

package broker_test

// The red team's streamed echo (issue 21 item 1) as the official SDKs see
// it: before the fix, the OpenAI and Anthropic Go SDKs assembled
// "here it is: <key>" from deltas of 1 to 7 bytes that the broker passed
// on. Now, over the socket, in a sealed turn and in a session channel,
// each stream fails and what the SDK assembled holds no form of the key.

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// sdkEchoCases are the echoes an SDK is tried with: every form in every
// field, in deltas of 1 to 8 bytes.
func sdkEchoCases(api, key string) []echoCase { return echoCases(api, key, false) }

// anthropicSDKAssembles streams one call through the Anthropic SDK and
// returns what it assembled and the stream's error.
func anthropicSDKAssembles(t *testing.T, hc *http.Client, base string) (string, error) {
	t.Helper()
	c := anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(wire.DummyKey),
		aoption.WithHTTPClient(hc), aoption.WithMaxRetries(0))
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "guest-choice", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("echo"))},
	})
	defer stream.Close()
	var m anthropic.Message
	for stream.Next() {
		if err := m.Accumulate(stream.Current()); err != nil {
			return "", err
		}
	}
	var out strings.Builder
	for _, b := range m.Content {
		out.WriteString(b.Text + b.Thinking + string(b.Input))
	}
	return out.String(), stream.Err()
}

// openAISDKAssembles streams one call through the OpenAI SDK.
func openAISDKAssembles(t *testing.T, hc *http.Client, base string) (string, error) {
	t.Helper()
	c := openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(wire.DummyKey),
		ooption.WithHTTPClient(hc), ooption.WithMaxRetries(0))
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "guest-choice", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("echo")},
	})
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	var out strings.Builder
	for _, ch := range acc.Choices {
		out.WriteString(ch.Message.Content + ch.Message.JSON.ExtraFields["reasoning_content"].Raw())
		for _, tc := range ch.Message.ToolCalls {
			out.WriteString(tc.Function.Arguments)
		}
	}
	return out.String(), stream.Err()
}

// wantSDKRefused checks what one SDK call assembled.
func wantSDKRefused(t *testing.T, name, got string, err error, key string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: the SDK read the stream whole, assembling %q", name, got)
	}
	if upstream.CheckText(got, key) != nil {
		t.Fatalf("%s: the SDK assembled %q, holding the key", name, got)
	}
}

func TestSDKStreamedEchoSealed(t *testing.T) {
	for _, api := range []string{rtsandbox.ModelAPIOpenAI, rtsandbox.ModelAPIAnthropic} {
		t.Run(api, func(t *testing.T) {
			cases := sdkEchoCases(api, realKey)
			next := 0
			model := fakemodel.NewWithOptions(fakemodel.Options{Loop: true, NoRecord: true}, fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
				c := cases[next]
				next++
				var chunks [][]byte
				for _, ev := range c.events {
					chunks = append(chunks, []byte(ev))
				}
				return fakemodel.Response{Chunks: chunks, ContentType: "text/event-stream"}
			}))
			t.Cleanup(model.Close)
			f := newFixture(t, nil, func(c *broker.Config) {
				withFakeModel(model, api)(c)
				c.MaxCalls = rtsandbox.MaxCallsLimit
			})
			hc := socketClient(f.listen(t, broker.ListenOptions{}).Path())
			for k, c := range cases {
				if k > 0 && k%rtsandbox.MaxCallsLimit == 0 {
					t.Fatalf("more cases than one turn's calls")
				}
				var got string
				var err error
				if api == rtsandbox.ModelAPIAnthropic {
					got, err = anthropicSDKAssembles(t, hc, "http://"+wire.BrokerHost+"/anthropic")
				} else {
					got, err = openAISDKAssembles(t, hc, "http://"+wire.BrokerHost+"/openai/v1")
				}
				wantSDKRefused(t, c.name, got, err, realKey)
			}
		})
	}
}

func TestSDKStreamedEchoSession(t *testing.T) {
	for _, api := range []string{rtsandbox.ModelAPIOpenAI, rtsandbox.ModelAPIAnthropic} {
		t.Run(api, func(t *testing.T) {
			cases := sdkEchoCases(api, hostSecret)
			f, next := echoSession(t, api)
			release, _ := f.bind("")
			defer release()
			for _, c := range cases {
				next <- c
				var got string
				var err error
				if api == rtsandbox.ModelAPIAnthropic {
					got, err = anthropicSDKAssembles(t, f.client, "http://"+wire.BrokerHost+"/anthropic")
				} else {
					// A session's chat completions route is /model: the
					// SDK's path is rewritten by a base URL ending there.
					got, err = openAISDKAssembles(t, &http.Client{Transport: rewrite{f.client.Transport}}, "http://"+wire.BrokerHost+"/")
				}
				wantSDKRefused(t, c.name, got, err, hostSecret)
			}
		})
	}
}

// rewrite sends the SDK's /chat/completions to a session's /model.
type rewrite struct{ rt http.RoundTripper }

func (r rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if req.URL.Path == "/chat/completions" {
		req.URL.Path = wire.RouteModel
	}
	return r.rt.RoundTrip(req)
}
