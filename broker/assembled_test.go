package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The red team's streamed echo (issue 21 item 1): an upstream that echoes
// the model key as a model streams text, the content cut into deltas of
// 1 to 8 bytes, one event each. Every event and the raw bytes between
// them hold no form of the key; only the text a client assembles does.
// Through the broker, in both dialects and both modes, the answer is cut
// off (or refused with the fixed 502 before its head), and the events the
// worker got assemble to no form of the key.

// echoField is a field a client assembles, as events: its stream's
// opening events and each delta's event given the delta's JSON literal.
type echoField struct {
	name  string
	head  []string
	delta func(lit string) string
}

func sseData(data string) string { return "data: " + data + "\n\n" }

func messagesEvent(name, data string) string { return "event: " + name + "\n" + sseData(data) }

const messagesStartEvent = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n"

func chatChunk(choice string) string {
	return sseData(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[` + choice + `]}`)
}

func messagesDelta(typ, member, lit string) string {
	return messagesEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":%q,%q:%s}}`, typ, member, lit))
}

func messagesStartBlock(block string) string {
	return messagesEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":`+block+`}`)
}

// echoFields are, per dialect, the content, the thinking and a tool
// call's arguments.
var echoFields = map[string][]echoField{
	rtsandbox.ModelAPIOpenAI: {
		{"content", []string{chatChunk(`{"index":0,"delta":{"role":"assistant","content":""}}`)},
			func(lit string) string { return chatChunk(`{"index":0,"delta":{"content":` + lit + `}}`) }},
		{"reasoning", nil,
			func(lit string) string { return chatChunk(`{"index":0,"delta":{"reasoning_content":` + lit + `}}`) }},
		{"tool-arguments", []string{chatChunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]}}`)},
			func(lit string) string {
				return chatChunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + lit + `}}]}}`)
			}},
	},
	rtsandbox.ModelAPIAnthropic: {
		{"text", []string{messagesStartEvent, messagesStartBlock(`{"type":"text","text":""}`)},
			func(lit string) string { return messagesDelta("text_delta", "text", lit) }},
		{"thinking", []string{messagesStartEvent, messagesStartBlock(`{"type":"thinking","thinking":"","signature":""}`)},
			func(lit string) string { return messagesDelta("thinking_delta", "thinking", lit) }},
		{"partial-json", []string{messagesStartEvent, messagesStartBlock(`{"type":"tool_use","id":"toolu_1","name":"lookup","input":{}}`)},
			func(lit string) string { return messagesDelta("input_json_delta", "partial_json", lit) }},
	},
}

// echoEnd ends a stream of the dialect.
var echoEnd = map[string]string{
	rtsandbox.ModelAPIOpenAI: chatChunk(`{"index":0,"delta":{},"finish_reason":"stop"}`) + sseData("[DONE]"),
	rtsandbox.ModelAPIAnthropic: messagesEvent("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		messagesEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}`) +
		messagesEvent("message_stop", `{"type":"message_stop"}`),
}

// echoForms are the forms of key an echo uses: every form of
// upstream.Forms and the key as decimal HTML character references.
func echoForms(key string) []string {
	var ent strings.Builder
	for _, r := range key {
		fmt.Fprintf(&ent, "&#%d;", r)
	}
	return append(upstream.Forms(key), ent.String())
}

// cutDeltas cuts text into deltas of size bytes, the first of first.
func cutDeltas(text string, first, size int) []string {
	var out []string
	for n := first; text != ""; n = size {
		n = min(n, len(text))
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// echoCase is one streamed echo.
type echoCase struct {
	name   string
	events []string
}

func (c echoCase) body() []byte { return []byte(strings.Join(c.events, "")) }

// echoCases are, for the dialect, every echo form in every field cut
// into deltas of 1 to 8 bytes at every offset (every first delta's size
// from 1 to the size), or with firsts false only the first offset.
func echoCases(api, key string, firsts bool) []echoCase {
	var cases []echoCase
	for _, f := range echoFields[api] {
		for fi, form := range echoForms(key) {
			for size := 1; size <= 8; size++ {
				for first := 1; first <= size; first++ {
					if !firsts && first > 1 {
						break
					}
					evs := append([]string{}, f.head...)
					for _, d := range cutDeltas("here it is: "+form, first, size) {
						lit, _ := json.Marshal(d)
						evs = append(evs, f.delta(string(lit)))
					}
					evs = append(evs, echoEnd[api])
					cases = append(cases, echoCase{fmt.Sprintf("%s/form-%d/size-%d/first-%d", f.name, fi, size, first), evs})
				}
			}
		}
	}
	return cases
}

// assembledText is what a client assembles from a stream's events: every
// content, thinking and argument delta of either dialect, joined.
func assembledText(t *testing.T, body string) string {
	t.Helper()
	var out strings.Builder
	for _, ev := range strings.Split(body, "\n\n") {
		i := strings.Index(ev, "data: ")
		if i < 0 || !strings.HasPrefix(ev[i+6:], "{") {
			continue
		}
		var v struct {
			Choices []struct {
				Delta struct {
					Content   string
					Reasoning string                                          `json:"reasoning_content"`
					ToolCalls []struct{ Function struct{ Arguments string } } `json:"tool_calls"`
				}
			}
			Delta struct {
				Text, Thinking string
				PartialJSON    string `json:"partial_json"`
			}
		}
		if err := json.Unmarshal([]byte(ev[i+6:]), &v); err != nil {
			continue // an event the abort cut
		}
		for _, c := range v.Choices {
			out.WriteString(c.Delta.Content + c.Delta.Reasoning)
			for _, tc := range c.Delta.ToolCalls {
				out.WriteString(tc.Function.Arguments)
			}
		}
		out.WriteString(v.Delta.Text + v.Delta.Thinking + v.Delta.PartialJSON)
	}
	return out.String()
}

// wantEchoRefused checks one relayed echo: cut off after the head, or the
// fixed 502 before it, and what the worker got assembles to no form.
func wantEchoRefused(t *testing.T, name string, status int, got string, aborted bool, key string) {
	t.Helper()
	if !(aborted && status == http.StatusOK) && !(!aborted && status == http.StatusBadGateway) {
		t.Fatalf("%s: %d, aborted %v; want the answer cut off, or 502 before its head", name, status, aborted)
	}
	if err := upstream.CheckText(assembledText(t, got), key); err != nil {
		t.Fatalf("%s: the events the worker got assemble %q, holding the key", name, assembledText(t, got))
	}
}

// TestStreamedEchoSplitAcrossEvents is the finding through a sealed turn's
// broker: /model (chat completions, streamed by the host's setting),
// /openai/v1/chat/completions and /anthropic/v1/messages.
func TestStreamedEchoSplitAcrossEvents(t *testing.T) {
	routes := []struct {
		api, route string
		edit       func(*broker.Config)
	}{
		{rtsandbox.ModelAPIOpenAI, wire.RouteModel, func(c *broker.Config) { c.Stream = true }},
		{rtsandbox.ModelAPIOpenAI, wire.RouteOpenAIChat, func(c *broker.Config) { c.Stream = true }},
		{rtsandbox.ModelAPIAnthropic, wire.RouteAnthropicMessages, anthropicAPI(true)},
	}
	for _, r := range routes {
		t.Run(r.route, func(t *testing.T) {
			cases := echoCases(r.api, realKey, true)
			var chunks [][][]byte
			for _, c := range cases {
				chunks = append(chunks, [][]byte{c.body()})
			}
			tr := &chunkTransport{cases: chunks}
			f := newFixture(t, nil, func(c *broker.Config) {
				r.edit(c)
				c.Client, c.MaxCalls = upstream.New(tr), rtsandbox.MaxCallsLimit
			})
			var turn *broker.Turn
			for k, c := range cases {
				if k%rtsandbox.MaxCallsLimit == 0 {
					turn = f.broker.Turn(context.Background(), rtsandbox.Binding{Channel: testChannel, Speaker: guest})
				}
				w, aborted := serveCatching(turn, workerRequest(context.Background(), r.route, streamBody))
				wantEchoRefused(t, c.name, w.Code, w.Body.String(), aborted, realKey)
			}
			if len(cases) < 1000 {
				t.Errorf("%d cases; want every form, field, size and offset", len(cases))
			}
		})
	}
}

// TestSessionStreamedEchoSplitAcrossEvents is the finding through a
// session channel's broker, both dialects' routes (/model, which a
// session streams when the worker asks, and /anthropic/v1/messages), over
// its socket from a
// real TLS stand-in that flushes each event on its own.
func TestSessionStreamedEchoSplitAcrossEvents(t *testing.T) {
	for _, api := range []string{rtsandbox.ModelAPIOpenAI, rtsandbox.ModelAPIAnthropic} {
		t.Run(api, func(t *testing.T) {
			cases := echoCases(api, hostSecret, false)
			f, next := echoSession(t, api)
			route, body := wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`
			if api == rtsandbox.ModelAPIOpenAI {
				route, body = wire.RouteModel, `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
			release, _ := f.bind("")
			defer release()
			for _, c := range cases {
				next <- c
				r := f.post(route, body)
				if r.Status == http.StatusBadGateway {
					continue
				}
				if r.Err == nil {
					t.Fatalf("%s: %d %q read whole; want the answer cut off", c.name, r.Status, r.Body)
				}
				if err := upstream.CheckText(assembledText(t, r.Body), hostSecret); err != nil {
					t.Fatalf("%s: the worker's events assemble the key", c.name)
				}
			}
		})
	}
}

// echoSession is a bound session channel's broker whose upstream (a real
// TLS stand-in, each event flushed on its own) streams the events of the
// echo cases sent to next, one case a call, in the dialect api.
func echoSession(t *testing.T, api string) (*sessFixture, chan<- echoCase) {
	t.Helper()
	next := make(chan echoCase, 1)
	f := newSession(t, sessOptions{
		reply: func(w http.ResponseWriter, r *http.Request) {
			c := <-next
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range c.events {
				if _, err := io.WriteString(w, ev); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		},
		broker: func(c *broker.Config) {
			c.API = api
			if api == rtsandbox.ModelAPIOpenAI {
				c.ModelURL = ep(strings.TrimSuffix(c.ModelURL.String(), "/") + "/v1/chat/completions")
			}
		},
		session: func(c *broker.SessionConfig) { c.Worker.ModelAPI = api; c.MaxCalls = rtsandbox.MaxCallsLimit },
	})
	return f, next
}

// TestPreviewNeverShowsKeyPrefix: the preview a guest watches never shows
// any byte of a key that the check refuses later, in any form (its HTML
// character references included, whose text is longer than the raw
// form's carry), however the deltas cut it.
func TestPreviewNeverShowsKeyPrefix(t *testing.T) {
	var cases [][][]byte
	var starts []string
	for _, c := range echoCases(rtsandbox.ModelAPIAnthropic, realKey, false) {
		if !strings.HasPrefix(c.name, "text/") {
			continue
		}
		cases = append(cases, [][]byte{c.body()})
		starts = append(starts, c.name)
	}
	f := func(c *broker.Config) { anthropicAPI(true)(c); c.MaxCalls = rtsandbox.MaxCallsLimit }
	for i, l := range streamTurn(t, wire.RouteAnthropicMessages, f, cases) {
		if got := l.text(); !strings.HasPrefix("here it is: ", got) {
			t.Fatalf("%s: the preview showed %q; want at most the text before the key", starts[i], got)
		}
	}
	if len(cases) < 100 {
		t.Errorf("%d cases", len(cases))
	}
}

// TestStreamedEchoWithoutEventStreamType: the echo is refused whatever
// Content-Type the upstream gives a streamed answer (none, text/plain,
// application/json), since the worker's SDK reads it as events anyway.
func TestStreamedEchoWithoutEventStreamType(t *testing.T) {
	c := echoCases(rtsandbox.ModelAPIAnthropic, realKey, false)[0]
	for _, ct := range []string{"", "text/plain", "application/json"} {
		t.Run("type-"+ct, func(t *testing.T) {
			f := newFixture(t, nil, func(cfg *broker.Config) {
				anthropicAPI(true)(cfg)
				cfg.Client = upstream.New(typedTransport{ct: ct, body: c.body()})
			})
			w, aborted := serveCatching(f.turn, workerRequest(context.Background(), wire.RouteAnthropicMessages, streamBody))
			wantEchoRefused(t, c.name, w.Code, w.Body.String(), aborted, realKey)
		})
	}
}

// typedTransport answers every call with body under Content-Type ct.
type typedTransport struct {
	ct   string
	body []byte
}

func (tr typedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	h := http.Header{}
	if tr.ct != "" {
		h.Set("Content-Type", tr.ct)
	}
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(tr.body)), Request: r, ContentLength: -1}, nil
}
