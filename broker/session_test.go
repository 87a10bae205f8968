package broker_test

// The lines of the reference's session broker tests as named tests,
// over the real Unix socket with a loopback TLS stand-in upstream. Each
// test names its line; adaptations to our design are noted where they
// occur.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

const userHi = `[{"role":"user","content":"hi"}]`

// The reference's test "[SEC] Model call with body {model:"guest-choice",
// max_tokens:1_000_000}": 200, the upstream URL is <base>/v1/messages, the
// upstream sees the host secret and no cookie, and the body has the host
// model and max_tokens 128000. Adaptations: the body also carries
// messages (our normaliser requires them), and the Anthropic routes send
// the credential as x-api-key (anthropic.go), not as a bearer.
func TestSessionModelCallRebuiltWithHostKey(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("")
	r := f.post(wire.RouteAnthropicMessages, `{"model":"guest-choice","max_tokens":1000000,"messages":`+userHi+`}`)
	wantResp(t, r, 200, messageAnswer)
	calls := f.upstreamCalls("/v1/")
	if len(calls) != 1 || calls[0].Path != "/v1/messages" {
		t.Fatalf("upstream calls = %+v; want one to /v1/messages", calls)
	}
	h := calls[0].Header
	if h.Get("X-Api-Key") != hostSecret || h.Get("Cookie") != "" || h.Get("Authorization") != "" {
		t.Errorf("upstream headers = %v; want the host key only", h)
	}
	body := f.lastModelBody()
	if body["model"] != hostModel || body["max_tokens"] != json.Number("128000") {
		t.Errorf("upstream body model=%v max_tokens=%v; want %s 128000", body["model"], body["max_tokens"], hostModel)
	}
}

// The reference's test "[SEC] Paths /anthropic/v1/files, /anthropic/v1/organizations,
// /anthropic/v1/messages?endpoint=other, /tools/shell (unlisted) and
// /mcp/owner (unknown) → not 200".
func TestSessionAccountRoutesUnreachable(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("")
	for _, target := range []string{"/anthropic/v1/files", "/anthropic/v1/organizations",
		"/anthropic/v1/messages?endpoint=other", "/tools/shell", "/mcp/owner"} {
		wantResp(t, f.post(target, `{"messages":`+userHi+`}`), 404, "Not found")
	}
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("upstream saw %d calls; want none", n)
	}
}

// The reference's test "[SEC] After release() → a model call gets 410".
func TestSessionModelAfterReleaseGone(t *testing.T) {
	f := newSession(t, sessOptions{})
	release, _ := f.bind("")
	release()
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 410, "Turn ended")
}

// The reference's test "[SEC] Tool call with body {channel:"discord:owner",
// author:{id:"owner"}, input:{speaker:"owner"}} → 200, and the host
// callback context is channel discord:channel, speaker guest/Guest. After
// the turn signal aborts, the tool call → 410".
func TestSessionToolIdentityIsHostBound(t *testing.T) {
	f := newSession(t, sessOptions{})
	_, cancel := f.bind("")
	body := `{"channel":"discord:owner","author":{"id":"owner"},"input":{"speaker":"owner"}}`
	r := f.post("/tools/lookup", body)
	wantResp(t, r, 200, `{"ok":true,"text":"looked up"}`)
	f.mu.Lock()
	calls := f.toolCalls
	f.mu.Unlock()
	if len(calls) != 1 || calls[0].Input != `{"speaker":"owner"}` ||
		calls[0].Binding.Channel != sessChannel || calls[0].Binding.Speaker != sessGuest {
		t.Errorf("tool calls = %+v; want one with the bound channel and speaker", calls)
	}
	cancel()
	wantResp(t, f.post("/tools/lookup", body), 410, "Turn ended")
}

// The reference's test "[SEC] Before any bind, initialize, notifications/initialized and
// tools/list on /mcp/research → 200 each (upstream auth Bearer mcp-secret,
// redirect mode error)", "[SEC] Before bind, tools/call search → 403",
// "[SEC] After bind, tools/call search → 200", "[SEC] While bound:
// resources/read, prompts/get, sampling/createMessage and tools/call
// owner_memory → 403" and "[SEC] After release, initialize → 410.
// Upstream saw exactly [initialize, notifications/initialized,
// tools/list, tools/call]". Redirect mode is TestSessionMCPRedirectRefused.
func TestSessionMCPAllowList(t *testing.T) {
	f := newSession(t, sessOptions{})
	for _, m := range []string{"initialize", "notifications/initialized", "tools/list"} {
		r := f.post("/mcp/research", rpcBody(m, ""), "Mcp-Session-Id", "sess-1")
		wantResp(t, r, 200, "")
		if r.Header.Get("Mcp-Session-Id") != "sess-1" {
			t.Errorf("%s: mcp-session-id not passed back: %v", m, r.Header)
		}
	}
	for _, c := range f.upstreamCalls("/mcp") {
		if c.Header.Get("Authorization") != "Bearer "+mcpSecret || c.Header.Get("Cookie") != "" {
			t.Errorf("MCP upstream headers = %v", c.Header)
		}
	}
	wantResp(t, f.post("/mcp/research", rpcBody("tools/call", `{"name":"search","arguments":{}}`)), 403, "MCP method refused")

	release, _ := f.bind("")
	wantResp(t, f.post("/mcp/research", rpcBody("tools/call", `{"name":"search","arguments":{"q":"x"}}`)), 200, "")
	for _, body := range []string{rpcBody("resources/read", `{}`), rpcBody("prompts/get", `{}`), rpcBody("sampling/createMessage", `{}`),
		rpcBody("tools/call", `{"name":"owner_memory","arguments":{}}`)} {
		wantResp(t, f.post("/mcp/research", body), 403, "MCP method refused")
	}
	release()
	wantResp(t, f.post("/mcp/research", rpcBody("initialize", "")), 410, "Turn ended")
	want := []string{"initialize", "notifications/initialized", "tools/list", "tools/call"}
	if diff := cmp.Diff(want, f.mcpMethods()); diff != "" {
		t.Errorf("MCP methods upstream (-want +got):\n%s", diff)
	}
}

// The MCP message is rebuilt: unknown members are dropped and the id kept
// only when sent; a batch is 400 "Invalid input" (not an object).
func TestSessionMCPMessageRebuilt(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post("/mcp/research", `{"jsonrpc":"1.0","method":"notifications/initialized","extra":{"url":"x"}}`), 200, "")
	wantResp(t, f.post("/mcp/research", `[`+rpcBody("ping", "")+`]`), 400, "Invalid input")
	wantResp(t, f.post("/mcp/research", `{"id":{"a":1},"method":"ping"}`), 403, "MCP method refused")
	calls := f.upstreamCalls("/mcp")
	if len(calls) != 1 || string(calls[0].Body) != `{"jsonrpc":"2.0","method":"notifications/initialized"}` {
		t.Errorf("MCP upstream = %+v", calls)
	}
}

// The reference's test "redirect mode is error": a redirect from the MCP server fails the
// call (502) and its target is never contacted.
func TestSessionMCPRedirectRefused(t *testing.T) {
	var hit bool
	var mu sync.Mutex
	f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			mu.Lock()
			hit = true
			mu.Unlock()
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}})
	wantResp(t, f.post("/mcp/research", rpcBody("initialize", "")), 502, "Broker call failed")
	mu.Lock()
	defer mu.Unlock()
	if hit {
		t.Error("the redirect target was contacted")
	}
}

// The reference's test "piModelInput keeps an ordinary custom tool whose schema has a
// property named url, plus a tool_use/tool_result transcript. The tools
// are present." (Through the route.)
func TestSessionModelKeepsCustomToolNamedURL(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("")
	body := `{"messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"fetch","input":{"url":"https://x"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}],` +
		`"tools":[{"name":"fetch","input_schema":{"type":"object","properties":{"url":{"type":"string"}}}}]}`
	wantResp(t, f.post(wire.RouteAnthropicMessages, body), 200, "")
	tools, _ := f.lastModelBody()["tools"].([]any)
	if len(tools) != 1 {
		t.Errorf("upstream tools = %v; want the custom tool", tools)
	}
}

// The reference's test "[SEC] piModelInput throws for each of: a tool with type
// web_search_20250305; a schema with $ref https://internal.test/schema in
// a property; an image with a url source of http://127.0.0.1; an
// assistant server_tool_use block; tool_choice {type:"web_search"}".
// Through the route: 400 in the Anthropic shape, upstream never called.
func TestSessionModelRefusesNativeToolsAndRemoteMedia(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("")
	for name, body := range map[string]string{
		"web-search-tool": `{"messages":` + userHi + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`,
		"remote-ref": `{"messages":` + userHi + `,"tools":[{"name":"t","input_schema":{"type":"object",` +
			`"properties":{"a":{"$ref":"https://internal.test/schema"}}}}]}`,
		"url-image": `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"http://127.0.0.1"}}]}]}`,
		"server-tool-use": `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` +
			`{"type":"server_tool_use","id":"s1","name":"web_search","input":{}}]}]}`,
		"tool-choice": `{"messages":` + userHi + `,"tool_choice":{"type":"web_search"}}`,
	} {
		r := f.post(wire.RouteAnthropicMessages, body)
		if r.Status != 400 || !strings.HasPrefix(r.Body, `{"type":"error","error":{"type":"invalid_request_error","message":`) {
			t.Errorf("%s: answer = %d %s; want the Anthropic 400", name, r.Status, r.Body)
		}
	}
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("upstream saw %d calls; want none", n)
	}
}

// The reference's test "Mid-conversation system messages at host level low are forwarded
// rebuilt: text block with cache_control kept; clear_at next_user_message
// kept; output_config.effort max capped to low; the smuggled field
// dropped; a plain-string system message passes unchanged; the user
// message passes unchanged".
func TestSessionSystemMessagesRebuiltAtLow(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("low")
	body := `{"messages":[{"role":"user","content":"hi"},` +
		`{"role":"system","content":[{"type":"text","text":"env","cache_control":{"type":"ephemeral"}}],` +
		`"clear_at":"next_user_message","output_config":{"effort":"max"},"smuggled":1},` +
		`{"role":"system","content":"plain"}]}`
	wantResp(t, f.post(wire.RouteAnthropicMessages, body), 200, "")
	got, _ := json.Marshal(f.lastModelBody()["messages"])
	want := `[{"content":"hi","role":"user"},{"clear_at":"next_user_message","content":[{"cache_control":{"type":"ephemeral"},"text":"env","type":"text"}],` +
		`"output_config":{"effort":"low"},"role":"system"},{"content":"plain","role":"system"}]`
	if string(got) != want {
		t.Errorf("upstream messages =\n%s\nwant\n%s", got, want)
	}
}

// The reference's test "[SEC] A system message with a tool_addition block → 400 … message
// starting messages.1.content.0: Input tag 'tool_addition'", "[SEC] A
// developer role → 400 whose message contains Unexpected role and input
// message role" and "[SEC] tool_choice web_search → 400. Upstream is never
// called, and exactly 3 "sandbox upstream call failed" lines are logged".
func TestSessionModelRefusalsLoggedOnce(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("")
	message := func(r resp) string {
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if r.Status != 400 || json.Unmarshal([]byte(r.Body), &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" {
			t.Errorf("answer = %d %s; want the Anthropic 400", r.Status, r.Body)
		}
		return e.Error.Message
	}
	m := message(f.post(wire.RouteAnthropicMessages, `{"messages":[{"role":"user","content":"hi"},`+
		`{"role":"system","content":[{"type":"tool_addition","tool":{}}]}]}`))
	if !strings.HasPrefix(m, "messages.1.content.0: Input tag 'tool_addition'") {
		t.Errorf("tool_addition message = %q", m)
	}
	m = message(f.post(wire.RouteAnthropicMessages, `{"messages":[{"role":"developer","content":"hi"}]}`))
	if !strings.Contains(m, "Unexpected role") || !strings.Contains(m, "input message role") {
		t.Errorf("developer message = %q", m)
	}
	message(f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`,"tool_choice":{"type":"web_search"}}`))
	if n := len(f.up.requests()); n != 0 {
		t.Errorf("upstream saw %d calls; want none", n)
	}
	lines := f.failureLines()
	if len(lines) != 3 {
		t.Fatalf("%d failure lines; want 3:\n%s", len(lines), f.logs.String())
	}
	for _, l := range lines {
		if l["status"] != float64(400) || l["upstream"] != "model" || l["channel"] != string(sessChannel) {
			t.Errorf("failure line = %v", l)
		}
	}
}

// The reference's test "Worker transport: POST /worker/ready {} → 200 and isReady() true;
// a /worker/next pending before the bind receives exactly the turn request
// queued by execute, including memoryVisibility shared", "[SEC] A result
// with the wrong turnId other → 409. The right turnId with
// files:[{art.png,"AQID"}] → 200, and execute resolves to the same
// object".
func TestSessionWorkerTransport(t *testing.T) {
	f := newSession(t, sessOptions{})
	if f.sess.Ready() {
		t.Fatal("ready before the handshake")
	}
	wantResp(t, f.post(wire.RouteWorkerReady, `{}`), 200, "Ready")
	if !f.sess.Ready() {
		t.Fatal("not ready after the handshake")
	}
	next := make(chan resp, 1)
	go func() { next <- f.do(http.MethodGet, wire.RouteWorkerNext, "") }()
	waitWaiting(t, f)
	f.bind("")
	turn := sessTurn(sessTurnID)
	turn.Memory, turn.MemoryVisibility = "shared notes", wire.MemoryShared
	exec := f.execute(context.Background(), turn)
	r := <-next
	wantResp(t, r, 200, `{"turnId":"m1","author":{"id":"guest","name":"Guest"},"text":"hello",`+
		`"memory":"shared notes","memoryVisibility":"shared","images":[],"thinking":"xhigh"}`)
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"other","result":{"ok":true,"text":"x","files":[]}}`), 409, "No matching turn")
	wantResp(t, f.post(wire.RouteWorkerResult,
		`{"turnId":"m1","result":{"ok":true,"text":"done","files":[{"name":"art.png","data":"AQID"}]}}`), 200, "Accepted")
	got := waitExec(t, exec)
	want := wire.SessionResult{OK: true, Text: "done", Files: []wire.ReplyFile{{Name: "art.png", Data: "AQID"}}}
	if got.Err != nil || !cmp.Equal(got.Result, want) {
		t.Errorf("Execute = %+v, %v; want %+v", got.Result, got.Err, want)
	}
}

// waitWaiting waits until a long poll waits.
func waitWaiting(t *testing.T, f *sessFixture) {
	t.Helper()
	waitFor(t, "a long poll waiting", func() bool { return broker.SessionWaiting(f.sess) })
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("never: %s", what)
}

// The reference's test "execute of turn m2, then abort → rejects with a message containing
// cancelled".
func TestSessionExecuteAbortCancelled(t *testing.T) {
	f := newSession(t, sessOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	exec := f.execute(ctx, sessTurn("m2"))
	waitFor(t, "the turn pending", func() bool { return broker.SessionPending(f.sess) })
	cancel()
	got := waitExec(t, exec)
	if got.Err == nil || !strings.Contains(got.Err.Error(), "cancelled") {
		t.Errorf("Execute error = %v; want one containing cancelled", got.Err)
	}
	// The turn is gone: a later poll waits rather than receiving it.
	if r := f.post(wire.RouteWorkerResult, `{"turnId":"m2","result":{"ok":false,"error":"x"}}`); r.Status != 409 {
		t.Errorf("late result = %d; want 409", r.Status)
	}
}

// The reference's test "[SEC] Reflection split across chunks: an upstream that streams
// host- then secret → reading the response text rejects". Before the head
// is out the call fails with the fixed 502; after it (an event passed on
// first), the worker's read breaks. Either way it never holds the secret.
func TestSessionReflectionSplitAcrossChunks(t *testing.T) {
	for name, tc := range map[string]struct {
		prefix string
		status int
	}{"before-head": {"", 502}, "after-head": {"data: {\"a\":\"ok\"}\n\n", 0}} {
		t.Run(name, func(t *testing.T) {
			f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, piece := range []string{tc.prefix, "data: host-", "secret\n\n"} {
					io.WriteString(w, piece)
					w.(http.Flusher).Flush()
					time.Sleep(20 * time.Millisecond)
				}
			}})
			f.bind("")
			r := f.post(wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`)
			switch {
			case strings.Contains(r.Body, "host-secret"):
				t.Error("the worker received the secret")
			case tc.status != 0:
				wantResp(t, r, tc.status, "Broker call failed")
			case r.Err == nil:
				t.Errorf("reading the answer succeeded: %d %q", r.Status, r.Body)
			}
		})
	}
}

// The reference's test "Bridge-shaped SSE on ?beta=true with stream:true, max_tokens
// 64000, thinking enabled 32000 under xhigh", with its four checks.
func TestSessionBridgeShapedSSE(t *testing.T) {
	sse := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			standIn(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sse)
	}})
	f.bind("xhigh")
	r := f.post(wire.RouteAnthropicMessages+"?beta=true",
		`{"stream":true,"max_tokens":64000,"thinking":{"type":"enabled","budget_tokens":32000},"messages":`+userHi+`}`)
	wantResp(t, r, 200, sse)
	if ct := r.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content-type = %q", ct)
	}
	calls := f.upstreamCalls("/v1/messages")
	if calls[0].Path != "/v1/messages?beta=true" {
		t.Errorf("upstream path = %q", calls[0].Path)
	}
	body := f.lastModelBody()
	if body["max_tokens"] != json.Number("64000") || body["stream"] != true ||
		!cmp.Equal(body["thinking"], map[string]any{"type": "enabled", "budget_tokens": json.Number("32000")}) {
		t.Errorf("upstream body = %v", body)
	}

	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"stream":true,"thinking":{"type":"adaptive"},`+
		`"output_config":{"effort":"max"},"messages":`+userHi+`}`), 200, "")
	body = f.lastModelBody()
	if !cmp.Equal(body["thinking"], map[string]any{"type": "adaptive"}) || !cmp.Equal(body["output_config"], map[string]any{"effort": "max"}) {
		t.Errorf("adaptive max under xhigh = %v %v", body["thinking"], body["output_config"])
	}

	wantResp(t, f.post(wire.RouteAnthropicCountTokens, `{"max_tokens":10,"messages":`+userHi+`}`), 200, `{"input_tokens":123}`)
	count := f.upstreamCalls("/v1/messages/count_tokens")
	if len(count) != 1 || strings.Contains(string(count[0].Body), "max_tokens") {
		t.Errorf("count_tokens upstream = %+v", count)
	}

	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"stream":true,"max_tokens":8192,"thinking":{"type":"enabled","budget_tokens":32000},"messages":`+userHi+`}`), 200, "")
	if mt, _ := f.lastModelBody()["max_tokens"].(json.Number).Int64(); mt <= 32000 {
		t.Errorf("max_tokens = %d; want > 32000", mt)
	}
}

// The reference's test "[SEC] /worker/result with no pending turn → 409".
func TestSessionResultWithoutPendingTurn(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"m1","result":{"ok":true,"text":"x","files":[]}}`), 409, "No matching turn")
}

// The reference's test "A streaming result body (never finishing) is being read; a second
// result → 429. Aborting the turn makes execute reject with cancelled,
// answers the first packet with 400 and cancels its body stream".
func TestSessionResultOneReaderAndAbort(t *testing.T) {
	f := newSession(t, sessOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	exec := f.execute(ctx, sessTurn(sessTurnID))
	wantResp(t, f.do(http.MethodGet, wire.RouteWorkerNext, ""), 200, "")

	// The first packet's body never ends. A probe that reaches the broker
	// before it holds the reader for an instant: a first packet that
	// arrives then is refused 429 itself, and is sent again.
	var first <-chan resp
	var pw *io.PipeWriter
	send := func() {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		first = f.postAsync(wire.RouteWorkerResult, pr)
		go io.WriteString(pw, `{"turnId":"m1","result":`) // a refused packet's body is never read
	}
	send()
	var second resp
	for range 100 { // until the first one holds the reader
		select {
		case r := <-first:
			if r.Status != 429 {
				t.Fatalf("the first packet answered %d %q before the turn ended", r.Status, r.Body)
			}
			pw.CloseWithError(io.ErrClosedPipe)
			send()
		default:
		}
		if second = f.post(wire.RouteWorkerResult, `{}`); second.Status == 429 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantResp(t, second, 429, "Already receiving")
	cancel()
	if got := waitExec(t, exec); got.Err == nil || !strings.Contains(got.Err.Error(), "cancelled") {
		t.Errorf("Execute error = %v; want cancelled", got.Err)
	}
	select {
	case r := <-first:
		wantResp(t, r, 400, "Invalid result")
	case <-time.After(5 * time.Second):
		t.Fatal("the first packet was not answered")
	}
	// Its body stream is cancelled: the client's writes now fail.
	pw.CloseWithError(io.ErrClosedPipe)
}

// The reference's test "[SEC] Media bounds": [{AQID, image/png}] is valid; 9 images, data
// bad%, mime text/plain are refused; reply files ../owner, bad%, 11 files
// and one of 10 MiB + 1 byte are refused. (The shared root validators the
// broker applies to turns and results.)
func TestSessionMediaBounds(t *testing.T) {
	png := wire.Image{Data: "AQID", MIMEType: "image/png"}
	if err := wire.ValidateImages([]wire.Image{png}); err != nil {
		t.Errorf("valid image refused: %v", err)
	}
	nine := make([]wire.Image, 9)
	for i := range nine {
		nine[i] = png
	}
	for name, images := range map[string][]wire.Image{
		"nine": nine, "bad-data": {{Data: "bad%", MIMEType: "image/png"}}, "text-plain": {{Data: "AQID", MIMEType: "text/plain"}},
	} {
		if wire.ValidateImages(images) == nil {
			t.Errorf("%s: images accepted", name)
		}
	}
	eleven := make([]wire.ReplyFile, 11)
	for i := range eleven {
		eleven[i] = wire.ReplyFile{Name: "f", Data: "AQID"}
	}
	// One file of 10 MiB + 1 byte: the root's TestValidateReplyFiles ("10
	// MiB + 1"), which this package would only repeat at a cost.
	for name, files := range map[string][]wire.ReplyFile{
		"traversal": {{Name: "../owner", Data: "AQID"}}, "bad-data": {{Name: "a", Data: "bad%"}},
		"eleven": eleven,
	} {
		if wire.ValidateReplyFiles(files) == nil {
			t.Errorf("%s: reply files accepted", name)
		}
	}
}

// The reference's test "[SEC] Effort capping", its seven cases, through the route with
// the level bound per turn.
func TestSessionEffortCapping(t *testing.T) {
	tests := []struct {
		name, level, body string
		output, thinking  any // want output_config and thinking (nil: absent)
	}{
		{"low-adaptive-max", "low", `"thinking":{"type":"adaptive"},"output_config":{"effort":"max"}`,
			map[string]any{"effort": "low"}, map[string]any{"type": "adaptive"}},
		{"medium-adaptive-xhigh", "medium", `"thinking":{"type":"adaptive"},"output_config":{"effort":"xhigh"}`,
			map[string]any{"effort": "medium"}, map[string]any{"type": "adaptive"}},
		{"xhigh-adaptive-xhigh", "xhigh", `"thinking":{"type":"adaptive"},"output_config":{"effort":"xhigh"}`,
			map[string]any{"effort": "xhigh"}, map[string]any{"type": "adaptive"}},
		{"high-asked-low", "high", `"output_config":{"effort":"low"}`, map[string]any{"effort": "low"}, nil},
		{"low-adaptive-none", "low", `"thinking":{"type":"adaptive"}`, map[string]any{"effort": "low"}, map[string]any{"type": "adaptive"}},
		{"high-adaptive-none", "high", `"thinking":{"type":"adaptive"}`, nil, map[string]any{"type": "adaptive"}},
		{"medium-budget-120000", "medium", `"thinking":{"type":"enabled","budget_tokens":120000}`,
			nil, map[string]any{"type": "enabled", "budget_tokens": json.Number("8192")}},
	}
	f := newSession(t, sessOptions{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			release, _ := f.bind(tc.level)
			defer release()
			wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`,`+tc.body+`}`), 200, "")
			body := f.lastModelBody()
			if diff := cmp.Diff(tc.output, body["output_config"]); diff != "" {
				t.Errorf("output_config (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.thinking, body["thinking"]); diff != "" {
				t.Errorf("thinking (-want +got):\n%s", diff)
			}
		})
	}
}

// The reference's test "Listener streaming: idle 250 ms, first chunk first, then 4 chunks
// 150 ms apart. The client receives firstxxxx: gaps below idle are fine
// and the total may exceed idle".
func TestSessionListenerStreamingGapsBelowIdle(t *testing.T) {
	f := newSession(t, sessOptions{
		reply: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "first")
			w.(http.Flusher).Flush()
			for range 4 {
				time.Sleep(150 * time.Millisecond)
				io.WriteString(w, "x")
				w.(http.Flusher).Flush()
			}
		},
		session: func(c *broker.SessionConfig) { c.Silence = 250 * time.Millisecond },
	})
	f.bind("")
	if r := f.post(wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`); r.Body != "firstxxxx" || r.Err != nil {
		t.Errorf("answer = %d %q (err %v); want firstxxxx\n%s", r.Status, r.Body, r.Err, f.logs.String())
	}
}

// The reference's test "Upstream error passthrough": a 400 "prompt is too long" keeps its
// status, body and request-id and drops set-cookie; a 429 keeps
// retry-after and anthropic-ratelimit-unified-status and drops
// x-internal; an MCP ping answered 404 "expired" passes through; "[SEC] a
// 500 whose body is host-secret → reading the body rejects" (here: the
// answer never carries it; it is refused with 502 before its head). And
// docs/session.md, "Routes and statuses": a status outside 200–599 is 502 "Upstream refused".
func TestSessionUpstreamErrorPassthrough(t *testing.T) {
	const tooLong = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`
	var mode string
	var mu sync.Mutex
	f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "400":
			w.Header().Set("Request-Id", "req_1")
			w.Header().Set("Set-Cookie", "a=b")
			w.WriteHeader(400)
			io.WriteString(w, tooLong)
		case "429":
			w.Header().Set("Retry-After", "17")
			w.Header().Set("Anthropic-Ratelimit-Unified-Status", "rejected")
			w.Header().Set("X-Internal", "1")
			w.WriteHeader(429)
			io.WriteString(w, `{}`)
		case "mcp404":
			w.WriteHeader(404)
			io.WriteString(w, "expired")
		case "500":
			w.WriteHeader(500)
			io.WriteString(w, hostSecret)
		case "600":
			w.WriteHeader(600)
		}
	}})
	set := func(m string) { mu.Lock(); mode = m; mu.Unlock() }
	f.bind("")
	set("400")
	r := f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`)
	wantResp(t, r, 400, tooLong)
	if r.Header.Get("Request-Id") != "req_1" || r.Header.Get("Set-Cookie") != "" {
		t.Errorf("400 headers = %v", r.Header)
	}
	set("429")
	r = f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`)
	wantResp(t, r, 429, `{}`)
	if r.Header.Get("Retry-After") != "17" || r.Header.Get("Anthropic-Ratelimit-Unified-Status") != "rejected" || r.Header.Get("X-Internal") != "" {
		t.Errorf("429 headers = %v", r.Header)
	}
	set("mcp404")
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 404, "expired")
	set("500")
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 502, "Broker call failed")
	set("600")
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 502, "Upstream refused")
	lines := f.failureLines()
	if len(lines) < 3 || lines[0]["body"] != tooLong || lines[0]["status"] != float64(400) {
		t.Errorf("failure lines = %v; want the 400 logged with its body first", lines)
	}
}

// The reference's test "[SEC] Startup re-arm": after bind and release, initialize → 410;
// /mcp-tools within 10 s does not re-arm; after more than 11 s (clock
// faked): /mcp-tools 200, then initialize 200, tools/list 200, tools/call
// 403, model 410.
func TestSessionStartupRearm(t *testing.T) {
	f := newSession(t, sessOptions{})
	release, _ := f.bind("")
	release()
	wantResp(t, f.post("/mcp/research", rpcBody("initialize", "")), 410, "Turn ended")
	wantResp(t, f.do(http.MethodGet, wire.RouteMCPTools, ""), 200, `{"servers":[{"name":"research","tools":["search"]}]}`)
	wantResp(t, f.post("/mcp/research", rpcBody("initialize", "")), 410, "Turn ended")
	f.clock.Add(11 * time.Second)
	wantResp(t, f.do(http.MethodGet, wire.RouteMCPTools, ""), 200, "")
	wantResp(t, f.post("/mcp/research", rpcBody("initialize", "")), 200, "")
	wantResp(t, f.post("/mcp/research", rpcBody("tools/list", "")), 200, "")
	wantResp(t, f.post("/mcp/research", rpcBody("tools/call", `{"name":"search","arguments":{}}`)), 403, "MCP method refused")
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 410, "Turn ended")
}

// The startup window lasts 90 s on the session clock.
func TestSessionStartupWindowExpires(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 200, "")
	f.clock.Add(rtsandbox.StartupWindowTTL)
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 410, "Turn ended")
	wantResp(t, f.post(wire.RouteWorkerReady, ``), 200, "Ready") // re-arms: expired, 90 s since arming
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 200, "")
}

// docs/session.md, "Routes and statuses" on the socket: a compaction route without a bound turn is 410,
// a non-POST 404; bound, an invalid report is 400 "Invalid report" (the
// routes' own tests are in session_compaction_test.go; the reference's test "Compactor
// time share" is TestCompactTimeShare).
func TestSessionCompactionSeam(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post("/compaction/compact", `{}`), 410, "Turn ended")
	wantResp(t, f.do(http.MethodGet, "/compaction/report", ""), 404, "Not found")
	f.bind("")
	wantResp(t, f.post("/compaction/report", `{}`), 400, "Invalid report")
	wantResp(t, f.post("/compaction/other", `{}`), 404, "Not found")
}

// The reference's test "An SSE error event inside a 200 stream, split mid-event across
// chunks: the worker gets status 200 and the full body containing
// overloaded_error; exactly one failure log line with status 200; its
// body starts stream error event: {"type":"error","error":{"type":
// "overloaded_error"".
func TestSessionSSEErrorEventLoggedOnce(t *testing.T) {
	event := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, event[:30])
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, event[30:])
	}})
	f.bind("")
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`), 200, event)
	lines := f.failureLines()
	if len(lines) != 1 || lines[0]["status"] != float64(200) ||
		!strings.HasPrefix(lines[0]["body"].(string), `stream error event: {"type":"error","error":{"type":"overloaded_error"`) {
		t.Errorf("failure lines = %v; want one stream error event", lines)
	}
}

// The reference's test "[SEC] Per-call credential scope: turns on discord:alpha and then
// discord:beta → upstream auth alpha-secret, then beta-secret. The scopes
// passed are {channel, speaker:{id,name}} for each".
func TestSessionPerCallCredentialScope(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.modelKey = channelKey
	alpha := rtsandbox.Speaker{ID: "a", Name: "Alpha"}
	beta := rtsandbox.Speaker{ID: "b", Name: "Beta"}
	release, _ := f.bindAs("discord:alpha", alpha, "")
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 200, "")
	release()
	f.bindAs("discord:beta", beta, "")
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 200, "")
	f.wantAlphaThenBeta(alpha, beta)
}

// wantAlphaThenBeta asserts that the model saw alpha's key and then
// beta's, and that the key getter was asked for exactly those scopes.
func (f *sessFixture) wantAlphaThenBeta(alpha, beta rtsandbox.Speaker) {
	f.t.Helper()
	var keys []string
	for _, c := range f.upstreamCalls("/v1/messages") {
		keys = append(keys, c.Header.Get("X-Api-Key"))
	}
	if diff := cmp.Diff([]string{"alpha-secret", "beta-secret"}, keys); diff != "" {
		f.t.Errorf("keys (-want +got):\n%s", diff)
	}
	want := []rtsandbox.Binding{{Channel: "discord:alpha", Speaker: alpha}, {Channel: "discord:beta", Speaker: beta}}
	if diff := cmp.Diff(want, f.scopes); diff != "" {
		f.t.Errorf("scopes (-want +got):\n%s", diff)
	}
}

// channelKey is a per-channel model key: alpha-secret for discord:alpha.
func channelKey(b rtsandbox.Binding) rtsandbox.Secret {
	_, name, _ := strings.Cut(string(b.Channel), ":")
	return rtsandbox.Secret(name + "-secret")
}

// The reference's test "[SEC] A request started under turn A whose body arrives after A is
// released and B is bound: it uses A's token; the next request uses B's;
// scopes are [alpha, beta]".
func TestSessionScopeCapturedAtArrival(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.modelKey = channelKey
	alpha := rtsandbox.Speaker{ID: "a", Name: "Alpha"}
	beta := rtsandbox.Speaker{ID: "b", Name: "Beta"}
	releaseA, _ := f.bindAs("discord:alpha", alpha, "")
	pr, pw := io.Pipe()
	done := f.postAsync(wire.RouteAnthropicMessages, pr)
	io.WriteString(pw, `{"messages":`)
	waitFor(t, "the call in flight under A", func() bool { return broker.SessionInFlight(f.sess) > 0 })
	releaseA()
	f.bindAs("discord:beta", beta, "")
	io.WriteString(pw, userHi+`}`)
	pw.Close()
	r := <-done
	wantResp(t, r, 200, "")
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 200, "")
	f.wantAlphaThenBeta(alpha, beta)
}

// The reference's test "[SEC] oauthToken returning undefined or "" → 502, and upstream is
// never fetched". Adaptation: "undefined" is a getter error.
func TestSessionMissingCredentialFailsClosed(t *testing.T) {
	for name, key := range map[string]func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error){
		"empty": func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "", nil },
		"error": func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "", io.EOF },
	} {
		t.Run(name, func(t *testing.T) {
			f := newSession(t, sessOptions{broker: func(c *broker.Config) {
				c.APIKey = key
				c.MCP[0].APIKey = key
			}})
			f.bind("")
			wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 502, "Broker call failed")
			wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 502, "Broker call failed")
			if n := len(f.up.requests()); n != 0 {
				t.Errorf("upstream saw %d calls; want none", n)
			}
		})
	}
}

// TestSecSessionStreamLeadingBOMKeyRefused: the session path's relay keeps
// the byte-order-mark rule of the sealed one (upstream's leadingMark): a
// streamed answer that begins with a mark, whose first event carries the
// key split or escaped, is refused with the fixed 502 before anything
// reaches the worker.
func TestSecSessionStreamLeadingBOMKeyRefused(t *testing.T) {
	const bom = "\xEF\xBB\xBF"
	var escaped strings.Builder
	for _, r := range "host-secret" {
		fmt.Fprintf(&escaped, `\u%04x`, r)
	}
	block := func(text string) string {
		return "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"" + text + "\"}}\nevent: content_block_start\n\n"
	}
	delta := func(text string) string {
		return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
	}
	for name, events := range map[string][]string{
		"split":   {bom + block("k: host-"), delta("secret")},
		"escaped": {bom + block(escaped.String()), delta("x")},
	} {
		t.Run(name, func(t *testing.T) {
			f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range events {
					io.WriteString(w, ev)
					w.(http.Flusher).Flush()
				}
			}})
			f.bind("")
			r := f.post(wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`)
			if strings.Contains(r.Body, "host-") || strings.Contains(r.Body, `\u0068`) {
				t.Fatalf("the worker received the key's first event: %q", r.Body)
			}
			wantResp(t, r, 502, "Broker call failed")
		})
	}
}
