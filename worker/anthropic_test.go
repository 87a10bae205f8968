package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/modelapi"
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
			if diff := cmp.Diff([]string{rtsandbox.RouteAnthropicMessages}, b.gotRoutes()); diff != "" {
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
			want := []string{rtsandbox.RouteAnthropicMessages, rtsandbox.ToolRoute("lookup"), rtsandbox.RouteAnthropicMessages}
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
