package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// A stream with thinking, text and tool_use blocks, pings, unknown events
// and delta types, split into deltas, assembles into whole blocks; a
// tool_use without deltas keeps the input of its start, or {} without one.
func TestReadStreamAssembles(t *testing.T) {
	stream := sse(evStart,
		`{"type":"ping"}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"think."}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking "}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{}}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\u4e01 now."}}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"host_lookup","input":{}}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"q\": \"no"}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"on\"}"}}`,
		`{"type":"content_block_stop","index":2}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_2","name":"invalid_tool","input":{}}}`,
		`{"type":"content_block_stop","index":3}`,
		`{"type":"some_future_event","index":9}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}}`,
		evStop,
		`{"type":"content_block_start","index":4,"content_block":{"type":"text","text":"after the stop"}}`,
	)
	blocks, err := readStream(bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	want := []answerBlock{
		{Type: "thinking", Thinking: "Let me think.", Signature: "c2ln"},
		{Type: "text", Text: "Checking \u4e01 now."},
		{Type: "tool_use", ID: "toolu_1", Name: "host_lookup", Input: json.RawMessage(`{"q": "noon"}`)},
		{Type: "tool_use", ID: "toolu_2", Name: "invalid_tool", Input: json.RawMessage(`{}`)},
	}
	if diff := cmp.Diff(want, blocks); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
	msg, thinking, err := chatMessage(blocks)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := jsonjs.Marshal(msg)
	wantMsg := `{"content":"Checking 丁 now.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"host_lookup","arguments":"{\"q\":\"noon\"}"}},` +
		`{"id":"toolu_2","type":"function","function":{"name":"invalid_tool","arguments":"{}"}}]}`
	if string(got) != wantMsg {
		t.Errorf("chat message = %s; want %s", got, wantMsg)
	}
	if diff := cmp.Diff([]any{thinkingBlock{Type: "thinking", Thinking: "Let me think.", Signature: "c2ln"}}, thinking); diff != "" {
		t.Errorf("thinking (-want +got):\n%s", diff)
	}
}

// pings is an endless stream of ping events.
type pings struct{}

func (pings) Read(p []byte) (int, error) {
	const ev = "event: ping\ndata: {\"type\":\"ping\"}\n\n"
	n := 0
	for n+len(ev) <= len(p) {
		n += copy(p[n:], ev)
	}
	return n, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A stream that never ends is cut at its total limit, not read forever.
func TestReadStreamEndlessIsBounded(t *testing.T) {
	src := &countingReader{r: pings{}}
	_, err := readStream(src)
	if class, _ := classify(err); class != classModelStream || !errors.Is(err, errModelStreamLimit) {
		t.Fatalf("readStream(endless pings) = %v; want model stream over its limit", err)
	}
	if src.n > streamLimits.MaxTotal+64<<10 {
		t.Errorf("read %d bytes; want about %d", src.n, streamLimits.MaxTotal)
	}
}

// The request translation: system to system, history from the first user
// message on, each assistant call message to tool_use blocks (arguments
// that are not an object replayed as the omitted placeholder), each run of
// tool messages to one user message of tool_result blocks, the thinking
// budget of the level, and the thinking blocks of the last answer
// replayed in front of its calls. The broker's rebuild accepts it as it is.
func TestAnthropicRequest(t *testing.T) {
	c := newAnthropicClient(modelSettings{api: rtsandbox.ModelAPIAnthropic, thinking: "medium", stream: true}, nil)
	c.pending, c.hasPending = []any{thinkingBlock{Type: "thinking", Thinking: "hm", Signature: "sig"}, redactedThinkingBlock{Type: "redacted_thinking", Data: "opaque"}}, true
	p := &modelPayload{Model: "m", Tools: []wire.ChatTool{{Type: "function", Function: rtsandbox.ToolSpec{Name: "host_x", Description: "X", Parameters: json.RawMessage(`{"type":"object"}`)}}}, Messages: []message{
		{Role: "system", Content: "sys"},
		{Role: "assistant", Content: "orphaned history answer"},
		{Role: "user", Content: "old question"}, {Role: "assistant", Content: "old answer"},
		{Role: "user", Content: "now"},
		{Role: "assistant", Content: "", ToolCalls: []wire.ToolCall{
			{ID: "c1", Type: "function", Function: wire.FunctionCall{Name: "host_x", Arguments: `{"a": 1}`}},
			{ID: "c2", Type: "function", Function: wire.FunctionCall{Name: "invalid_tool", Arguments: `[1]`}},
		}},
		{Role: "tool", ToolCallID: "c1", Content: "one"}, {Role: "tool", ToolCallID: "c2", Content: refusedText},
	}}
	got, err := jsonjs.Marshal(c.request(p))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","max_tokens":12288,"system":"sys","messages":[` +
		`{"role":"user","content":"old question"},{"role":"assistant","content":"old answer"},{"role":"user","content":"now"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"redacted_thinking","data":"opaque"},` +
		`{"type":"tool_use","id":"c1","name":"host_x","input":{"a":1}},` +
		`{"type":"tool_use","id":"c2","name":"invalid_tool","input":{"omitted":"Invalid or large arguments omitted from context."}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"one"},{"type":"tool_result","tool_use_id":"c2","content":"Tool call refused or failed."}]}],` +
		`"tools":[{"name":"host_x","description":"X","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":8192},"stream":true}`
	if string(got) != want {
		t.Errorf("request =\n%s\nwant\n%s", got, want)
	}
	var fields map[string]json.RawMessage
	json.Unmarshal(got, &fields)
	rebuilt, err := modelapi.NormalizeMessages(fields, modelapi.MessagesParams{Model: "claude", Level: modelapi.LevelMedium})
	if err != nil {
		t.Fatalf("the broker's rebuild refuses the request: %v", err)
	}
	if rebuilt.Thinking == nil || rebuilt.Thinking.BudgetTokens != 8192 || rebuilt.MaxTokens != 12288 {
		t.Errorf("rebuilt thinking %+v, max_tokens %d; want the asked 8192 and 12288", rebuilt.Thinking, rebuilt.MaxTokens)
	}
	// A later answer without tool calls does not disturb the replay of
	// the last one; the next call message has its own (none).
	p.Messages = append(p.Messages, message{Role: "assistant", ToolCalls: []wire.ToolCall{{ID: "c3", Type: "function", Function: wire.FunctionCall{Name: "host_x", Arguments: `{}`}}}})
	c.pending, c.hasPending = nil, true
	again, _ := jsonjs.Marshal(c.request(p))
	if strings.Contains(string(again), `"thinking":"hm"`) {
		t.Errorf("thinking of an older answer replayed: %s", again)
	}
}

// The context budget holds for the Anthropic request as sent.
func TestAnthropicFitContext(t *testing.T) {
	big := strings.Repeat("z", 70*1024)
	a := &agent{model: newAnthropicClient(modelSettings{}, nil), histLeft: 2, payload: modelPayload{Model: "m", Messages: []message{
		{Role: "system", Content: "s"},
		{Role: "user", Content: big}, {Role: "assistant", Content: "old"},
		{Role: "user", Content: "current"},
		{Role: "assistant", Content: big, ToolCalls: []wire.ToolCall{{ID: "a", Type: "function", Function: wire.FunctionCall{Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: "a", Content: big},
		{Role: "assistant", Content: "x", ToolCalls: []wire.ToolCall{{ID: "b", Type: "function", Function: wire.FunctionCall{Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: "b", Content: big},
	}}}
	if err := a.fitContext(); err != nil {
		t.Fatal(err)
	}
	if n := jsonjs.Size(a.model.request(&a.payload)); n > maxPayload {
		t.Errorf("request is %d bytes; want at most %d", n, maxPayload)
	}
	if n := len(a.payload.Messages); n != 4 {
		t.Errorf("messages left = %d; want 4 (system, current, the last call and its result)", n)
	}
}

// The retry policy honours retry-after within its bounds and falls back
// to doubling backoff without one.
func TestRetryPolicyWait(t *testing.T) {
	p := retryPolicy{max: 3, maxWait: 20 * time.Second, maxTotal: 30 * time.Second, backoff: time.Second}
	tests := []struct {
		name   string
		state  retryState
		after  time.Duration
		ctxFor time.Duration // 0: no deadline
		want   time.Duration
		ok     bool
	}{
		{"retry-after", retryState{}, 7 * time.Second, 0, 7 * time.Second, true},
		{"retry-after-zero", retryState{}, 0, 0, 0, true},
		{"backoff-first", retryState{}, -1, 0, time.Second, true},
		{"backoff-doubles", retryState{retries: 2, waited: 3 * time.Second}, -1, 0, 4 * time.Second, true},
		{"retries-spent", retryState{retries: 3}, 0, 0, 0, false},
		{"wait-too-long", retryState{}, 21 * time.Second, 0, 0, false},
		{"total-too-long", retryState{retries: 1, waited: 20 * time.Second}, 11 * time.Second, 0, 0, false},
		{"past-the-deadline", retryState{}, 5 * time.Second, 2 * time.Second, 0, false},
		{"before-the-deadline", retryState{}, 5 * time.Second, time.Minute, 5 * time.Second, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctxFor > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxFor)
				defer cancel()
			}
			slept := time.Duration(-1)
			p.sleep = func(_ context.Context, d time.Duration) error { slept = d; return nil }
			s := tc.state
			err := p.wait(ctx, &s, tc.after)
			if ok := err == nil; ok != tc.ok || (ok && slept != tc.want) {
				t.Fatalf("wait = %v after sleeping %v; want ok %v and %v", err, slept, tc.ok, tc.want)
			}
			if !tc.ok && !errors.Is(err, errModelOverloaded) {
				t.Errorf("wait = %v; want errModelOverloaded", err)
			}
			if tc.ok && (s.retries != tc.state.retries+1 || s.waited != tc.state.waited+tc.want) {
				t.Errorf("state = %+v; want one more retry and %v more waited", s, tc.want)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", -1}, {"0", 0}, {"3", 3 * time.Second}, {" 1.5 ", 1500 * time.Millisecond},
		{"-1", -1}, {"soon", -1}, {"NaN", -1}, {"1e30", maxRetryAfter},
		{"Wed, 21 Oct 2015 07:28:00 GMT", 0}, // in the past: at once
	}
	for _, tc := range tests {
		h := http.Header{}
		if tc.value != "" {
			h.Set("Retry-After", tc.value)
		}
		if got := retryAfter(h); got != tc.want {
			t.Errorf("retryAfter(%q) = %v; want %v", tc.value, got, tc.want)
		}
	}
}

// The model fields of the turn: absent means openai, not streamed, no
// thinking; present ones must have their type and a known value.
func TestDecodeTurnModelFields(t *testing.T) {
	base, _ := jsonjs.Marshal(testTurn("alice", "hi"))
	with := func(extra string) []byte {
		return append(bytes.TrimSuffix(base, []byte("}")), []byte(","+extra+"}")...)
	}
	tests := []struct {
		name    string
		in      []byte
		api     string
		stream  bool
		level   string
		wantErr string
	}{
		{"absent", base, "", false, "", ""},
		{"anthropic", with(`"modelApi":"anthropic","stream":true,"thinking":"xhigh"`), "anthropic", true, "xhigh", ""},
		{"openai-empty-level", with(`"modelApi":"openai","stream":false,"thinking":""`), "openai", false, "", ""},
		{"unknown-api", with(`"modelApi":"gemini"`), "", false, "", "invalid turn: modelApi"},
		{"api-not-string", with(`"modelApi":1`), "", false, "", "invalid turn: modelApi"},
		{"stream-not-bool", with(`"stream":"yes"`), "", false, "", "invalid turn: stream"},
		{"unknown-level", with(`"thinking":"max"`), "", false, "", "invalid turn: thinking"},
		{"level-null", with(`"thinking":null`), "", false, "", "invalid turn: thinking"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			turn, err := decodeTurn(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("decodeTurn = %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || turn.ModelAPI != tc.api || turn.Stream != tc.stream || turn.Thinking != tc.level {
				t.Errorf("decodeTurn = %q %v %q, %v; want %q %v %q", turn.ModelAPI, turn.Stream, turn.Thinking, err, tc.api, tc.stream, tc.level)
			}
		})
	}
}

// Which 429 and 529 answers are worth a retry: the upstream's, not the
// broker's own 429, and none that says x-should-retry: false.
func TestRetryableAnswer(t *testing.T) {
	rateLimit := `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`
	tests := []struct {
		name      string
		status    int
		header    http.Header
		body      string
		retry     bool
		wantAfter time.Duration
	}{
		{"overloaded", 529, http.Header{}, `{"type":"error","error":{"type":"overloaded_error"}}`, true, -1},
		{"overloaded-retry-after", 529, http.Header{"Retry-After": {"2"}}, ``, true, 2 * time.Second},
		{"rate-limit-body", 429, http.Header{}, rateLimit, true, -1},
		{"rate-limit-retry-after", 429, http.Header{"Retry-After": {"1"}}, `Too many`, true, time.Second},
		{"broker-budget", 429, http.Header{}, `Broker budget exhausted`, false, 0},
		{"should-not-retry", 529, http.Header{"X-Should-Retry": {"false"}}, ``, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := retryableAnswer(&brokerclient.Response{Status: tc.status, Header: tc.header, Body: strings.NewReader(tc.body)})
			var r *retryable
			var status *brokerclient.StatusError
			switch {
			case tc.retry && (!errors.As(err, &r) || r.after != tc.wantAfter || r.status.Status != tc.status):
				t.Errorf("retryableAnswer = %v; want a retry after %v", err, tc.wantAfter)
			case !tc.retry && (errors.As(err, &r) || !errors.As(err, &status) || status.Status != tc.status):
				t.Errorf("retryableAnswer = %v; want the status %d, no retry", err, tc.status)
			}
		})
	}
}
