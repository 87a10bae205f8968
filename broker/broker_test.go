package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/upstream/endpointtest"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The reference's test "Credential swap and pinning".
func TestCredentialSwapAndPinning(t *testing.T) {
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=upstream")
		w.Header().Set("Authorization", "Bearer upstream")
		w.Header().Set("Connection", "keep-alive")
		jsonReply(`{"choices":[]}`)(w, r)
	}, nil)
	w := f.do("POST", wire.RouteModel, `{"messages":[],"model":"expensive","max_tokens":999999,"callback_url":"https://guest.example"}`,
		map[string]string{"User-Agent": "guest"})
	wantStatus(t, w, 200, `{"choices":[]}`)
	if w.Header().Get("Set-Cookie") != "" || w.Header().Get("Authorization") != "" {
		t.Errorf("guest got upstream headers: %v", w.Header())
	}
	if got := w.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q; want application/json", got)
	}
	reqs := f.model.requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests; want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" {
		t.Errorf("upstream path = %q; want the fixed model URL", r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+realKey {
		t.Errorf("upstream authorization = %q; want the real key", got)
	}
	if ua, ok := r.Header["User-Agent"]; ok {
		t.Errorf("upstream user-agent = %q; want none", ua)
	}
	if got, want := string(r.Body), `{"model":"test-model","messages":[],"stream":false,"max_tokens":4096}`; got != want {
		t.Errorf("upstream body = %s; want %s", got, want)
	}
}

// The reference's test "Header refusals": each header set on /model → 403, upstream
// never called.
func TestHeaderRefusals(t *testing.T) {
	for _, h := range []string{"connection", "keep-alive", "proxy-authorization", "te", "trailer",
		"transfer-encoding", "upgrade", "x-api-key", "cookie", "forwarded", "x-forwarded-host",
		"x-provider-token", "expect", "origin", "x-forwarded-for", "x-forwarded-proto"} {
		t.Run(h, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			w := f.do("POST", wire.RouteModel, `{"messages":[]}`, map[string]string{h: "guest-supplied"})
			wantStatus(t, w, 403, "forbidden header")
			if n := len(f.model.requests()); n != 0 {
				t.Errorf("upstream called %d times; want 0", n)
			}
			if f.turn.Remaining() != rtsandbox.DefaultMaxCalls {
				t.Errorf("a header refusal used budget: remaining %d", f.turn.Remaining())
			}
		})
	}
}

// Go moves Transfer-Encoding and Host out of r.Header; they are checked
// where Go puts them.
func TestGoConsumedHeadersAreChecked(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[]}`))
	r.Host = "broker"
	r.TransferEncoding = []string{"chunked"}
	w := httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	wantStatus(t, w, 403, "forbidden header")

	r = httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[]}`))
	r.Host = "api.example"
	w = httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	wantStatus(t, w, 403, "forbidden host")

	// Over HTTP/1.1 net/http refuses a request without Host, so an empty
	// r.Host is a Host header sent empty: refused.
	r = httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[]}`))
	r.Host = ""
	w = httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	wantStatus(t, w, 403, "forbidden host")

	// HTTP/1.0 hides Transfer-Encoding from the handler: refused.
	r = httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[]}`))
	r.Host, r.Proto, r.ProtoMajor, r.ProtoMinor = "broker", "HTTP/1.0", 1, 0
	w = httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	wantStatus(t, w, 403, "forbidden header")
}

// The reference's test "Credential/host".
func TestForbiddenCredentialAndHost(t *testing.T) {
	f := newFixture(t, nil, nil)
	wantStatus(t, f.do("POST", wire.RouteModel, `{"messages":[]}`, map[string]string{"Authorization": "Bearer stolen"}), 403, "forbidden credential")
	r := httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[]}`))
	r.Host = "api.example"
	w := httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	wantStatus(t, w, 403, "forbidden host")
	if n := len(f.model.requests()); n != 0 {
		t.Errorf("upstream called %d times; want 0", n)
	}
}

// Absent authorization is allowed, as in the reference (Host is always
// present over HTTP/1.1).
func TestAbsentAuthorizationAllowed(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[]}`))
	r.Host = "broker"
	w := httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	wantStatus(t, w, 200, "")
}

// The reference's test "Unknown routes → 404", plus the Go port's stricter target
// rules (empty query, absolute form).
func TestUnknownRoutes(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, target := range []string{"/", "/health", "/anthropic/v1/messages", "/model/extra",
		"/model?url=https://guest.example", wire.ToolRoute("bash"), wire.ToolRoute("read"), wire.ToolRoute("constructor"),
		wire.MCPRoute("private"), "/mcp/public/extra", "/tools/%62ash", "/model?", "/%6dodel", "/model/",
		"//model", "/./model", "/tools/", "/mcp/"} {
		t.Run(target, func(t *testing.T) {
			wantStatus(t, f.post(target, `{"messages":[]}`), 404, "not found")
		})
	}
	for _, method := range []string{"GET", "PUT", "HEAD", "OPTIONS", "DELETE"} {
		t.Run(method, func(t *testing.T) {
			if w := f.do(method, wire.RouteModel, "", nil); w.Code != 404 {
				t.Errorf("%s /model = %d; want 404", method, w.Code)
			}
		})
	}
	if n := len(f.model.requests()); n != 0 {
		t.Errorf("upstream called %d times; want 0", n)
	}
	if f.turn.Remaining() != rtsandbox.DefaultMaxCalls {
		t.Errorf("404s used budget: remaining %d", f.turn.Remaining())
	}
}

func TestAbsoluteFormTargetRefused(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := httptest.NewRequest("POST", "http://broker/model", strings.NewReader(`{"messages":[]}`))
	r.Host = "broker"
	w := httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	wantStatus(t, w, 400, "invalid URL")
}

// echoTool records what it was called with.
type echoTool struct {
	calls atomic.Int32
	input atomic.Value
	tc    atomic.Value
	reply func(ctx context.Context) (string, error)
}

func (e *echoTool) Run(ctx context.Context, input json.RawMessage, tc rtsandbox.Binding) (string, error) {
	e.calls.Add(1)
	e.input.Store(string(input))
	e.tc.Store(tc)
	if e.reply != nil {
		return e.reply(ctx)
	}
	return "ok", nil
}

func withTool(name string, params string, impl rtsandbox.HostTool) func(*broker.Config) {
	return func(c *broker.Config) {
		c.Tools = append(c.Tools, broker.Tool{
			Spec: rtsandbox.ToolSpec{Name: name, Description: name, Parameters: json.RawMessage(params)},
			Impl: impl,
		})
	}
}

// The reference's test "Host-bound identity".
func TestHostBoundIdentity(t *testing.T) {
	echo := &echoTool{}
	f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, echo))
	wantStatus(t, f.post(wire.ToolRoute("echo"), `{"speaker":"owner","channel":"fake:private"}`), 200, `{"text":"ok"}`)
	tc := echo.tc.Load().(rtsandbox.Binding)
	if tc.Channel != testChannel || tc.Speaker != guest {
		t.Errorf("tool context = %+v; want channel %q speaker %+v", tc, testChannel, guest)
	}
	var in map[string]string
	if err := json.Unmarshal([]byte(echo.input.Load().(string)), &in); err != nil || in["speaker"] != "owner" {
		t.Errorf("tool input = %s; want the raw body with speaker owner", echo.input.Load())
	}
	wantStatus(t, f.post(wire.ToolRoute("bash"), `{}`), 404, "not found")
	if n := echo.calls.Load(); n != 1 {
		t.Errorf("callback count = %d; want 1", n)
	}
}

func withMCP(u *fakeUpstream, key rtsandbox.Secret) func(*broker.Config) {
	return func(c *broker.Config) {
		srv := broker.MCPServer{
			Name:  "public",
			URL:   ep(u.url("/rpc")),
			Tools: []rtsandbox.ToolSpec{{Name: "search", Description: "Search", Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)}},
		}
		if key != "" {
			srv.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return key, nil }
		}
		c.MCP = append(c.MCP, srv)
	}
}

// The reference's test "MCP pinning", on the MCP client: the guest's extra fields
// (url, id) never reach the server, the one tools/call carries exactly the
// declared tool and the guest's arguments, and every request goes to the
// fixed URL with the MCP key.
func TestMCPPinning(t *testing.T) {
	mcp := newMCPStub(t, nil, func(*mcpsdk.CallToolRequest) *mcpsdk.CallToolResult { return &mcpsdk.CallToolResult{} })
	// Both stand-ins are httptest TLS servers with the same test
	// certificate, so the fixture's client trusts the MCP one too.
	f := newFixture(t, nil, withMCP(mcp.fakeUpstream, rtsandbox.Secret(realMCPKey)))
	for _, body := range []string{
		`{"method":"resources/read","params":{}}`,
		`{"method":"tools/call","params":{"name":"delete","arguments":{}}}`,
		`[{"method":"tools/call","params":{"name":"search","arguments":{}}}]`,
	} {
		if w := f.post(wire.MCPRoute("public"), body); w.Code == 200 {
			t.Errorf("POST /mcp/public %s = 200; want a refusal", body)
		}
	}
	w := f.post(wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"search","arguments":{"query":"hello"}},"url":"https://guest.example","id":99}`)
	wantStatus(t, w, 200, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	var toolCalls []rpc
	for _, c := range mcp.calls(t) {
		if c.Method == wire.MCPMethodCall {
			toolCalls = append(toolCalls, c)
		}
	}
	if len(toolCalls) != 1 {
		t.Fatalf("MCP upstream got %d tools/call; want exactly 1", len(toolCalls))
	}
	if got, want := string(toolCalls[0].Params), `{"name":"search","arguments":{"query":"hello"}}`; got != want {
		t.Errorf("MCP tools/call params = %s; want %s", got, want)
	}
	for _, r := range mcp.requests() {
		if strings.Contains(string(r.Body), "guest.example") || strings.Contains(string(r.Body), `"id":99`) {
			t.Errorf("MCP upstream body %s carries the guest's extra fields", r.Body)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer "+realMCPKey {
			t.Errorf("MCP authorization = %q; want the MCP key", got)
		}
		if r.Path != "/rpc" {
			t.Errorf("MCP path = %q; want /rpc", r.Path)
		}
	}
}

// The reference's test "Reflection and upstream error hiding".
func TestReflectionAndUpstreamErrorHiding(t *testing.T) {
	f := newFixture(t, jsonReply(`{"token":"real-model-key"}`), nil)
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
	f = newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		io.WriteString(w, realKey)
	}, nil)
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
}

// The reference's test "Fail closed".
func TestFailClosed(t *testing.T) {
	f := newFixture(t, nil, func(c *broker.Config) {
		c.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "", nil }
		c.MaxCalls = 2
	})
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
	wantStatus(t, f.post(wire.RouteModel, `"`+strings.Repeat("x", 270000)+`"`), 502, "broker call failed")
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 429, "call budget exhausted or busy")
	if n := len(f.model.requests()); n != 0 {
		t.Errorf("upstream called %d times; want 0", n)
	}
}

func TestConstructionChecks(t *testing.T) {
	key := func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "k", nil }
	base := func() broker.Config {
		return broker.Config{ModelURL: ep("https://models.example/v1"), Model: "m", APIKey: key}
	}
	impl := &echoTool{}
	tests := []struct {
		name string
		edit func(*broker.Config)
		want error
	}{
		// The endpoint rule itself is upstream.ParseEndpoint's
		// (TestEndpointRuleRegression); the broker refuses a missing one.
		{"model-url-missing", func(c *broker.Config) { c.ModelURL = upstream.Endpoint{} }, broker.ErrEndpoint},
		{"max-calls-1001", func(c *broker.Config) { c.MaxCalls = 1001 }, broker.ErrBudget},
		{"max-calls-negative", func(c *broker.Config) { c.MaxCalls = -1 }, broker.ErrBudget},
		{"max-tokens-32769", func(c *broker.Config) { c.MaxOutputTokens = 32769 }, broker.ErrBudget},
		{"bad-tool-name", withTool("Bash", `{}`, impl), broker.ErrHostTool},
		{"duplicate-tool", func(c *broker.Config) {
			withTool("echo", `{}`, impl)(c)
			withTool("echo", `{}`, impl)(c)
		}, broker.ErrHostTool},
		{"tool-without-impl", withTool("echo", `{}`, nil), broker.ErrHostTool},
		{"mcp-url-missing", func(c *broker.Config) {
			c.MCP = []broker.MCPServer{{Name: "docs", Tools: []rtsandbox.ToolSpec{{Name: "s", Parameters: json.RawMessage(`{}`)}}}}
		}, broker.ErrEndpoint},
		{"mcp-duplicate-server", func(c *broker.Config) {
			s := broker.MCPServer{Name: "docs", URL: ep("https://mcp.example"), Tools: []rtsandbox.ToolSpec{{Name: "s", Parameters: json.RawMessage(`{}`)}}}
			c.MCP = []broker.MCPServer{s, s}
		}, broker.ErrMCP},
		{"mcp-duplicate-tool", func(c *broker.Config) {
			tool := rtsandbox.ToolSpec{Name: "s", Parameters: json.RawMessage(`{}`)}
			c.MCP = []broker.MCPServer{{Name: "docs", URL: ep("https://mcp.example"), Tools: []rtsandbox.ToolSpec{tool, tool}}}
		}, broker.ErrMCP},
		{"mcp-bad-tool-name", func(c *broker.Config) {
			c.MCP = []broker.MCPServer{{Name: "docs", URL: ep("https://mcp.example"), Tools: []rtsandbox.ToolSpec{{Name: "s.x", Parameters: json.RawMessage(`{}`)}}}}
		}, broker.ErrMCP},
		{"mcp-tool-name-too-long", func(c *broker.Config) {
			c.MCP = []broker.MCPServer{{Name: "docs", URL: ep("https://mcp.example"), Tools: []rtsandbox.ToolSpec{{Name: strings.Repeat("s", 129), Parameters: json.RawMessage(`{}`)}}}}
		}, broker.ErrMCP},
		{"mcp-server-name-keeps-sealed-rule", func(c *broker.Config) {
			c.MCP = []broker.MCPServer{{Name: "Docs", URL: ep("https://mcp.example"), Tools: []rtsandbox.ToolSpec{{Name: "s", Parameters: json.RawMessage(`{}`)}}}}
		}, broker.ErrMCP},
		// Beyond the reference: operator schemas are checked now.
		{"tool-schema-remote-ref", withTool("echo", `{"$schema":"http://json-schema.org/draft-07/schema#"}`, impl), broker.ErrToolSchema},
		{"tool-schema-not-object", withTool("echo", `true`, impl), broker.ErrToolSchema},
		{"mcp-schema-remote-ref", func(c *broker.Config) {
			c.MCP = []broker.MCPServer{{Name: "docs", URL: ep("https://mcp.example"), Tools: []rtsandbox.ToolSpec{{Name: "s", Parameters: json.RawMessage(`{"properties":{"q":{"$ref":"https://x/s"}}}`)}}}}
		}, broker.ErrToolSchema},
		{"tool-schema-bad-type", withTool("echo", `{"type":"objekt"}`, impl), broker.ErrToolSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base()
			tt.edit(&cfg)
			_, err := broker.New(cfg)
			if !errors.Is(err, tt.want) || !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("broker.New = %v; want %v", err, tt.want)
			}
		})
	}
	if _, err := broker.New(base()); err != nil {
		t.Errorf("broker.New(valid) = %v; want nil", err)
	}
	allow := base()
	allow.ModelURL = ep("http://127.0.0.1:1/v1")
	if _, err := broker.New(allow); err != nil {
		t.Errorf("broker.New(http with AllowHTTP) = %v; want nil", err)
	}
}

// The reference's test "Escaped reflection".
func TestEscapedReflection(t *testing.T) {
	f := newFixture(t, jsonReply(`{"token":"real\u002dmodel\u002dkey"}`), nil)
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
}

// The reference's test "Real redirect": the destination gets no request.
func TestRealRedirect(t *testing.T) {
	var hits atomic.Int32
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, `{"choices":[]}`)
	}))
	defer dest.Close()
	src := httptest.NewServer(http.RedirectHandler(dest.URL+"/v1", http.StatusTemporaryRedirect))
	defer src.Close()
	f := newFixture(t, nil, func(c *broker.Config) {
		c.ModelURL, c.Client = ep(src.URL+"/v1"), nil
	})
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
	if n := hits.Load(); n != 0 {
		t.Errorf("redirect destination got %d requests; want 0", n)
	}
}

// The reference's test "Media refused before upstream".
func TestMediaRefusedBeforeUpstream(t *testing.T) {
	f := newFixture(t, nil, nil)
	w := f.post(wire.RouteModel, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://guest.example/a.png"}}]}]}`)
	wantStatus(t, w, 400, "text/function model payload required")
	if n := len(f.model.requests()); n != 0 {
		t.Errorf("upstream called %d times; want 0", n)
	}
}

// The reference's test "Per-call credential scope".
func TestPerCallCredentialScope(t *testing.T) {
	u := newUpstream(t, nil)
	var counter atomic.Int32
	var scopes []rtsandbox.Binding
	b, err := broker.New(broker.Config{
		ModelURL: ep(u.url("/v1")), Model: testModel, Client: u.client(),
		APIKey: func(_ context.Context, s rtsandbox.Binding) (rtsandbox.Secret, error) {
			scopes = append(scopes, s)
			n := counter.Add(1)
			name := strings.TrimPrefix(string(s.Channel), "fake:")
			return rtsandbox.Secret(name + "-key-" + string(rune('0'+n))), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	alphaSpeaker := rtsandbox.Speaker{ID: "guest-a", Name: "Guest A", PrincipalID: "p_guest-a"}
	betaSpeaker := rtsandbox.Speaker{ID: "guest-b", Name: "Guest B", PrincipalID: "p_guest-b"}
	alpha := b.Turn(ctx, rtsandbox.Binding{Channel: "fake:alpha", Speaker: alphaSpeaker, Tier: rtsandbox.TierOwner})
	beta := b.Turn(ctx, rtsandbox.Binding{Channel: "fake:beta", Speaker: betaSpeaker, Tier: rtsandbox.TierMember})
	for _, turn := range []*broker.Turn{alpha, beta, alpha} {
		r := httptest.NewRequest("POST", wire.RouteModel, strings.NewReader(`{"messages":[]}`))
		r.Host = "broker"
		w := httptest.NewRecorder()
		turn.ServeHTTP(w, r)
		wantStatus(t, w, 200, "")
	}
	var auth []string
	for _, r := range u.requests() {
		auth = append(auth, r.Header.Get("Authorization"))
	}
	if diff := cmp.Diff([]string{"Bearer alpha-key-1", "Bearer beta-key-2", "Bearer alpha-key-3"}, auth); diff != "" {
		t.Errorf("upstream authorization (-want +got):\n%s", diff)
	}
	alphaB := rtsandbox.Binding{Channel: "fake:alpha", Speaker: alphaSpeaker, Tier: rtsandbox.TierOwner}
	want := []rtsandbox.Binding{alphaB, {Channel: "fake:beta", Speaker: betaSpeaker, Tier: rtsandbox.TierMember}, alphaB}
	if diff := cmp.Diff(want, scopes); diff != "" {
		t.Errorf("key scopes (-want +got):\n%s", diff)
	}
}

// ep is a checked endpoint; tests run upstreams on loopback http.
func ep(raw string) upstream.Endpoint { return upstream.MustParseEndpoint(raw, true) }

// The broker's model and MCP endpoints refuse exactly what the one
// endpoint rule refuses: what the rule accepts, the broker takes; what it
// refuses never becomes an Endpoint, and the broker refuses the zero one.
func TestEndpointRuleRegression(t *testing.T) {
	key := func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "k", nil }
	t.Run("model", func(t *testing.T) {
		endpointtest.Run(t, broker.ErrEndpoint, func(e upstream.Endpoint) error {
			_, err := broker.New(broker.Config{ModelURL: e, Model: "m", APIKey: key})
			return err
		})
	})
	t.Run("mcp", func(t *testing.T) {
		endpointtest.Run(t, broker.ErrEndpoint, func(e upstream.Endpoint) error {
			mcp := []broker.MCPServer{{Name: "docs", URL: e, Tools: []rtsandbox.ToolSpec{{Name: "s", Parameters: json.RawMessage(`{}`)}}}}
			_, err := broker.New(broker.Config{ModelURL: ep("https://models.example/v1"), Model: "m", APIKey: key, MCP: mcp})
			return err
		})
	})
}

// The Binding a Turn was made with is what every host tool and credential
// getter of the turn receives, tier included; a request body naming
// another channel, speaker or tier changes nothing.
func TestBindingReachesHostToolsAndCredentialGetters(t *testing.T) {
	for _, tier := range []rtsandbox.Tier{rtsandbox.TierNone, rtsandbox.TierMember, rtsandbox.TierOwner} {
		t.Run(tier.String(), func(t *testing.T) {
			var mu sync.Mutex
			var got []rtsandbox.Binding
			record := func(b rtsandbox.Binding) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, b)
			}
			f := newFixture(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
			}, func(c *broker.Config) {
				c.Tools = []broker.Tool{{Spec: rtsandbox.ToolSpec{Name: "whom", Parameters: json.RawMessage(`{"type":"object"}`)},
					Impl: rtsandbox.HostToolFunc(func(_ context.Context, _ json.RawMessage, b rtsandbox.Binding) (string, error) {
						record(b)
						return "ok", nil
					})}}
				c.MCP = []broker.MCPServer{{Name: "docs", URL: c.ModelURL,
					Tools: []rtsandbox.ToolSpec{{Name: "find", Parameters: json.RawMessage(`{"type":"object"}`)}},
					APIKey: func(_ context.Context, b rtsandbox.Binding) (rtsandbox.Secret, error) {
						record(b)
						return "mcp-key", nil
					}}}
			})
			want := rtsandbox.Binding{Channel: "fake:bound", Speaker: guest, Tier: tier}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f.turn = f.broker.Turn(ctx, want)
			wantStatus(t, f.post(wire.ToolRoute("whom"), `{"tier":"owner","channel":"fake:other"}`), 200, `{"text":"ok"}`)
			f.post(wire.MCPRoute("docs"), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"find","arguments":{"tier":2}}}`)
			if diff := cmp.Diff([]rtsandbox.Binding{want, want}, got); diff != "" {
				t.Errorf("bindings seen by the host tool and the MCP key getter (-want +got):\n%s", diff)
			}
		})
	}
}

// A model credential that cannot be read fails the call with the fixed
// guest text; the operator's record names the variable the getter reports
// (never a value), so a missing key is fixed without guessing.
func TestMissingModelKeyNamesVariable(t *testing.T) {
	f := newFixture(t, nil, func(c *broker.Config) {
		c.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
			return "", errors.New("RTS_TEST_MODEL_KEY is unset or empty")
		}
	})
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
	if want := `"detail":"model credential missing: RTS_TEST_MODEL_KEY is unset or empty"`; !strings.Contains(f.logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, f.logs.String())
	}
}
