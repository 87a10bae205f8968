package broker_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"encoding/base64"
	"encoding/hex"
	"encoding/json"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Beyond the reference's tests: any valid call after the turn signal aborts → 410.
func TestCallAfterTurnEndsIsGone(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.cancel()
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 410, "turn ended")
	if f.turn.Remaining() != rtsandbox.DefaultMaxCalls {
		t.Errorf("410 used budget: remaining %d", f.turn.Remaining())
	}
}

// Beyond the reference's tests: a concurrent second call while one is in flight → 429.
func TestConcurrentCallIsBusy(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	slow := &echoTool{reply: func(ctx context.Context) (string, error) {
		close(started)
		<-release
		return "done", nil
	}}
	f := newFixture(t, nil, withTool("slow", `{"type":"object"}`, slow))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wantStatus(t, f.post(wire.ToolRoute("slow"), `{}`), 200, `{"text":"done"}`)
	}()
	<-started
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 429, "call budget exhausted or busy")
	close(release)
	wg.Wait()
	wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 200, "")
}

// Beyond the reference's tests: refusals after the budget step use one call each; a schema
// refusal never fetches the key.
func TestRefusalsAfterBudgetUseOneCall(t *testing.T) {
	mcp := newUpstream(t, nil)
	tests := []struct {
		name, target, body string
		status             int
		text               string
	}{
		{"array-body", wire.RouteModel, `[{"messages":[]}]`, 400, "invalid input"},
		{"scalar-body", wire.RouteModel, `42`, 400, "invalid input"},
		{"null-body", wire.RouteModel, `null`, 400, "invalid input"},
		{"mcp-batch", wire.MCPRoute("public"), `[{"method":"tools/call"}]`, 400, "invalid input"},
		{"mcp-refusal", wire.MCPRoute("public"), `{"method":"tools/list","params":{}}`, 403, "MCP method or tool refused"},
		{"mcp-arguments-array", wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"search","arguments":[]}}`, 403, "MCP method or tool refused"},
		{"mcp-arguments-absent", wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"search"}}`, 403, "MCP method or tool refused"},
		{"mcp-params-array", wire.MCPRoute("public"), `{"method":"tools/call","params":[]}`, 403, "MCP method or tool refused"},
		{"mcp-method-not-string", wire.MCPRoute("public"), `{"method":1,"params":{}}`, 403, "MCP method or tool refused"},
		{"model-schema", wire.RouteModel, `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"$schema":"https://json-schema.org/draft/2020-12/schema"}}}]}`, 400, "text/function model payload required"},
		{"not-json", wire.RouteModel, `{"messages":`, 502, "broker call failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, withMCP(mcp, rtsandbox.Secret(realMCPKey)))
			wantStatus(t, f.post(tt.target, tt.body), tt.status, tt.text)
			if got := f.turn.Remaining(); got != rtsandbox.DefaultMaxCalls-1 {
				t.Errorf("remaining = %d; want %d", got, rtsandbox.DefaultMaxCalls-1)
			}
			if len(f.scopes) != 0 {
				t.Errorf("key hook called %d times; want 0", len(f.scopes))
			}
		})
	}
	if n := len(mcp.requests()); n != 0 {
		t.Errorf("MCP upstream called %d times; want 0", n)
	}
}

// Beyond the reference's tests: the /model payload refusals reach the guest as 400.
func TestModelPayloadRefusals(t *testing.T) {
	many := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	call := `{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}`
	tool := func(name string) string {
		return `{"type":"function","function":{"name":"` + name + `","description":"d","parameters":{"type":"object"}}}`
	}
	var tools129 []string
	for i := range 129 {
		tools129 = append(tools129, tool("f"+strings.Repeat("a", i%60)+string(rune('a'+i%26))))
	}
	tests := []struct{ name, body string }{
		{"tool-calls-null", `{"messages":[{"role":"assistant","content":"","tool_calls":null}]}`},
		{"tool-call-id-on-user", `{"messages":[{"role":"user","content":"hi","tool_call_id":"c1"}]}`},
		{"message-key-name", `{"messages":[{"role":"user","content":"hi","name":"x"}]}`},
		{"content-null", `{"messages":[{"role":"user","content":null}]}`},
		{"129-messages", `{"messages":` + many(129, `{"role":"user","content":"x"}`) + `}`},
		{"9-tool-calls", `{"messages":[{"role":"assistant","content":"","tool_calls":` + many(9, call) + `}]}`},
		{"129-tools", `{"messages":[],"tools":[` + strings.Join(tools129, ",") + `]}`},
		{"duplicate-tool-names", `{"messages":[],"tools":[` + tool("f") + `,` + tool("f") + `]}`},
		{"schema-absolute-uri", `{"messages":[],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"$schema":"http://json-schema.org/draft-07/schema#"}}}]}`},
		{"tools-null", `{"messages":[],"tools":null}`},
		{"role-developer", `{"messages":[{"role":"developer","content":"x"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, nil)
			wantStatus(t, f.post(wire.RouteModel, tt.body), 400, "text/function model payload required")
			if n := len(f.model.requests()); n != 0 {
				t.Errorf("upstream called %d times; want 0", n)
			}
		})
	}
}

// Beyond the reference's tests: host tool failures → 502.
func TestHostToolFailures(t *testing.T) {
	tests := []struct {
		name  string
		reply func(context.Context) (string, error)
	}{
		{"throws", func(context.Context) (string, error) { return "", errors.New("boom real-model-key") }},
		{"result-over-1mib", func(context.Context) (string, error) { return strings.Repeat("x", 1<<20), nil }},
		// Each '"' doubles in JSON: 600,000 of them encode to 1.2 MB.
		{"escaped-result-over-1mib", func(context.Context) (string, error) { return strings.Repeat(`"`, 600000), nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, &echoTool{reply: tt.reply}))
			wantStatus(t, f.post(wire.ToolRoute("echo"), `{}`), 502, "broker call failed")
		})
	}
	// Exactly at the limit passes: {"text":"…"} is 11 bytes of framing.
	f := newFixture(t, nil, withTool("echo", `{"type":"object"}`, &echoTool{reply: func(context.Context) (string, error) {
		return strings.Repeat("x", rtsandbox.MaxToolResult-11), nil
	}}))
	if w := f.post(wire.ToolRoute("echo"), `{}`); w.Code != 200 || w.Body.Len() != rtsandbox.MaxToolResult {
		t.Errorf("result of exactly 1 MiB = %d (%d bytes); want 200", w.Code, w.Body.Len())
	}
}

// Beyond the reference's tests: upstream body over 1 MiB or not JSON → 502.
func TestUpstreamTooLargeOrNotJSON(t *testing.T) {
	big := `{"t":"` + strings.Repeat("x", 1<<20) + `"}`
	for name, reply := range map[string]http.HandlerFunc{
		"too-large":  jsonReply(big),
		"not-json":   jsonReply(`<html>`),
		"two-values": jsonReply(`{}{}`),
		"status-500": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500); io.WriteString(w, `{}`) },
		"status-302": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(302) },
		"empty-body": func(w http.ResponseWriter, r *http.Request) {},
		"gzip-header": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "\x1f\x8b")
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, reply, nil)
			wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
		})
	}
}

// Beyond the reference's tests: the key reflected in any of the six forms, or as an object
// key → 502. Beyond the reference (upstream.Forms): the key's base64 at
// every byte alignment, so an echoed "Bearer <key>" or "Authorization:
// Bearer <key>" line encoded whole is found, and strings whose character
// references decode to the key.
func TestReflectionForms(t *testing.T) {
	raw := []byte(realKey)
	b64 := func(enc *base64.Encoding, s string) string { return `{"t":"` + enc.EncodeToString([]byte(s)) + `"}` }
	for name, body := range map[string]string{
		"base64":       `{"t":"` + base64.StdEncoding.EncodeToString(raw) + `"}`,
		"base64url":    `{"t":"` + base64.RawURLEncoding.EncodeToString(raw) + `"}`,
		"lower-hex":    `{"t":"` + hex.EncodeToString(raw) + `"}`,
		"upper-hex":    `{"t":"` + strings.ToUpper(hex.EncodeToString(raw)) + `"}`,
		"object-key":   `{"real-model-key":true}`,
		"deep":         `{"choices":[{"message":{"content":"here: real-model-key"}}]}`,
		"raw":          `{"t":"real-model-key"}`,
		"json-escaped": `{"t":"real\u002dmodel\u002dkey"}`,
		// new: other alignments and prefixed lines.
		"base64-offset-0-followed": b64(base64.StdEncoding, realKey+"@example\n"),
		"base64-offset-1":          b64(base64.StdEncoding, "x"+realKey),
		"base64-offset-2":          b64(base64.StdEncoding, "xy"+realKey),
		"base64url-offset-1":       b64(base64.RawURLEncoding, "x"+realKey),
		"base64url-offset-2":       b64(base64.RawURLEncoding, "xy"+realKey),
		"bearer-base64":            b64(base64.StdEncoding, "Bearer "+realKey),
		"authorization-base64":     b64(base64.StdEncoding, "Authorization: Bearer "+realKey),
		"authorization-base64url":  b64(base64.RawURLEncoding, "authorization: Bearer "+realKey+"\r\n"),
		// new: character references a renderer would decode.
		"html-hex-entities":     `{"choices":[{"message":{"content":"real&#x2d;model&#x2D;key"}}]}`,
		"html-decimal-entities": `{"t":"&#114;&#101;&#97;&#108;&#45;&#109;&#111;&#100;&#101;&#108;&#45;&#107;&#101;&#121;"}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, jsonReply(body), nil)
			wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
		})
	}
	t.Run("space-and-slash-url-encoded", func(t *testing.T) {
		f := newFixture(t, jsonReply(`{"t":"x a%20b%2Fc y"}`), func(c *broker.Config) {
			c.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "a b/c", nil }
		})
		wantStatus(t, f.post(wire.RouteModel, `{"messages":[]}`), 502, "broker call failed")
	})
}

// Regression (review finding): an MCP server that echoes the request's
// Authorization line base64-encoded puts the key at another byte alignment
// than its own base64, which the six forms missed; the guest then decoded
// the clear key. Refused with 502, whatever the alignment.
func TestMCPShiftedBase64ReflectionRefused(t *testing.T) {
	for name, line := range map[string]string{
		"bearer":        "Bearer " + realMCPKey,
		"authorization": "Authorization: Bearer " + realMCPKey,
		"request-dump":  "GET /rpc HTTP/1.1\r\nauthorization: Bearer " + realMCPKey + "\r\n", // key at byte 41: alignment 2
	} {
		t.Run(name, func(t *testing.T) {
			echo := base64.StdEncoding.EncodeToString([]byte(line))
			mcp := newMCPStub(t, nil, textResult("request: "+echo))
			f := newFixture(t, nil, withMCP(mcp.fakeUpstream, rtsandbox.Secret(realMCPKey)))
			wantStatus(t, f.post(wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"search","arguments":{}}}`), 502, "broker call failed")
			if got := methods(mcp.calls(t)); len(got) != 3 || got[2] != wire.MCPMethodCall {
				t.Errorf("MCP upstream methods = %q; want one tools/call after the handshake", got)
			}
		})
	}
}

// Beyond the reference's tests: an MCP server without a key sends no Authorization, and any
// text passes.
func TestMCPWithoutKey(t *testing.T) {
	mcp := newMCPStub(t, nil, textResult("arbitrary text, c2FuZGJveA=="))
	f := newFixture(t, nil, withMCP(mcp.fakeUpstream, ""))
	wantStatus(t, f.post(wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"search","arguments":{}}}`), 200, "")
	reqs := mcp.requests()
	if len(reqs) == 0 {
		t.Fatal("MCP upstream not called")
	}
	for _, r := range reqs {
		if h, ok := r.Header["Authorization"]; ok {
			t.Errorf("MCP upstream authorization = %q; want none", h)
		}
	}
}

// Beyond the reference: arguments are validated against the declared
// schema before any callback or upstream call.
func TestToolArgumentsValidatedBeforeCall(t *testing.T) {
	echo := &echoTool{}
	mcp := newUpstream(t, nil)
	f := newFixture(t, nil, func(c *broker.Config) {
		withTool("weather", `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`, echo)(c)
		withMCP(mcp, rtsandbox.Secret(realMCPKey))(c)
	})
	for _, body := range []string{`{}`, `{"city":1}`, `{"city":"x","extra":true}`} {
		wantStatus(t, f.post(wire.ToolRoute("weather"), body), 400, "invalid tool arguments")
	}
	wantStatus(t, f.post(wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"search","arguments":{"query":5}}}`), 400, "invalid tool arguments")
	if echo.calls.Load() != 0 || len(mcp.requests()) != 0 {
		t.Errorf("callback %d / upstream %d calls; want 0 and 0", echo.calls.Load(), len(mcp.requests()))
	}
	wantStatus(t, f.post(wire.ToolRoute("weather"), `{"city":"Berlin"}`), 200, `{"text":"ok"}`)
	if got := f.turn.Remaining(); got != rtsandbox.DefaultMaxCalls-5 {
		t.Errorf("remaining = %d; want %d (refusals use budget)", got, rtsandbox.DefaultMaxCalls-5)
	}
	if strings.Contains(f.logs.String(), "Berlin") {
		t.Errorf("audit log holds argument values: %s", f.logs.String())
	}
}

// The reference's test "Turn end cancels host callbacks": a call in flight when the
// turn ends sees its context end.
func TestTurnEndCancelsHostCallbacks(t *testing.T) {
	done := make(chan error, 1)
	started := make(chan struct{})
	wait := &echoTool{reply: func(ctx context.Context) (string, error) {
		close(started)
		<-ctx.Done()
		done <- ctx.Err()
		return "", ctx.Err()
	}}
	f := newFixture(t, nil, withTool("wait", `{"type":"object"}`, wait))
	result := make(chan int, 1)
	go func() { result <- f.post(wire.ToolRoute("wait"), `{}`).Code }()
	<-started
	f.cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("tool context ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tool context not cancelled by the turn end")
	}
	if code := <-result; code != 502 {
		t.Errorf("cancelled call = %d; want 502", code)
	}
}

// Arguments are validated on their decoded value but forwarded as sent;
// a repeated key could show the schema one value and the tool another.
// Refused (review finding).
func TestDuplicateArgumentKeysRefused(t *testing.T) {
	mcp := newUpstream(t, nil)
	echo := &echoTool{}
	f := newFixture(t, nil, func(c *broker.Config) {
		withTool("echo", `{"type":"object"}`, echo)(c)
		withMCP(mcp, rtsandbox.Secret(realMCPKey))(c)
	})
	for _, body := range []string{
		`{"q":5,"q":"ok"}`,
		`{"a":{"b":1,"b":2}}`,
		`{"q":1,"\u0071":2}`,
		`{"list":[{"x":1,"x":2}]}`,
	} {
		wantStatus(t, f.post(wire.ToolRoute("echo"), body), 400, "invalid tool arguments")
		wantStatus(t, f.post(wire.MCPRoute("public"), `{"method":"tools/call","params":{"name":"search","arguments":`+body+`}}`), 400, "invalid tool arguments")
	}
	for _, body := range []string{`{"a":{"x":1},"b":{"x":1}}`, `{"list":[{"x":1},{"x":2}]}`, `{"s":"q","q":"s"}`} {
		wantStatus(t, f.post(wire.ToolRoute("echo"), body), 200, `{"text":"ok"}`)
	}
	if echo.calls.Load() != 3 || len(mcp.requests()) != 0 {
		t.Errorf("callback %d / upstream %d calls; want 3 and 0", echo.calls.Load(), len(mcp.requests()))
	}
}

// TestHostToolPanicContained: a host tool that panics fails only its own
// call with the fixed 502 text; the log names the tool and the panic's
// type but not its value (which may quote guest input), and the turn's
// next call is served.
func TestHostToolPanicContained(t *testing.T) {
	var calls atomic.Int32
	boom := rtsandbox.HostToolFunc(func(_ context.Context, in json.RawMessage, _ rtsandbox.Binding) (string, error) {
		if calls.Add(1) == 1 {
			panic(errors.New("guest said " + string(in)))
		}
		return "fine", nil
	})
	f := newFixture(t, nil, withTool("boom", `{"type":"object"}`, boom))
	wantStatus(t, f.post(wire.ToolRoute("boom"), `{"q":"secret-guest-words"}`), 502, "broker call failed")
	wantStatus(t, f.post(wire.ToolRoute("boom"), `{"q":"again"}`), 200, `{"text":"fine"}`)
	logs := f.logs.String()
	if !strings.Contains(logs, `"msg":"host tool panicked"`) || !strings.Contains(logs, `"tool":"boom"`) {
		t.Errorf("log lacks the panic record:\n%s", logs)
	}
	if strings.Contains(logs, "secret-guest-words") {
		t.Error("log quotes the panic's value")
	}
}

// TestModelCallRetriedAfter429: a rate-limited model answer is tried again
// after the upstream's Retry-After, within the call, and costs the worker
// one broker call; an MCP server's 500 is not repeated (it may have acted).
func TestModelCallRetriedAfter429(t *testing.T) {
	var n atomic.Int32
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}, nil)
	before := f.turn.Remaining()
	w := f.post(wire.RouteModel, `{"messages":[{"role":"user","content":"hello"}]}`)
	if w.Code != 200 || n.Load() != 2 {
		t.Errorf("model call = %d after %d upstream attempts; want 200 after 2", w.Code, n.Load())
	}
	if spent := before - f.turn.Remaining(); spent != 1 {
		t.Errorf("broker calls spent = %d; want 1", spent)
	}
}

// The turn keeps the model key's forms between its calls (Turn.keyForms):
// when the key changes within a turn (a rotation), an answer reflecting
// the new key is refused and one reflecting only the old key passes, on
// /model (PostJSON) and on the Messages route (the turn's whole-answer
// path).
func TestKeyRotationWithinTurnChecksTheNewKey(t *testing.T) {
	const old = "old-model-key-0123456789-abcdef"
	tests := []struct {
		name, route, body string
		edit              func(*broker.Config)
	}{
		{"chat-completions", wire.RouteModel, `{"messages":[]}`, nil},
		{"messages", wire.RouteAnthropicMessages, messagesBody, anthropicAPI(false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			var answer atomic.Value
			f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, answer.Load().(string))
			}, func(c *broker.Config) {
				if tt.edit != nil {
					tt.edit(c)
				}
				c.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
					if calls.Add(1) == 1 {
						return old, nil
					}
					return rtsandbox.Secret(realKey), nil
				}
			})
			answer.Store(messageAnswer)
			if w := f.post(tt.route, tt.body); w.Code != 200 {
				t.Fatalf("first call: status %d; want 200", w.Code)
			}
			answer.Store(`{"token":"` + realKey + `"}`)
			if w := f.post(tt.route, tt.body); w.Code != 502 {
				t.Errorf("an answer reflecting the new key: status %d; want 502", w.Code)
			}
			answer.Store(`{"token":"` + old + `"}`)
			if w := f.post(tt.route, tt.body); w.Code != 200 {
				t.Errorf("an answer holding the old key only: status %d; want 200", w.Code)
			}
		})
	}
}
