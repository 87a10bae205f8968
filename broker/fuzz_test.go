package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// roundTripFunc answers upstream calls in memory, so the fuzzer runs the
// whole pipeline without sockets.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fixedTexts are every body a refusal may carry.
var fixedTexts = map[string]bool{
	"invalid URL": true, "not found": true, "forbidden header": true, "forbidden credential": true,
	"forbidden host": true, "turn ended": true, "call budget exhausted or busy": true,
	"invalid input": true, "MCP method or tool refused": true,
	"text/function model payload required": true, "invalid tool arguments": true,
	"broker call failed": true, "bad request": true,
}

// FuzzPipeline drives arbitrary method, target, one header and body
// through a turn. Properties: no panic; every non-200 answer is one of the
// fixed texts; a 200 answer is the upstream's or the tool's JSON; the
// upstream only ever sees rebuilt bodies, the real key and the fixed
// model; the key never reaches the guest.
func FuzzPipeline(f *testing.F) {
	for _, target := range []string{wire.RouteModel, wire.ToolRoute("echo"), wire.MCPRoute("public"), "/tools/%62ash", "/model?", "/mcp/public/x"} {
		f.Add("POST", target, "content-type", "application/json", `{"messages":[]}`)
	}
	for _, h := range []string{"connection", "transfer-encoding", "authorization", "host", "x-api-key", "cookie"} {
		f.Add("POST", wire.RouteModel, h, "guest-supplied", `{"messages":[]}`)
	}
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"model":"x","callback_url":"https://guest.example"}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`,
		`{"method":"tools/call","params":{"name":"search","arguments":{"q":"a"}},"url":"https://guest.example"}`,
		`[{"method":"tools/call"}]`, `{"speaker":"owner"}`, `null`, `"x"`, `{`,
	} {
		f.Add("POST", wire.RouteModel, "accept", "*/*", body)
		f.Add("POST", wire.MCPRoute("public"), "accept", "*/*", body)
		f.Add("POST", wire.ToolRoute("echo"), "accept", "*/*", body)
	}
	f.Fuzz(func(t *testing.T, method, target, hname, hvalue, body string) {
		var upstreamCalls atomic.Int32
		client := upstream.New(roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodDelete {
				// The MCP session's close, at the turn's end: it may
				// come after this input's run.
				return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}, nil
			}
			got, _ := io.ReadAll(r.Body)
			if r.Header.Get("Authorization") != "Bearer "+realKey {
				t.Errorf("upstream authorization = %q", r.Header.Get("Authorization"))
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(got, &m); err != nil {
				t.Errorf("upstream body is not an object: %s", got)
			}
			if bytes.Contains(got, []byte("guest.example")) && !bytes.Contains(got, []byte(`"content"`)) {
				t.Errorf("guest field forwarded: %s", got)
			}
			if r.URL.Host == "mcp.example" {
				return fuzzMCP(m, &upstreamCalls), nil
			}
			upstreamCalls.Add(1)
			return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`{"choices":[]}`)), Header: http.Header{}}, nil
		}))
		key := func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
			return rtsandbox.Secret(realKey), nil
		}
		b, err := broker.New(broker.Config{
			ModelURL: ep("https://models.example/v1"), Model: testModel, Client: client,
			APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
				return rtsandbox.Secret(realKey), nil
			},
			Tools: []broker.Tool{{Spec: rtsandbox.ToolSpec{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)},
				Impl: rtsandbox.HostToolFunc(func(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) { return "ok", nil })}},
			MCP: []broker.MCPServer{{Name: "public", URL: ep("https://mcp.example/rpc"), APIKey: key,
				Tools: []rtsandbox.ToolSpec{{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		turn := b.Turn(ctx, rtsandbox.Binding{Channel: testChannel, Speaker: guest})
		r, err := http.NewRequest(method, "http://broker/", strings.NewReader(body))
		if err != nil {
			return
		}
		r.RequestURI, r.Host = target, "broker"
		if u, err := r.URL.Parse(target); err == nil {
			r.URL = u
		}
		if name := http.CanonicalHeaderKey(hname); name != "" && !strings.ContainsAny(name, " \r\n:") {
			r.Header.Set(name, hvalue)
		}
		w := httptest.NewRecorder()
		turn.ServeHTTP(w, r)
		out := w.Body.String()
		if strings.Contains(out, realKey) {
			t.Fatalf("response holds the key: %q", out)
		}
		if w.Code != 200 && !fixedTexts[out] {
			t.Fatalf("status %d with body %q; want a fixed text", w.Code, out)
		}
		if w.Code == 200 && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("200 with non-JSON body %q", out)
		}
		if upstreamCalls.Load() > 1 {
			t.Fatalf("upstream called %d times for one request", upstreamCalls.Load())
		}
	})
}

// fuzzMCP answers the broker's MCP client as a minimal server with one
// session would; only tools/call counts as an upstream call.
func fuzzMCP(m map[string]json.RawMessage, calls *atomic.Int32) *http.Response {
	var method string
	_ = json.Unmarshal(m["method"], &method)
	h := http.Header{"Content-Type": {"application/json"}, "Mcp-Session-Id": {"fuzz-session"}}
	var body string
	switch method {
	case "initialize":
		body = `{"jsonrpc":"2.0","id":` + string(m["id"]) + `,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"fuzz","version":"1"}}}`
	case wire.MCPMethodCall:
		calls.Add(1)
		body = `{"jsonrpc":"2.0","id":` + string(m["id"]) + `,"result":{"content":[]}}`
	default:
		return &http.Response{StatusCode: http.StatusAccepted, Body: http.NoBody, Header: h}
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body)), Header: h}
}
