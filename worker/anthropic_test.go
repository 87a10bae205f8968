package worker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// streamModes runs a test once with whole answers and once streamed.
var streamModes = []struct {
	name   string
	stream bool
}{{"whole", false}, {"streamed", true}}

// A text answer through the Anthropic route, whole and streamed: the
// worker posts Messages (system, the wrapped user message, the tools) and
// the answer's text is the reply and joins the history.
func TestAnthropicTextAnswer(t *testing.T) {
	for _, mode := range streamModes {
		t.Run(mode.name, func(t *testing.T) {
			model := fakemodel.New(fakemodel.Reply("Hello from the Messages API, in pieces."))
			defer model.Close()
			b := startAnthropicBroker(t, model, modelapi.LevelLow)
			r := runAnthropic(t, b, anthropicTurn("Hi", mode.stream))
			wantOK(t, r, "Hello from the Messages API, in pieces.")
			if diff := cmp.Diff([]string{wire.RouteAnthropicMessages}, b.gotRoutes()); diff != "" {
				t.Errorf("broker routes (-want +got):\n%s", diff)
			}
			reqs := model.Requests()
			if len(reqs) != 1 || reqs[0].API != fakemodel.Anthropic {
				t.Fatalf("model requests = %+v; want one Messages request", reqs)
			}
			req := reqs[0]
			if req.Body.Stream != mode.stream || req.UserText() != "Hi" || !strings.Contains(req.System(), "Assist the guests.") {
				t.Errorf("upstream request: stream %v, user %q, system %.80q", req.Body.Stream, req.UserText(), req.System())
			}
			var names []string
			for _, tool := range req.Body.Tools {
				names = append(names, tool.Function.Name)
			}
			if diff := cmp.Diff([]string{"invalid_tool", "memory_set", "memory_get", "memory_remove"}, names); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			var reply rtsandbox.Reply
			json.Unmarshal([]byte(r.stdout), &reply)
			if diff := cmp.Diff(exchange("alice", "Hi", "Hello from the Messages API, in pieces."), reply.State.History); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}
		})
	}
}

// A tool_use round trip, whole and streamed: a host tool through the
// broker and a memory tool in the worker, then the final answer. The
// second request carries the tool_use blocks with their input objects and
// one user message of tool_result blocks, which the broker's rebuild
// accepts.
func TestAnthropicToolUseRoundTrip(t *testing.T) {
	for _, mode := range streamModes {
		t.Run(mode.name, func(t *testing.T) {
			model := fakemodel.New(
				fakemodel.CallTools(
					fakemodel.Call("host_lookup", map[string]any{"q": "noon"}),
					fakemodel.Call("memory_set", map[string]any{"scope": "channel", "key": "k", "text": "v"}),
				),
				fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
					lookup, ok1 := req.ToolResult("toolu_0_0")
					mem, ok2 := req.ToolResult("toolu_0_1")
					if !ok1 || !ok2 {
						return fakemodel.Response{Content: "missing tool results"}
					}
					return fakemodel.Response{Content: lookup + " | " + mem}
				}),
			)
			defer model.Close()
			b := startAnthropicBroker(t, model, modelapi.LevelLow)
			turn := anthropicTurn("look it up", mode.stream)
			turn.Tools = []rtsandbox.ToolSpec{{Name: "lookup", Description: "Look up", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}}
			r := runAnthropic(t, b, turn)
			wantOK(t, r, `{"text":"lookup ran"} | Saved.`)
			want := []string{wire.RouteAnthropicMessages, wire.ToolRoute("lookup"), wire.RouteAnthropicMessages}
			if diff := cmp.Diff(want, b.gotRoutes()); diff != "" {
				t.Errorf("broker routes (-want +got):\n%s", diff)
			}
			var second struct {
				Messages []struct {
					Role    string          `json:"role"`
					Content json.RawMessage `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal([]byte(b.gotBodies()[1]), &second); err != nil {
				t.Fatal(err)
			}
			var tail []string
			for _, m := range second.Messages[1:] {
				tail = append(tail, m.Role+" "+string(m.Content))
			}
			wantTail := []string{
				`assistant [{"type":"tool_use","id":"toolu_0_0","name":"host_lookup","input":{"q":"noon"}},` +
					`{"type":"tool_use","id":"toolu_0_1","name":"memory_set","input":{"key":"k","scope":"channel","text":"v"}}]`,
				`user [{"type":"tool_result","tool_use_id":"toolu_0_0","content":"{\"text\":\"lookup ran\"}"},` +
					`{"type":"tool_result","tool_use_id":"toolu_0_1","content":"Saved."}]`,
			}
			if diff := cmp.Diff(wantTail, tail); diff != "" {
				t.Errorf("second request after the user message (-want +got):\n%s", diff)
			}
		})
	}
}

// Upstream 429 and 529 are retried as their retry-after says, within the
// policy's bounds; the broker's own 429 (no retry-after, no
// rate_limit_error) and x-should-retry: false are not.
func TestAnthropicRetries(t *testing.T) {
	plain429 := fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		return fakemodel.Response{Status: 429, Raw: []byte("Broker budget exhausted"), ContentType: "text/plain"}
	})
	tests := []struct {
		name          string
		script        []fakemodel.Step
		retryAfter    []string
		calls         int
		class, detail string // "" for an ok reply
	}{
		{"overloaded-then-ok", []fakemodel.Step{fakemodel.Status(529), fakemodel.Reply("Recovered.")}, []string{"0"}, 2, "", ""},
		{"rate-limited-then-ok", []fakemodel.Step{fakemodel.Status(429), fakemodel.Status(429), fakemodel.Reply("Recovered.")}, []string{"0", "0.001"}, 3, "", ""},
		{"retries-spent", []fakemodel.Step{fakemodel.Status(529), fakemodel.Status(529), fakemodel.Status(529), fakemodel.Status(529)},
			[]string{"0", "0", "0", "0"}, 4, classModelOverloaded, "model rate limited or overloaded"},
		{"retry-after-too-long", []fakemodel.Step{fakemodel.Status(529)}, []string{"3600"}, 1, classModelOverloaded, "model rate limited or overloaded"},
		{"broker-429", []fakemodel.Step{plain429}, nil, 1, classBudgetExhausted, "status 429"},
		{"other-status", []fakemodel.Step{fakemodel.Status(500)}, nil, 1, classBrokerRefused, "status 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := fakemodel.New(tc.script...)
			defer model.Close()
			b := startAnthropicBroker(t, model, modelapi.LevelLow)
			b.retryAfter = tc.retryAfter
			r := runAnthropic(t, b, anthropicTurn("Hi", true))
			if tc.class == "" {
				wantOK(t, r, "Recovered.")
			} else {
				wantFailed(t, r)
				if class, detail := failureLine(t, r.stderr); class != tc.class || detail != tc.detail {
					t.Errorf("failure line = %q, %q; want %q, %q", class, detail, tc.class, tc.detail)
				}
			}
			if n := len(model.Requests()); n != tc.calls {
				t.Errorf("model calls = %d; want %d", n, tc.calls)
			}
		})
	}
}

// sse writes events as the Messages stream does: an event line and one
// data line each.
func sse(events ...string) []byte {
	var b strings.Builder
	for _, ev := range events {
		var typ struct {
			Type string `json:"type"`
		}
		json.Unmarshal([]byte(ev), &typ)
		b.WriteString("event: " + typ.Type + "\ndata: " + ev + "\n\n")
	}
	return []byte(b.String())
}

const (
	evStart     = `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"model":"x","stop_reason":null,"usage":{"input_tokens":1,"output_tokens":0}}}`
	evStop      = `{"type":"message_stop"}`
	evTextStart = `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
	evTextDelta = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"partial"}}`
	evBlockStop = `{"type":"content_block_stop","index":0}`
)

// A stream that carries an error event, is cut, is malformed or never
// ends within its limits fails the turn with class model_stream; nothing
// of it reaches the reply.
func TestAnthropicBrokenStreams(t *testing.T) {
	chunks := func(parts ...[]byte) fakemodel.Step {
		return fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Chunks: parts, ContentType: "text/event-stream"}
		})
	}
	tests := []struct {
		name   string
		step   fakemodel.Step
		detail string
	}{
		{"error-event", fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Content: marker, StreamError: "overloaded_error"}
		}), "error event in the model stream"},
		{"error-event-mid-block", chunks(sse(evStart, evTextStart, evTextDelta), []byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"}}\n\n")),
			"error event in the model stream"},
		{"cut-before-stop", chunks(sse(evStart, evTextStart, evTextDelta, evBlockStop)), "model stream cut or unreadable"},
		{"cut-mid-event", chunks(sse(evStart, evTextStart), []byte("data: {\"type\":\"content_bl")), "model stream cut or unreadable"},
		{"not-json", chunks(sse(evStart), []byte("data: "+marker+"\n\n")), "model stream malformed"},
		{"delta-before-start", chunks(sse(evTextDelta, evStop)), "model stream malformed"},
		{"block-out-of-order", chunks(sse(evStart, `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`)), "model stream malformed"},
		{"delta-to-closed-block", chunks(sse(evStart, evTextStart, evBlockStop, evTextDelta)), "model stream malformed"},
		{"line-over-limit", chunks(sse(evStart), []byte("data: "+strings.Repeat("x", rtsandbox.MaxBrokerResponse+1)+"\n\n")), "model stream over its limit"},
		{"text-over-limit", chunks(sse(evStart, evTextStart), bigDeltas(rtsandbox.MaxBrokerResponse/1000+1)), "model stream over its limit"},
		{"json-answer-not-message", fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			return fakemodel.Response{Raw: []byte(`{"type":"error","error":{"type":"api_error","message":"` + marker + `"}}`)}
		}), "invalid model response"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := fakemodel.New(tc.step)
			defer model.Close()
			b := startAnthropicBroker(t, model, modelapi.LevelLow)
			r := runAnthropic(t, b, anthropicTurn("Hi", true))
			wantFailed(t, r)
			class, detail := failureLine(t, r.stderr)
			wantClass := classModelStream
			if tc.detail == "invalid model response" {
				wantClass = classModelResponse
			}
			if class != wantClass || detail != tc.detail {
				t.Errorf("failure line = %q, %q; want %q, %q", class, detail, wantClass, tc.detail)
			}
		})
	}
}

// bigDeltas is n text deltas of 1,000 bytes to block 0.
func bigDeltas(n int) []byte {
	delta := `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("y", 1000) + `"}}`
	return sse(slices.Repeat([]string{delta}, n)...)
}

// With a thinking level the worker asks for that level's budget, and the
// thinking block of an answer that called tools goes back, signature and
// all, in front of its tool_use in the next request, which the broker's
// rebuild at the same level accepts.
func TestAnthropicThinkingReplay(t *testing.T) {
	first := sse(evStart,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Use the clock."}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"U2lnbmVk"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_t","name":"host_clock","input":{}}}`,
		`{"type":"content_block_stop","index":1}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use"}}`, evStop)
	model := fakemodel.New(fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		return fakemodel.Response{Chunks: [][]byte{first}, ContentType: "text/event-stream"}
	}), fakemodel.Reply("Noon."))
	defer model.Close()
	b := startAnthropicBroker(t, model, modelapi.LevelHigh)
	turn := anthropicTurn("time?", true)
	turn.Thinking = "high"
	turn.Tools = []rtsandbox.ToolSpec{{Name: "clock", Description: "Clock", Parameters: json.RawMessage(`{"type":"object"}`)}}
	wantOK(t, runAnthropic(t, b, turn), "Noon.")
	bodies := b.gotBodies()
	if len(bodies) != 2 {
		t.Fatalf("Messages calls = %d; want 2", len(bodies))
	}
	for i, body := range bodies {
		if !strings.Contains(body, `"max_tokens":20480,`) || !strings.Contains(body, `"thinking":{"type":"enabled","budget_tokens":16384}`) {
			t.Errorf("request %d asks %.300s; want the high budget 16384 and max_tokens 20480", i, body)
		}
	}
	wantReplay := `{"role":"assistant","content":[{"type":"thinking","thinking":"Use the clock.","signature":"U2lnbmVk"},` +
		`{"type":"tool_use","id":"toolu_t","name":"host_clock","input":{}}]}`
	if !strings.Contains(bodies[1], wantReplay) {
		t.Errorf("second request %s\nlacks the replay %s", bodies[1], wantReplay)
	}
}

// A streamed tool_use whose input is not a JSON object (cut by
// max_tokens, say) is refused like any bad call: the tool does not run,
// its result is the refusal, and the replay shows the omitted-arguments
// placeholder, which the broker's rebuild accepts.
func TestAnthropicMalformedToolInput(t *testing.T) {
	bad := sse(evStart,
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_b","name":"host_lookup","input":{}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"q\": \"cut"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"max_tokens"}}`, evStop)
	model := fakemodel.New(fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		return fakemodel.Response{Chunks: [][]byte{bad}, ContentType: "text/event-stream"}
	}), fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
		result, _ := req.ToolResult("toolu_b")
		return fakemodel.Response{Content: result}
	}))
	defer model.Close()
	b := startAnthropicBroker(t, model, modelapi.LevelLow)
	turn := anthropicTurn("look", true)
	turn.Tools = []rtsandbox.ToolSpec{{Name: "lookup", Description: "Look up", Parameters: json.RawMessage(`{"type":"object"}`)}}
	wantOK(t, runAnthropic(t, b, turn), refusedText)
	if diff := cmp.Diff([]string{wire.RouteAnthropicMessages, wire.RouteAnthropicMessages}, b.gotRoutes()); diff != "" {
		t.Errorf("broker routes (-want +got); the tool must not run:\n%s", diff)
	}
	if !strings.Contains(b.gotBodies()[1], `"input":{"omitted":"Invalid or large arguments omitted from context."}`) {
		t.Errorf("second request %s lacks the omitted-arguments replay", b.gotBodies()[1])
	}
}
