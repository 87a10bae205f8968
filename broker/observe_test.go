package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// observer collects the records Config.Observe receives.
type observer struct {
	mu   sync.Mutex
	recs []broker.CallRecord
}

func (o *observer) observe(r broker.CallRecord) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.recs = append(o.recs, r)
}

func (o *observer) records() []broker.CallRecord {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]broker.CallRecord(nil), o.recs...)
}

// TestObserveOneRecordPerCall: every call, refused or not, yields exactly
// one record naming its route class, the declared name (never a guest's),
// the status, the refusal class and whether a reflection was refused.
func TestObserveOneRecordPerCall(t *testing.T) {
	reflecting := &echoTool{reply: func(context.Context) (string, error) {
		return "", fmt.Errorf("webhook: %w", upstream.ErrReflect)
	}}
	// The tool takes a moment, so its run time is measurably above zero.
	slow := &echoTool{reply: func(context.Context) (string, error) { time.Sleep(time.Millisecond); return "ok", nil }}
	mcpCall := `{"method":"tools/call","params":{"name":"search","arguments":{}}}`
	tests := []struct {
		name     string
		model    string // the model's answer
		target   string
		body     string
		header   map[string]string
		want     broker.CallRecord
		upstream bool // an upstream call was made
	}{
		{name: "model-ok", target: wire.RouteModel, body: `{"messages":[]}`, upstream: true,
			want: broker.CallRecord{Route: broker.RouteModel, Status: 200}},
		{name: "model-reflection", model: `{"t":"` + realKey + `"}`, target: wire.RouteModel, body: `{"messages":[]}`, upstream: true,
			want: broker.CallRecord{Route: broker.RouteModel, Status: 502, Refusal: "call_failed", Reflection: true}},
		{name: "model-not-json", model: `not json`, target: wire.RouteModel, body: `{"messages":[]}`, upstream: true,
			want: broker.CallRecord{Route: broker.RouteModel, Status: 502, Refusal: "call_failed"}},
		{name: "model-with-query", target: "/model?x=1", body: `{}`,
			want: broker.CallRecord{Route: broker.RouteModel, Status: 404, Refusal: "not_found"}},
		{name: "tool-ok", target: wire.ToolRoute("echo"), body: `{}`, upstream: true,
			want: broker.CallRecord{Route: broker.RouteTools, Tool: "echo", Status: 200}},
		{name: "tool-reflection", target: wire.ToolRoute("leaky"), body: `{}`, upstream: true,
			want: broker.CallRecord{Route: broker.RouteTools, Tool: "leaky", Status: 502, Refusal: "call_failed", Reflection: true}},
		{name: "tool-bad-arguments", target: wire.ToolRoute("echo"), body: `[]`,
			want: broker.CallRecord{Route: broker.RouteTools, Tool: "echo", Status: 400, Refusal: "invalid_input"}},
		{name: "tool-refused-before-routing", target: wire.ToolRoute("echo"), body: `{}`, header: map[string]string{"Cookie": "a=b"},
			want: broker.CallRecord{Route: broker.RouteTools, Tool: "echo", Status: 403, Refusal: "forbidden_header"}},
		{name: "tool-undeclared", target: wire.ToolRoute("bash"), body: `{}`,
			want: broker.CallRecord{Route: broker.RouteTools, Tool: broker.UnknownTool, Status: 404, Refusal: "not_found"}},
		{name: "mcp-refused", target: wire.MCPRoute("public"), body: `{"method":"resources/read","params":{}}`,
			want: broker.CallRecord{Route: broker.RouteMCP, Tool: "public", Status: 403, Refusal: "mcp_refused"}},
		{name: "mcp-ok", target: wire.MCPRoute("public"), body: mcpCall, upstream: true,
			want: broker.CallRecord{Route: broker.RouteMCP, Tool: "public", Status: 200}},
		{name: "mcp-undeclared", target: wire.MCPRoute("evil"), body: mcpCall,
			want: broker.CallRecord{Route: broker.RouteMCP, Tool: broker.UnknownTool, Status: 404, Refusal: "not_found"}},
		{name: "other", target: "/admin", body: `{}`,
			want: broker.CallRecord{Route: broker.RouteOther, Status: 404, Refusal: "not_found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := &observer{}
			mcp := newMCPStub(t, nil, textResult(""))
			model := jsonReply(`{"choices":[]}`)
			if tt.model != "" {
				model = jsonReply(tt.model)
			}
			f := newFixture(t, model, func(c *broker.Config) {
				withTool("echo", `{"type":"object"}`, slow)(c)
				withTool("leaky", `{"type":"object"}`, reflecting)(c)
				withMCP(mcp.fakeUpstream, rtsandbox.Secret(realMCPKey))(c)
				c.Observe = obs.observe
			})
			w := f.do("POST", tt.target, tt.body, tt.header)
			recs := obs.records()
			if len(recs) != 1 {
				t.Fatalf("%d records; want 1", len(recs))
			}
			got := recs[0]
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(broker.CallRecord{}, "Duration", "Upstream")); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			if got.Status != w.Code {
				t.Errorf("record status %d; the worker got %d", got.Status, w.Code)
			}
			if tt.upstream != (got.Upstream > 0) || got.Upstream > got.Duration || got.Duration <= 0 {
				t.Errorf("durations: upstream %v of %v; want an upstream part %v", got.Upstream, got.Duration, tt.upstream)
			}
		})
	}
}
