package worker

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

func TestParseWorkerConfig(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    wire.SessionWorkerConfig
		wantErr bool
	}{
		{"defaults", `{"model":"m"}`, wire.SessionWorkerConfig{ModelAPI: "openai", Model: "m", TimeZone: "UTC", Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}}, false},
		{"full", `{"modelApi":"anthropic","model":"m","stream":true,"prompt":"p","timeZone":"Asia/Tokyo","compaction":{"engine":"x"},
			"contextWindow":1000000,"reserveTokens":20000,
			"tools":[{"name":"clock","description":"d","parameters":{"type":"object"}}],
			"mcp":[{"server":"Docs-1","tools":[{"name":"search","description":"","parameters":{}}]}]}`,
			wire.SessionWorkerConfig{ModelAPI: "anthropic", Model: "m", Stream: true, Prompt: "p", TimeZone: "Asia/Tokyo",
				ContextWindow: 1000000, ReserveTokens: 20000, Compaction: &wire.SessionCompactionID{Engine: "x"},
				Tools: []rtsandbox.ToolSpec{{Name: "clock", Description: "d", Parameters: []byte(`{"type":"object"}`)}},
				MCP:   []wire.MCPServerTools{{Server: "Docs-1", Tools: []rtsandbox.ToolSpec{{Name: "search", Parameters: []byte(`{}`)}}}}}, false},
		{"empty", `{}`, wire.SessionWorkerConfig{}, true},
		{"model null", `{"model":null}`, wire.SessionWorkerConfig{}, true},
		{"stream a string", `{"model":"m","stream":"yes"}`, wire.SessionWorkerConfig{}, true},
		{"time zone Local", `{"model":"m","timeZone":"Local"}`, wire.SessionWorkerConfig{}, true},
		{"tool name", `{"model":"m","tools":[{"name":"Bad Name","description":"","parameters":{}}]}`, wire.SessionWorkerConfig{}, true},
		{"mcp server name", `{"model":"m","mcp":[{"server":"a/b","tools":[]}]}`, wire.SessionWorkerConfig{}, true},
		{"not an object", `["m"]`, wire.SessionWorkerConfig{}, true},
		{"engine with scope", `{"model":"m","compaction":{"engine":"@jev/pi-compaction.v2"}}`, wire.SessionWorkerConfig{ModelAPI: "openai", Model: "m", TimeZone: "UTC",
			Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}, Compaction: &wire.SessionCompactionID{Engine: "@jev/pi-compaction.v2"}}, false},
		{"engine empty", `{"model":"m","compaction":{"engine":""}}`, wire.SessionWorkerConfig{}, true},
		{"engine with a space", `{"model":"m","compaction":{"engine":"a b"}}`, wire.SessionWorkerConfig{}, true},
		{"engine too long", `{"model":"m","compaction":{"engine":"` + strings.Repeat("e", 101) + `"}}`, wire.SessionWorkerConfig{}, true},
		{"compaction not an object", `{"model":"m","compaction":"x"}`, wire.SessionWorkerConfig{}, true},
		{"window too small", `{"model":"m","contextWindow":4095}`, wire.SessionWorkerConfig{}, true},
		{"window too large", `{"model":"m","contextWindow":10000001}`, wire.SessionWorkerConfig{}, true},
		{"window fractional", `{"model":"m","contextWindow":200000.5}`, wire.SessionWorkerConfig{}, true},
		{"window a string", `{"model":"m","contextWindow":"200000"}`, wire.SessionWorkerConfig{}, true},
		{"reserve negative", `{"model":"m","reserveTokens":-1}`, wire.SessionWorkerConfig{}, true},
		{"reserve over half the default window", `{"model":"m","reserveTokens":100001}`, wire.SessionWorkerConfig{}, true},
		{"reserve over half the window", `{"model":"m","contextWindow":10000,"reserveTokens":5001}`, wire.SessionWorkerConfig{}, true},
		{"window and reserve", `{"model":"m","contextWindow":1e6,"reserveTokens":0}`, wire.SessionWorkerConfig{ModelAPI: "openai", Model: "m", TimeZone: "UTC",
			Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}, ContextWindow: 1000000}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWorkerConfig([]byte(tc.body))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v; want error %v", err, tc.wantErr)
			}
			if !tc.wantErr {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

// The profile's MCP tools are cut to what the broker's discovery lists.
func TestDiscoveredOnly(t *testing.T) {
	spec := func(name string) rtsandbox.ToolSpec { return rtsandbox.ToolSpec{Name: name} }
	servers := []wire.MCPServerTools{
		{Server: "a", Tools: []rtsandbox.ToolSpec{spec("x"), spec("y")}},
		{Server: "gone", Tools: []rtsandbox.ToolSpec{spec("x")}},
		{Server: "b", Tools: []rtsandbox.ToolSpec{spec("z")}},
	}
	d, err := parseDiscovery([]byte(`{"servers":[{"name":"a","tools":["y"]},{"name":"b","tools":[]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.MCPServerTools{{Server: "a", Tools: []rtsandbox.ToolSpec{spec("y")}}}
	if diff := cmp.Diff(want, discoveredOnly(servers, d)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{}`, `{"servers":{}}`, `{"servers":[{"name":1,"tools":[]}]}`, `{"servers":[{"name":"a","tools":"x"}]}`} {
		if _, err := parseDiscovery([]byte(bad)); err == nil {
			t.Errorf("parseDiscovery(%s) = nil error", bad)
		}
	}
}

func FuzzParseWorkerConfig(f *testing.F) {
	f.Add([]byte(`{"modelApi":"anthropic","model":"m","tools":[{"name":"t","description":"","parameters":{}}],"mcp":[{"server":"s","tools":[]}]}`))
	f.Add([]byte(`{"servers":[{"name":"a","tools":["b"]}]}`))
	f.Add([]byte(`{"model":"m","skillsDir":"/run/sandbox/skills","skills":[{"name":"web","description":"d","tools":["t","s/x"]}]}`))
	f.Add([]byte(`{"model":"m","contextWindow":1000000,"reserveTokens":16384,"compaction":{"engine":"host-compactor"}}`))
	f.Add([]byte(`{"model":"m","contextWindow":1e308,"reserveTokens":-0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseWorkerConfig(data)
		if err == nil && (c.Model == "" || !rtsandbox.ValidModelAPI(c.ModelAPI) || (len(c.Skills) > 0) != (c.SkillsDir != "")) {
			t.Fatalf("accepted %+v", c)
		}
		if err == nil && c.ContextWindow != 0 && (c.ContextWindow < minContextWindow || c.ContextWindow > maxContextWindow) {
			t.Fatalf("accepted window %d", c.ContextWindow)
		}
		if tr := newTiers(c.ContextWindow, c.ReserveTokens); err == nil && (tr.native() < tr.window/2 || tr.reserve < 0) {
			t.Fatalf("accepted tiers %+v", tr)
		}
		if err == nil && c.Compaction != nil && !compactorEngine.MatchString(c.Compaction.Engine) {
			t.Fatalf("accepted engine %q", c.Compaction.Engine)
		}
		_, _ = parseDiscovery(data)
	})
}

// FuzzSessionTurnBody is the worker's parse of a /worker/next body: the
// turn when it validates, and otherwise at most a safe turn id to post
// the failure under.
func FuzzSessionTurnBody(f *testing.F) {
	f.Add([]byte(`{"turnId":"t1","author":{"id":"a","name":"A"},"text":"hi","memory":"","images":[],"thinking":"low"}`))
	f.Add([]byte(`{"turnId":"../x","author":{"id":"a","name":"A","principalId":""},"text":"hi","memory":"","images":[{"data":"AQID","mimeType":"image/png"}],"thinking":"max"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id := turnIDOf(data)
		if id != "" && !wire.ValidSafeName(id) {
			t.Fatalf("unsafe turn id %q", id)
		}
		turn, err := wire.ParseSessionTurn(data)
		if err == nil && (turn.Validate() != nil || turn.TurnID != id) {
			t.Fatalf("accepted turn %+v (id %q)", turn, id)
		}
	})
}

func TestMCPResult(t *testing.T) {
	sse := http.Header{"Content-Type": {"text/event-stream"}}
	js := http.Header{"Content-Type": {"application/json"}}
	tests := []struct {
		name    string
		h       http.Header
		body    string
		want    string
		wantErr bool
	}{
		{"json", js, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]}}`, "a\n[image content omitted]\nb", false},
		{"sse after a notification", sse, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\n" +
			"data: \"result\":{\"content\":[],\"structuredContent\":{\"n\":1}}}\n\n", `{"n":1}`, false},
		{"is error", js, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"bad"}],"isError":true}}`, "Tool error: bad", false},
		{"rpc error", js, `{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"nope"}}`, "", true},
		{"other id", js, `{"jsonrpc":"2.0","id":8,"result":{}}`, "", true},
		{"sse without answer", sse, "data: {}\n\n", "", true},
		{"batch", js, `[{"jsonrpc":"2.0","id":7,"result":{}}]`, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			result, err := mcpResult(tc.h, strings.NewReader(tc.body), 7)
			var got string
			if err == nil {
				got, err = mcpToolText(result)
			}
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("= %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, errMCP) {
				t.Errorf("error %v is not errMCP", err)
			}
		})
	}
}

// A server that keeps its event stream open after the response does not
// hold the call: the worker stops reading at the response.
func TestMCPResultStreamLeftOpen(t *testing.T) {
	r, w := io.Pipe()
	defer r.Close()
	go w.Write([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}}\n\n"))
	result, err := mcpResult(http.Header{"Content-Type": {"text/event-stream"}}, r, 3)
	if err != nil || string(result) != `{"content":[{"type":"text","text":"x"}]}` {
		t.Errorf("= %s, %v", result, err)
	}
}

func FuzzMCPAnswer(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a"}]}}`), false)
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"), true)
	f.Fuzz(func(t *testing.T, body []byte, stream bool) {
		h := http.Header{"Content-Type": {"application/json"}}
		if stream {
			h.Set("Content-Type", "text/event-stream")
		}
		result, err := mcpResult(h, bytes.NewReader(body), 1)
		if err != nil {
			return
		}
		if _, ok := object(result); !ok {
			t.Fatalf("result %s is not an object", result)
		}
		_, _ = mcpToolText(result)
	})
}
