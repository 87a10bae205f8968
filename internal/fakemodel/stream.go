package fakemodel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// defaultStreamChunk is how many runes of text or arguments one delta
// carries when Options.StreamChunk is 0: small, so that every client
// reassembles text and tool input from several deltas.
const defaultStreamChunk = 4

// sseWriter writes server-sent events, flushing each and pausing after it
// for the configured delay.
type sseWriter struct {
	ctx   context.Context
	w     http.ResponseWriter
	delay time.Duration
}

func newSSEWriter(ctx context.Context, w http.ResponseWriter, delay time.Duration) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{ctx: ctx, w: w, delay: delay}
}

// event writes one event: an event line when name is set, then v as one
// data line (v is JSON-encoded unless it is a string). It reports false
// once the client is gone.
func (s *sseWriter) event(name string, v any) bool {
	data, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil { // every value here is plain data
			panic(err)
		}
		data = string(b)
	}
	var b strings.Builder
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	b.WriteString("data: " + data + "\n\n")
	return s.raw([]byte(b.String()))
}

// raw writes b, flushes it and pauses; it reports false once the client
// is gone.
func (s *sseWriter) raw(b []byte) bool {
	if _, err := s.w.Write(b); err != nil {
		return false
	}
	_ = http.NewResponseController(s.w).Flush()
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return false
		}
	}
	return s.ctx.Err() == nil
}

// pieces cuts s into parts of at most n runes; "" gives no parts.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// streamMessage writes a Messages answer as the API streams it:
// message_start, a ping, per block content_block_start, deltas
// (text_delta or input_json_delta) and content_block_stop, then
// message_delta and message_stop. With streamErr set, an error event of
// that type follows the ping and the stream ends.
func streamMessage(sw *sseWriter, m message, chunk int, streamErr string) {
	start := m
	start.Content, start.StopReason = []contentBlock{}, nil
	start.Usage.OutputTokens = 0
	if !sw.event("message_start", map[string]any{"type": "message_start", "message": start}) ||
		!sw.event("ping", map[string]string{"type": "ping"}) {
		return
	}
	if streamErr != "" {
		sw.event("error", map[string]any{"type": "error", "error": map[string]string{"type": streamErr, "message": "scripted stream error"}})
		return
	}
	for i, b := range m.Content {
		if !streamBlock(sw, i, b, chunk) {
			return
		}
	}
	if sw.event("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": m.StopReason, "stop_sequence": nil},
		"usage": map[string]int64{"output_tokens": m.Usage.OutputTokens},
	}) {
		sw.event("message_stop", map[string]string{"type": "message_stop"})
	}
}

func streamBlock(sw *sseWriter, i int, b contentBlock, chunk int) bool {
	head, deltaType, deltaKey, text := b, "text_delta", "text", ""
	if b.Type == "tool_use" {
		head.Input, deltaType, deltaKey, text = json.RawMessage(`{}`), "input_json_delta", "partial_json", string(b.Input)
	} else {
		empty := ""
		head.Text, text = &empty, *b.Text
	}
	if !sw.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": head}) {
		return false
	}
	for _, p := range pieces(text, chunk) {
		if !sw.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]string{"type": deltaType, deltaKey: p}}) {
			return false
		}
	}
	return sw.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

// chunkChoice is the one choice of a chat.completion.chunk.
type chunkChoice struct {
	Index        int            `json:"index"`
	Delta        map[string]any `json:"delta"`
	FinishReason *string        `json:"finish_reason"`
}

// streamCompletion writes a chat completion as chat.completion.chunk
// events: the role, text deltas, per tool call a head with id and name and
// then argument deltas, a last chunk with the finish reason, a usage chunk
// when the request asked for stream_options.include_usage, and [DONE].
// With streamErr set, an error object of that type follows the role chunk
// and the stream ends without [DONE].
func streamCompletion(sw *sseWriter, req Request, resp Response, chunk int, streamErr string) {
	id := fmt.Sprintf("chatcmpl-fake-%d", req.Index)
	send := func(delta map[string]any, finish *string) bool {
		return sw.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": req.Index, "model": req.Body.Model,
			"choices": []chunkChoice{{Delta: delta, FinishReason: finish}},
		})
	}
	if !send(map[string]any{"role": "assistant", "content": ""}, nil) {
		return
	}
	if streamErr != "" {
		sw.event("", map[string]any{"error": map[string]string{"message": "scripted stream error", "type": streamErr}})
		return
	}
	for _, p := range pieces(resp.Content, chunk) {
		if !send(map[string]any{"content": p}, nil) {
			return
		}
	}
	for i, c := range resp.ToolCalls {
		callID := c.ID
		if callID == "" {
			callID = fmt.Sprintf("call_%d_%d", req.Index, i)
		}
		head := map[string]any{"index": i, "id": callID, "type": "function", "function": map[string]string{"name": c.Function.Name, "arguments": ""}}
		if !send(map[string]any{"tool_calls": []any{head}}, nil) {
			return
		}
		for _, p := range pieces(c.Function.Arguments, chunk) {
			if !send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]string{"arguments": p}}}}, nil) {
				return
			}
		}
	}
	finish := "stop"
	if len(resp.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if !send(map[string]any{}, &finish) {
		return
	}
	if req.Body.StreamOptions != nil && req.Body.StreamOptions.IncludeUsage {
		usage := resp.Usage
		if usage == nil {
			usage = &Usage{}
		}
		if !sw.event("", map[string]any{"id": id, "object": "chat.completion.chunk", "created": req.Index, "model": req.Body.Model, "choices": []any{}, "usage": usage}) {
			return
		}
	}
	sw.event("", "[DONE]")
}
