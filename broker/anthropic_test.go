package broker_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

// messageAnswer is an Anthropic Messages answer with its usage.
const messageAnswer = `{"id":"msg_1","type":"message","role":"assistant","model":"test-model",` +
	`"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,` +
	`"usage":{"input_tokens":30,"output_tokens":7}}`

const messagesBody = `{"model":"guest-choice","max_tokens":1000000,"messages":[{"role":"user","content":"hello"}]}`

// anthropicAPI switches a fixture's broker to Anthropic Messages, with the
// stand-in's base URL as the model URL.
func anthropicAPI(stream bool) func(*broker.Config) {
	return func(c *broker.Config) {
		c.API = rtsandbox.ModelAPIAnthropic
		c.ModelURL = ep(strings.TrimSuffix(c.ModelURL.String(), "/v1/chat/completions"))
		c.Stream = stream
	}
}

// TestAnthropicRouteRefusals covers what the broker refuses on top of the
// normaliser: the other dialect's routes, ?beta=true anywhere but the
// Anthropic routes, any other query, stream:true the host does not allow,
// and the header rule of the Anthropic routes. None reaches upstream.
func TestAnthropicRouteRefusals(t *testing.T) {
	tests := []struct {
		name      string
		anthropic bool
		target    string
		body      string
		headers   map[string]string
		status    int
		want      string // exact body, or a substring for the Anthropic error shape
	}{
		{name: "messages-off-when-openai", target: wire.RouteAnthropicMessages, body: messagesBody, status: 404, want: "not found"},
		{name: "count-tokens-off-when-openai", target: wire.RouteAnthropicCountTokens, body: messagesBody, status: 404, want: "not found"},
		{name: "model-off-when-anthropic", anthropic: true, target: wire.RouteModel, body: `{"messages":[]}`, status: 404, want: "not found"},
		{name: "beta-on-model", target: wire.RouteModel + "?beta=true", body: `{"messages":[]}`, status: 404, want: "not found"},
		{name: "beta-on-tool", anthropic: true, target: "/tools/clock?beta=true", body: `{}`, status: 404, want: "not found"},
		{name: "beta-on-mcp", anthropic: true, target: "/mcp/docs?beta=true", body: `{}`, status: 404, want: "not found"},
		{name: "beta-when-openai", target: wire.RouteAnthropicMessages + "?beta=true", body: messagesBody, status: 404, want: "not found"},
		{name: "beta-false", anthropic: true, target: wire.RouteAnthropicMessages + "?beta=false", body: messagesBody, status: 404, want: "not found"},
		{name: "beta-and-more", anthropic: true, target: wire.RouteAnthropicMessages + "?beta=true&x=1", body: messagesBody, status: 404, want: "not found"},
		{name: "empty-query", anthropic: true, target: wire.RouteAnthropicMessages + "?", body: messagesBody, status: 404, want: "not found"},
		{name: "beta-with-fragment", anthropic: true, target: wire.RouteAnthropicMessages + "?beta=true#f", body: messagesBody, status: 404, want: "not found"},
		{name: "other-anthropic-path", anthropic: true, target: "/anthropic/v1/files", body: `{}`, status: 404, want: "not found"},
		{name: "messages-subpath", anthropic: true, target: wire.RouteAnthropicMessages + "/batches", body: `{}`, status: 404, want: "not found"},
		{name: "stream-not-allowed", anthropic: true, target: wire.RouteAnthropicMessages,
			body:   `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			status: 400, want: `{"type":"error","error":{"type":"invalid_request_error","message":"Streaming is not enabled on this host"}}`},
		{name: "normaliser-refusal", anthropic: true, target: wire.RouteAnthropicMessages,
			body:   `{"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"web_search"}}`,
			status: 400, want: `{"type":"error","error":{"type":"invalid_request_error","message":"Invalid tool choice"}}`},
		{name: "count-tokens-refusal", anthropic: true, target: wire.RouteAnthropicCountTokens,
			body:   `{"messages":[{"role":"developer","content":"hi"}]}`,
			status: 400, want: `Unexpected role \"developer\"`},
		{name: "not-an-object", anthropic: true, target: wire.RouteAnthropicMessages, body: `[]`, status: 400, want: "invalid input"},
		{name: "x-api-key-real", anthropic: true, target: wire.RouteAnthropicMessages, body: messagesBody,
			headers: map[string]string{"X-Api-Key": "sk-guest"}, status: 403, want: "forbidden credential"},
		{name: "x-api-key-on-model", target: wire.RouteModel, body: `{"messages":[]}`,
			headers: map[string]string{"X-Api-Key": wire.DummyKey}, status: 403, want: "forbidden header"},
		{name: "cookie", anthropic: true, target: wire.RouteAnthropicMessages, body: messagesBody,
			headers: map[string]string{"Cookie": "guest=1"}, status: 403, want: "forbidden header"},
		{name: "forwarded-for", anthropic: true, target: wire.RouteAnthropicMessages, body: messagesBody,
			headers: map[string]string{"X-Forwarded-For": "10.0.0.1"}, status: 403, want: "forbidden header"},
		{name: "bearer-real", anthropic: true, target: wire.RouteAnthropicMessages, body: messagesBody,
			headers: map[string]string{"Authorization": "Bearer sk-guest"}, status: 403, want: "forbidden credential"},
		{name: "sdk-header-on-model", target: wire.RouteModel, body: `{"messages":[]}`,
			headers: map[string]string{"X-Stainless-Lang": "go"}, status: 403, want: "forbidden header"},
		// The OpenAI SDK's path: served for chat completions only, exactly,
		// with the deny-list and the dummy credential as on every route.
		{name: "openai-chat-off-when-anthropic", anthropic: true, target: wire.RouteOpenAIChat, body: `{"messages":[]}`, status: 404, want: "not found"},
		{name: "beta-on-openai-chat", target: wire.RouteOpenAIChat + "?beta=true", body: `{"messages":[]}`, status: 404, want: "not found"},
		{name: "openai-chat-subpath", target: wire.RouteOpenAIChat + "/x", body: `{"messages":[]}`, status: 404, want: "not found"},
		{name: "other-openai-path", target: "/openai/v1/embeddings", body: `{"input":"x"}`, status: 404, want: "not found"},
		{name: "openai-chat-escaped", target: "/openai/v1/chat%2Fcompletions", body: `{"messages":[]}`, status: 404, want: "not found"},
		{name: "cookie-on-openai-chat", target: wire.RouteOpenAIChat, body: `{"messages":[]}`,
			headers: map[string]string{"Cookie": "guest=1"}, status: 403, want: "forbidden header"},
		{name: "forwarded-for-on-openai-chat", target: wire.RouteOpenAIChat, body: `{"messages":[]}`,
			headers: map[string]string{"X-Forwarded-For": "10.0.0.1"}, status: 403, want: "forbidden header"},
		{name: "proxy-authorization-on-openai-chat", target: wire.RouteOpenAIChat, body: `{"messages":[]}`,
			headers: map[string]string{"Proxy-Authorization": "Basic eDp5"}, status: 403, want: "forbidden header"},
		{name: "bearer-real-on-openai-chat", target: wire.RouteOpenAIChat, body: `{"messages":[]}`,
			headers: map[string]string{"Authorization": "Bearer sk-guest"}, status: 403, want: "forbidden credential"},
		{name: "x-api-key-real-on-openai-chat", target: wire.RouteOpenAIChat, body: `{"messages":[]}`,
			headers: map[string]string{"X-Api-Key": "sk-guest"}, status: 403, want: "forbidden credential"},
		{name: "openai-chat-payload-refused", target: wire.RouteOpenAIChat, body: `{"messages":"hello"}`, status: 400, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := &echoTool{}
			f := newFixture(t, jsonReply(messageAnswer), func(c *broker.Config) {
				withTool("clock", `{"type":"object"}`, tool)(c)
				c.MCP = []broker.MCPServer{{Name: "docs", URL: c.ModelURL,
					Tools: []rtsandbox.ToolSpec{{Name: "s", Parameters: json.RawMessage(`{}`)}}}}
				if tt.anthropic {
					anthropicAPI(false)(c)
				}
			})
			w := f.do(http.MethodPost, tt.target, tt.body, tt.headers)
			if w.Code != tt.status || !strings.Contains(w.Body.String(), tt.want) {
				t.Errorf("%s = %d %q; want %d containing %q", tt.target, w.Code, w.Body.String(), tt.status, tt.want)
			}
			if tt.status == 400 && strings.HasPrefix(tt.want, "{") || strings.Contains(tt.want, "Unexpected") {
				if ct := w.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q; want application/json", ct)
				}
			}
			if n := len(f.model.requests()); n != 0 || tool.calls.Load() != 0 {
				t.Errorf("upstream got %d requests, the tool %d calls; want none", n, tool.calls.Load())
			}
		})
	}
}

// TestAnthropicForward: the rebuilt body goes to the base URL plus the
// route without /anthropic (and ?beta=true when sent), with the real key
// as x-api-key, the worker's anthropic-version and anthropic-beta and
// nothing else of its headers; the answer comes back as the upstream sent
// it.
func TestAnthropicForward(t *testing.T) {
	tests := []struct {
		name     string
		target   string
		headers  map[string]string
		wantPath string
		wantHdr  map[string]string
		wantBody map[string]any
	}{
		{
			name: "messages", target: wire.RouteAnthropicMessages,
			headers:  map[string]string{"X-Stainless-Lang": "go", "X-Api-Key": wire.DummyKey, "Anthropic-Version": "2024-01-01"},
			wantPath: "/v1/messages",
			wantHdr:  map[string]string{"X-Api-Key": realKey, "Anthropic-Version": "2024-01-01", "Authorization": "", "X-Stainless-Lang": "", "Anthropic-Beta": ""},
			wantBody: map[string]any{"model": testModel, "max_tokens": 128000.0, "stream": false},
		},
		{
			name: "messages-beta", target: wire.RouteAnthropicMessages + "?beta=true",
			headers:  map[string]string{"Anthropic-Beta": "interleaved-thinking-2025-05-14"},
			wantPath: "/v1/messages?beta=true",
			wantHdr:  map[string]string{"X-Api-Key": realKey, "Anthropic-Version": "2023-06-01", "Anthropic-Beta": "interleaved-thinking-2025-05-14"},
			wantBody: map[string]any{"model": testModel, "max_tokens": 128000.0, "stream": false},
		},
		{
			name: "count-tokens", target: wire.RouteAnthropicCountTokens + "?beta=true",
			headers:  map[string]string{"Anthropic-Beta": strings.Repeat("b", 4097)}, // too long: dropped
			wantPath: "/v1/messages/count_tokens?beta=true",
			wantHdr:  map[string]string{"X-Api-Key": realKey, "Anthropic-Beta": ""},
			wantBody: map[string]any{"model": testModel, "max_tokens": nil, "stream": nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, jsonReply(messageAnswer), anthropicAPI(false))
			wantStatus(t, f.do(http.MethodPost, tt.target, messagesBody, tt.headers), 200, messageAnswer)
			reqs := f.model.requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream got %d requests; want 1", len(reqs))
			}
			r := reqs[0]
			if r.Path != tt.wantPath {
				t.Errorf("upstream path = %q; want %q", r.Path, tt.wantPath)
			}
			for k, v := range tt.wantHdr {
				if got := r.Header.Get(k); got != v {
					t.Errorf("upstream %s = %q; want %q", k, got, v)
				}
			}
			var body map[string]any
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			got := map[string]any{}
			for k := range tt.wantBody {
				got[k] = body[k]
			}
			if diff := cmp.Diff(tt.wantBody, got); diff != "" {
				t.Errorf("upstream body mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAnthropicErrorStatusPassThrough: an upstream error status keeps its
// status, body and allow-listed headers (so the worker can honour
// retry-after or shorten a prompt); other headers are dropped, and a body
// echoing the key is refused before any of it is passed on.
func TestAnthropicErrorStatusPassThrough(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		headers    map[string]string
		wantStatus int
		wantBody   string
		wantHdr    map[string]string
	}{
		{
			name: "prompt-too-long", status: 400,
			body:       `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`,
			headers:    map[string]string{"Request-Id": "req_1", "Set-Cookie": "a=b", "X-Internal": "x"},
			wantStatus: 400, wantBody: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`,
			wantHdr: map[string]string{"Request-Id": "req_1", "Set-Cookie": "", "X-Internal": "", "Content-Type": "application/json"},
		},
		{
			name: "rate-limited", status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`,
			headers:    map[string]string{"Retry-After": "17", "Anthropic-Ratelimit-Unified-Status": "rejected", "X-Should-Retry": "true"},
			wantStatus: 429, wantBody: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`,
			wantHdr: map[string]string{"Retry-After": "17", "Anthropic-Ratelimit-Unified-Status": "rejected", "X-Should-Retry": "true"},
		},
		{
			name: "header-with-key-dropped", status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`,
			headers:    map[string]string{"Request-Id": "id-" + realKey, "Retry-After": strings.Repeat("1", 257)},
			wantStatus: 529, wantBody: `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`,
			wantHdr: map[string]string{"Request-Id": "", "Retry-After": ""},
		},
		{
			name: "body-with-key", status: 500, body: "echo " + realKey,
			wantStatus: 502, wantBody: "broker call failed",
		},
		{name: "redirect-status", status: 307, body: "", wantStatus: 502, wantBody: "broker call failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for k, v := range tt.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}, anthropicAPI(false))
			w := f.post(wire.RouteAnthropicMessages, messagesBody)
			wantStatus(t, w, tt.wantStatus, tt.wantBody)
			for k, v := range tt.wantHdr {
				if got := w.Header().Get(k); got != v {
					t.Errorf("answer %s = %q; want %q", k, got, v)
				}
			}
		})
	}
}

// TestOpenAIChatRoute: the OpenAI SDK's path takes the same request as
// /model, with the SDK's own headers accepted and none of them forwarded:
// upstream gets the rebuilt body with the host's model and the real key,
// and the worker the upstream's answer.
func TestOpenAIChatRoute(t *testing.T) {
	f := newFixture(t, jsonReply(`{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`), nil)
	headers := map[string]string{"X-Stainless-Lang": "go", "X-Stainless-Retry-Count": "0", "Openai-Organization": "org-guest",
		"Idempotency-Key": "abc", "User-Agent": "OpenAI/Go 3.0"}
	body := `{"model":"guest-choice","messages":[{"role":"user","content":"hello"}]}`
	wantStatus(t, f.do(http.MethodPost, wire.RouteOpenAIChat, body, headers), 200,
		`{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	reqs := f.model.requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests; want 1", len(reqs))
	}
	for k := range headers {
		if v := reqs[0].Header.Get(k); v != "" {
			t.Errorf("upstream got the worker's %s: %q", k, v)
		}
	}
	if a := reqs[0].Header.Get("Authorization"); a != "Bearer "+realKey {
		t.Errorf("upstream Authorization = %q; want the real key", a)
	}
	var got struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(reqs[0].Body, &got); err != nil || got.Model != testModel {
		t.Errorf("upstream model = %q, %v; want the host's %q", got.Model, err, testModel)
	}
}
