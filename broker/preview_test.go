package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// textLog collects what a turn's TextFunc receives.
type textLog struct {
	mu     sync.Mutex
	deltas []string
	answer []int
}

func (l *textLog) add(answer int, delta string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deltas, l.answer = append(l.deltas, delta), append(l.answer, answer)
}

func (l *textLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.deltas, "")
}

// longText is longer than the tail the tap holds back, in two-byte runes
// that a cut may split.
var longText = strings.Repeat("ü", 200) + "."

var (
	// anthropicStream has text deltas around a thinking block and a
	// tool_use block whose arguments must not show.
	anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"SECRET-THOUGHT\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo \\\"w\\u00f6rld\\\"\\n\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + longText + "\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"q\\\":\\\"TOOL-ARGS\\\"}\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	// openAIStream has content deltas around a tool-call delta and a
	// reasoning field that must not show.
	openAIStream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"SECRET-THOUGHT\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\r\n\r\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\\"w\\u00f6rld\\\"\\n\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + longText + "\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"q\\\":\\\"TOOL-ARGS\\\"}\"}}]}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"total_tokens\":9}}\n\n" +
		"data: [DONE]\n\n"
)

// dialects are the two streamed model routes, each with its config.
var dialects = []struct {
	name, route, stream string
	edit                func(*broker.Config)
}{
	{"anthropic", wire.RouteAnthropicMessages, anthropicStream, anthropicAPI(true)},
	{"openai", wire.RouteModel, openAIStream, func(c *broker.Config) { c.Stream = true }},
}

// streamTurn serves one streamed call per case through a fresh turn that
// reports its text, each case's chunks one per upstream read, and returns
// the text each case reported.
func streamTurn(t *testing.T, route string, edit func(*broker.Config), cases [][][]byte) []*textLog {
	t.Helper()
	tr := &chunkTransport{cases: cases}
	f := newFixture(t, nil, func(c *broker.Config) {
		edit(c)
		c.Client = upstream.New(tr)
	})
	logs := make([]*textLog, len(cases))
	for i := range cases {
		logs[i] = &textLog{}
		turn := f.broker.Turn(context.Background(), rtsandbox.Binding{Channel: testChannel, Speaker: guest},
			broker.WithText(logs[i].add))
		w, _ := serveCatching(turn, workerRequest(context.Background(), route, streamBody))
		f.bodies.Write(w.Body.Bytes())
	}
	return logs
}

// splitTwo cuts body at every offset into two reads.
func splitTwo(body string) [][][]byte {
	var cases [][][]byte
	for i := 0; i <= len(body); i++ {
		cases = append(cases, [][]byte{[]byte(body[:i]), []byte(body[i:])})
	}
	return cases
}

// TestPreviewTextEverySplit: the text deltas of both dialects, and only
// they (no thinking, no tool arguments), reach the TextFunc whole and in
// valid UTF-8, whatever the cut of the stream into upstream reads.
func TestPreviewTextEverySplit(t *testing.T) {
	want := "Hello \"wörld\"\n" + longText
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			for i, l := range streamTurn(t, d.route, d.edit, splitTwo(d.stream)) {
				if diff := cmp.Diff(want, l.text()); diff != "" {
					t.Fatalf("cut at %d: text (-want +got):\n%s", i, diff)
				}
				for _, a := range l.answer {
					if a != 1 {
						t.Fatalf("cut at %d: answer numbers %v, want all 1", i, l.answer)
					}
				}
				for _, d := range l.deltas {
					if !utf8.ValidString(d) {
						t.Fatalf("cut at %d: delta %q splits a rune", i, d)
					}
				}
			}
		})
	}
}

// TestPreviewLargeEventShown: the preview reads the events the relay's
// scanner read whole (up to upstream.MaxStreamEvent), so a text delta over
// the SSE watch bound is shown whole, and the deltas after it too.
func TestPreviewLargeEventShown(t *testing.T) {
	big := strings.Repeat("x", brokerclient.SSEWatchMaxEvent+1)
	streams := map[string]string{
		"anthropic": "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + big + "\"}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"after\"}}\n\n",
		"openai": "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + big + "\"}}]}\n\n" +
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after\"}}]}\n\n",
	}
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			logs := streamTurn(t, d.route, d.edit, [][][]byte{{[]byte(streams[d.name])}})
			if got, want := logs[0].text(), big+"after"; got != want {
				t.Errorf("text = %.40q (%d bytes), want %d x and %q", got, len(got), len(big), "after")
			}
		})
	}
}

// TestPreviewNeverReflectsKey: a text delta holding any form of the key,
// cut at every offset into two and three reads, never reaches the
// TextFunc, because the reflection filter runs before the tap.
func TestPreviewNeverReflectsKey(t *testing.T) {
	prefix := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok \"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""
	suffix := "\"}}\n\n"
	var cases [][][]byte
	for _, form := range upstream.Forms(realKey) {
		body := prefix + form + suffix
		for i := 1; i < len(form); i++ {
			for j := i; j < len(form); j++ {
				a, b := len(prefix)+i, len(prefix)+j
				cases = append(cases, [][]byte{[]byte(body[:a]), []byte(body[a:b]), []byte(body[b:])})
			}
		}
	}
	f := func(c *broker.Config) { anthropicAPI(true)(c); c.MaxCalls = rtsandbox.MaxCallsLimit }
	for i, l := range streamTurn(t, wire.RouteAnthropicMessages, f, cases) {
		got := l.text()
		assertNoSecrets(t, "preview text", got)
		if got != "" && got != "ok " {
			t.Fatalf("case %d: text = %q, want at most the delta before the key", i, got)
		}
	}
}

// TestPreviewAnswersNumbered: each streamed call of a turn is its own
// answer; a turn without WithText costs nothing and reports nothing.
func TestPreviewAnswersNumbered(t *testing.T) {
	body := []byte(anthropicStream)
	tr := &chunkTransport{cases: [][][]byte{{body}, {body}}}
	f := newFixture(t, nil, func(c *broker.Config) { anthropicAPI(true)(c); c.Client = upstream.New(tr) })
	l := &textLog{}
	turn := f.broker.Turn(context.Background(), rtsandbox.Binding{Channel: testChannel, Speaker: guest}, broker.WithText(l.add))
	for range 2 {
		serveCatching(turn, workerRequest(context.Background(), wire.RouteAnthropicMessages, streamBody))
	}
	// Per answer: the text before the held tail once longText comes, then
	// the tail when the answer ends.
	if diff := cmp.Diff([]int{1, 1, 2, 2}, l.answer); diff != "" {
		t.Errorf("answer numbers (-want +got):\n%s", diff)
	}
}

// TestPreviewEscapedKeyHeld: a key spelled with JSON escapes passes the
// raw-form filter, but the decoded text is checked too: neither the key
// nor its start reaches the TextFunc, however the deltas cut it, and the
// answer's text ends there.
func TestPreviewEscapedKeyHeld(t *testing.T) {
	escaped := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			fmt.Fprintf(&b, "\\u%04x", r)
		}
		return b.String()
	}
	event := func(text string) string {
		return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
	}
	var cases [][][]byte
	for i := 1; i < len(realKey); i++ {
		body := event("Here it is: ") + event(escaped(realKey[:i])) + event(escaped(realKey[i:])) + event(" and more.")
		cases = append(cases, [][]byte{[]byte(body)})
	}
	f := func(c *broker.Config) { anthropicAPI(true)(c); c.MaxCalls = rtsandbox.MaxCallsLimit }
	for i, l := range streamTurn(t, wire.RouteAnthropicMessages, f, cases) {
		got := l.text()
		assertNoSecrets(t, "preview text", got)
		if strings.Contains(got, realKey[:4]) || strings.Contains(got, "and more") {
			t.Fatalf("cut %d: text = %q, want neither the key's start nor what follows it", i+1, got)
		}
	}
}
