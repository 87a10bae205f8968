//go:build sdk

package fakemodel

// These tests drive the stand-in with the official Anthropic and OpenAI Go
// SDKs (test-only dependencies), streamed and not, to prove that it speaks
// the real wire formats: if the SDKs parse its answers into the values the
// script asked for, real clients will too.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/rtsandbox/rtsandbox/brokerclient"
)

const sdkKey = "k1"

// streamModes runs a test once without and once with streaming.
var streamModes = []struct {
	name     string
	streamed bool
}{{"not-streamed", false}, {"streamed", true}}

func anthropicClient(s *Server) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(s.URL()), aoption.WithAuthToken(sdkKey), aoption.WithMaxRetries(0))
}

func openaiClient(s *Server) openai.Client {
	return openai.NewClient(ooption.WithBaseURL(s.URL()+"/v1/"), ooption.WithAPIKey(sdkKey), ooption.WithMaxRetries(0))
}

// lookupTool is the tool both dialects declare.
var lookupTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "lookup",
	Description: anthropic.String("Look up."),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}},
}}

func anthropicParams(msgs ...anthropic.MessageParam) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model: "claude-test", MaxTokens: 1024, Messages: msgs,
		System: []anthropic.TextBlockParam{{Text: "be brief"}},
		Tools:  []anthropic.ToolUnionParam{lookupTool},
	}
}

// block is the part of a content block the tests compare.
type block struct {
	Type, Text, ID, Name string
	Input                string
}

func blocksOf(content []anthropic.ContentBlockUnion) []block {
	var out []block
	for _, c := range content {
		b := block{Type: c.Type, Text: c.Text, ID: c.ID, Name: c.Name}
		if c.Type == "tool_use" {
			b.Input = string(c.Input)
		}
		out = append(out, b)
	}
	return out
}

// anthropicCall makes one call with the SDK, streamed or not, and returns
// the message (accumulated from the events when streamed).
func anthropicCall(t *testing.T, c anthropic.Client, streamed bool, p anthropic.MessageNewParams) (*anthropic.Message, []string, error) {
	t.Helper()
	if !streamed {
		m, err := c.Messages.New(context.Background(), p)
		return m, nil, err
	}
	stream := c.Messages.NewStreaming(context.Background(), p)
	defer stream.Close()
	var m anthropic.Message
	var events []string
	for stream.Next() {
		ev := stream.Current()
		events = append(events, ev.Type)
		if err := m.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate(%s): %v", ev.Type, err)
		}
	}
	return &m, events, stream.Err()
}

func TestAnthropicSDK(t *testing.T) {
	for _, mode := range streamModes {
		streamed := mode.streamed
		t.Run(mode.name, func(t *testing.T) {
			s := start(t, Options{Key: sdkKey},
				CallTools(Call("lookup", map[string]string{"q": "tea, ☕ \"hot\""}), withID(Call("lookup", `{}`), "toolu_mine")),
				Func(func(r Request) Response {
					got, _ := r.ToolResult("toolu_mine")
					return Response{Content: "Tea is hot. ☕ Result: " + got, Usage: &Usage{PromptTokens: 11, CompletionTokens: 7}}
				}),
			)
			c := anthropicClient(s)
			user := anthropic.NewUserMessage(anthropic.NewTextBlock("what is tea?"))
			m, events, err := anthropicCall(t, c, streamed, anthropicParams(user))
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			want := []block{
				{Type: "tool_use", ID: "toolu_0_0", Name: "lookup", Input: `{"q":"tea, ☕ \"hot\""}`},
				{Type: "tool_use", ID: "toolu_mine", Name: "lookup", Input: `{}`},
			}
			if diff := cmp.Diff(want, blocksOf(m.Content)); diff != "" || m.StopReason != anthropic.StopReasonToolUse {
				t.Errorf("first answer (stop %q) mismatch (-want +got):\n%s", m.StopReason, diff)
			}
			if streamed {
				wantEvents := []string{"message_start", "content_block_start"}
				if diff := cmp.Diff(wantEvents, events[:2]); diff != "" || events[len(events)-1] != "message_stop" || events[len(events)-2] != "message_delta" {
					t.Errorf("events = %v; want message_start, blocks, message_delta, message_stop", events)
				}
			}

			results := []anthropic.ContentBlockParamUnion{
				anthropic.NewToolResultBlock("toolu_0_0", "first", false),
				anthropic.NewToolResultBlock("toolu_mine", "second", false),
			}
			m2, _, err := anthropicCall(t, c, streamed, anthropicParams(user, m.ToParam(), anthropic.NewUserMessage(results...)))
			if err != nil {
				t.Fatalf("second call: %v", err)
			}
			wantText := []block{{Type: "text", Text: "Tea is hot. ☕ Result: second"}}
			if diff := cmp.Diff(wantText, blocksOf(m2.Content)); diff != "" || m2.StopReason != anthropic.StopReasonEndTurn || m2.Usage.OutputTokens != 7 || m2.Usage.InputTokens != 11 {
				t.Errorf("second answer (stop %q, usage %+v) mismatch (-want +got):\n%s", m2.StopReason, m2.Usage, diff)
			}

			reqs := s.Requests()
			r := reqs[1]
			if r.API != Anthropic || r.Path != "/v1/messages" || r.Header.Get("Authorization") != "Bearer "+sdkKey || r.Body.Stream != streamed {
				t.Errorf("recorded %v %s auth %q stream %v; want Anthropic /v1/messages with the bearer", r.API, r.Path, r.Header.Get("Authorization"), r.Body.Stream)
			}
			if r.System() != "be brief" || r.UserText() != "what is tea?" || r.Last().Role != "tool" || len(r.Body.Tools) != 1 || r.Body.Tools[0].Function.Name != "lookup" {
				t.Errorf("chat view of the Messages body = %+v", r.Body)
			}
			if got, _ := r.ToolResult("toolu_0_0"); got != "first" {
				t.Errorf("ToolResult(toolu_0_0) = %q; want first", got)
			}
		})
	}
}

func TestAnthropicSDKCountTokens(t *testing.T) {
	s := start(t, Options{}, Reply("unused"))
	c := anthropicClient(s)
	got, err := c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "claude-test",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Requests()[0]
	if want := int64((len(r.Raw) + 3) / 4); got.InputTokens != want || r.API != AnthropicCountTokens {
		t.Errorf("CountTokens = %d (API %v); want %d", got.InputTokens, r.API, want)
	}
	if s.Remaining() != 1 {
		t.Errorf("Remaining() = %d; want 1 (count_tokens takes no step)", s.Remaining())
	}
}

func TestAnthropicSDKErrors(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		s := start(t, Options{}, Status(529), Func(func(Request) Response {
			return Response{Content: "never seen", StreamError: "overloaded_error"}
		}))
		c := anthropicClient(s)
		user := anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))
		_, _, err := anthropicCall(t, c, streamed, anthropicParams(user))
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" {
			t.Errorf("stream %v: status 529 gave %v; want an *anthropic.Error 529 overloaded_error", streamed, err)
		}
		m, _, err := anthropicCall(t, c, streamed, anthropicParams(user))
		if streamed && err == nil {
			t.Errorf("stream error event: err = nil, message %+v; want an error", m)
		}
	}
}

func TestOpenAISDK(t *testing.T) {
	for _, mode := range streamModes {
		streamed := mode.streamed
		t.Run(mode.name, func(t *testing.T) {
			s := start(t, Options{Key: sdkKey},
				CallTools(Call("lookup", map[string]string{"q": "tea ☕"}), withID(Call("host_clock", `{}`), "mine")),
				Reply("Tea is hot. ☕ \"quoted\"\n\nnext paragraph"),
			)
			c := openaiClient(s)
			params := openai.ChatCompletionNewParams{
				Model:    "gpt-test",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("what is tea?")},
			}
			if streamed {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			first := openaiCall(t, c, streamed, params)
			type call struct{ ID, Name, Args string }
			var calls []call
			for _, tc := range first.Choices[0].Message.ToolCalls {
				calls = append(calls, call{tc.ID, tc.Function.Name, tc.Function.Arguments})
			}
			want := []call{{"call_0_0", "lookup", `{"q":"tea ☕"}`}, {"mine", "host_clock", `{}`}}
			if diff := cmp.Diff(want, calls); diff != "" || first.Choices[0].FinishReason != "tool_calls" {
				t.Errorf("tool calls (finish %q) mismatch (-want +got):\n%s", first.Choices[0].FinishReason, diff)
			}
			params.Messages = append(params.Messages, first.Choices[0].Message.ToParam(),
				openai.ToolMessage("first", "call_0_0"), openai.ToolMessage("second", "mine"))
			second := openaiCall(t, c, streamed, params)
			if got := second.Choices[0].Message.Content; got != "Tea is hot. ☕ \"quoted\"\n\nnext paragraph" || second.Choices[0].FinishReason != "stop" {
				t.Errorf("second answer = %q (finish %q)", got, second.Choices[0].FinishReason)
			}
			r := s.Requests()[1]
			if got, _ := r.ToolResult("mine"); got != "second" || r.Body.Stream != streamed || r.API != OpenAI {
				t.Errorf("recorded second request = %+v", r.Body)
			}
		})
	}
}

func openaiCall(t *testing.T, c openai.Client, streamed bool, p openai.ChatCompletionNewParams) *openai.ChatCompletion {
	t.Helper()
	if !streamed {
		got, err := c.Chat.Completions.New(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	stream := c.Chat.Completions.NewStreaming(context.Background(), p)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 4 {
		t.Errorf("%d chunks; want the answer in several deltas", chunks)
	}
	return &acc.ChatCompletion
}

// The OpenAI stream ends with data: [DONE], after a usage chunk when asked.
func TestOpenAIStreamWire(t *testing.T) {
	s := start(t, Options{StreamChunk: 100}, Func(func(Request) Response {
		return Response{Content: "hi", Usage: &Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}}
	}))
	contentType, events := postEvents(t, s.ChatURL(), `{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}`)
	var datas []string
	for _, ev := range events {
		datas = append(datas, ev.Data)
	}
	if contentType != "text/event-stream" || len(datas) != 5 || datas[4] != "[DONE]" {
		t.Fatalf("stream = %q (%s); want role, text, finish, usage, [DONE]", datas, contentType)
	}
	var usage struct {
		Choices []any `json:"choices"`
		Usage   Usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(datas[3]), &usage); err != nil || len(usage.Choices) != 0 || usage.Usage.TotalTokens != 3 {
		t.Errorf("usage chunk = %s; want empty choices and the usage", datas[3])
	}
}

func TestMessagesWireShape(t *testing.T) {
	s := start(t, Options{}, CallTools(Call("memory_get", map[string]string{"scope": "speaker"})))
	resp, err := http.Post(s.URL()+"/v1/messages", "application/json", strings.NewReader(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"id": "msg_fake_0", "type": "message", "role": "assistant", "model": "m",
		"content":     []any{map[string]any{"type": "tool_use", "id": "toolu_0_0", "name": "memory_get", "input": map[string]any{"scope": "speaker"}}},
		"stop_reason": "tool_use", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": float64(0), "output_tokens": float64(0)},
	}
	if diff := cmp.Diff(any(want), got); diff != "" {
		t.Errorf("Messages answer mismatch (-want +got):\n%s", diff)
	}
}

func TestMessagesStreamWire(t *testing.T) {
	s := start(t, Options{StreamChunk: 2}, Reply("hi!"))
	contentType, events := postEvents(t, s.URL()+"/v1/messages", `{"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	var got []string
	for _, ev := range events {
		got = append(got, ev.Type+" "+ev.Data)
	}
	want := []string{
		`message_start {"message":{"id":"msg_fake_0","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}},"type":"message_start"}`,
		`ping {"type":"ping"}`,
		`content_block_start {"content_block":{"type":"text","text":""},"index":0,"type":"content_block_start"}`,
		`content_block_delta {"delta":{"text":"hi","type":"text_delta"},"index":0,"type":"content_block_delta"}`,
		`content_block_delta {"delta":{"text":"!","type":"text_delta"},"index":0,"type":"content_block_delta"}`,
		`content_block_stop {"index":0,"type":"content_block_stop"}`,
		`message_delta {"delta":{"stop_reason":"end_turn","stop_sequence":null},"type":"message_delta","usage":{"output_tokens":0}}`,
		`message_stop {"type":"message_stop"}`,
	}
	if diff := cmp.Diff(want, got); diff != "" || contentType != "text/event-stream" {
		t.Errorf("Messages stream (%s) mismatch (-want +got):\n%s", contentType, diff)
	}
}

// postEvents posts body to url and reads the answer as server-sent events
// with the module's own parser, returning the content type and the events.
func postEvents(t *testing.T, url, body string) (string, []brokerclient.SSEEvent) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []brokerclient.SSEEvent
	r := brokerclient.NewSSEReader(resp.Body, brokerclient.SSELimits{})
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return resp.Header.Get("Content-Type"), events
		}
		if err != nil {
			t.Fatalf("reading events: %v", err)
		}
		events = append(events, ev)
	}
}

// memorySetTool is the sealed worker's memory_set, which the memory demo
// calls only when the request offers it.
var memorySetTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
	Name:        "memory_set",
	Description: anthropic.String("Remember."),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"key": map[string]any{"type": "string"}}},
}}

// The memory demo, a step written for chat completions, plays unchanged
// over Messages: the Messages body is read into the same chat view.
func TestMemoryDemoOverMessages(t *testing.T) {
	withMemory := func(msgs ...anthropic.MessageParam) anthropic.MessageNewParams {
		p := anthropicParams(msgs...)
		p.Tools = append(p.Tools, memorySetTool)
		return p
	}
	for _, mode := range streamModes {
		t.Run(mode.name, func(t *testing.T) {
			s := start(t, Options{Loop: true}, MemoryDemo())
			c := anthropicClient(s)
			user := anthropic.NewUserMessage(anthropic.NewTextBlock("remember that I drink tea"))
			m, _, err := anthropicCall(t, c, mode.streamed, withMemory(user))
			if err != nil {
				t.Fatal(err)
			}
			want := []block{{Type: "tool_use", ID: "call_memory_set", Name: "memory_set", Input: `{"key":"drink","scope":"speaker","text":"tea"}`}}
			if diff := cmp.Diff(want, blocksOf(m.Content)); diff != "" {
				t.Fatalf("first answer mismatch (-want +got):\n%s", diff)
			}
			result := anthropic.NewUserMessage(anthropic.NewToolResultBlock("call_memory_set", "ok", false))
			m2, _, err := anthropicCall(t, c, mode.streamed, withMemory(user, m.ToParam(), result))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]block{{Type: "text", Text: DemoRememberPrefix + "tea."}}, blocksOf(m2.Content)); diff != "" {
				t.Errorf("second answer mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// A scripted stream error reaches the OpenAI SDK as an error.
func TestOpenAISDKStreamError(t *testing.T) {
	s := start(t, Options{}, Func(func(Request) Response { return Response{Content: "never", StreamError: "server_error"} }))
	c := openaiClient(s)
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	defer stream.Close()
	for stream.Next() {
	}
	if stream.Err() == nil {
		t.Errorf("stream with an error object: Err() = nil; want an error")
	}
}

// A client that goes away mid-stream ends the handler: Close does not wait
// for the rest of the script's text (goleak checks nothing is left).
func TestStreamClientGone(t *testing.T) {
	s := start(t, Options{StreamDelay: 10 * time.Millisecond}, Reply(strings.Repeat("long answer ", 200)))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":9,"stream":true,"messages":[]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := brokerclient.NewSSEReader(resp.Body, brokerclient.SSELimits{})
	if ev, err := r.Next(); err != nil || ev.Type != "message_start" {
		t.Fatalf("first event = %+v, %v; want message_start", ev, err)
	}
	cancel()
	resp.Body.Close()
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close still waits 2 s after the client went away")
	}
}
