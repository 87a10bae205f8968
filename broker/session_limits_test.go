package broker_test

// The broker lines of the reference's limit tests (behaviours with no reference
// test), the URL hygiene of docs/session.md, "Routes and statuses" and the host API's refusals.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The reference's test "/worker/next 45 s timeout → 408, and a second waiter → 429", on
// the synctest clock, straight through the handler.
func TestSessionNextLongPollTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := broker.NewSession(broker.SessionConfig{Broker: plainBroker(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		first := httptest.NewRecorder()
		done := make(chan struct{})
		start := time.Now()
		go func() {
			s.ServeHTTP(first, httptest.NewRequest(http.MethodGet, wire.RouteWorkerNext, nil))
			close(done)
		}()
		synctest.Wait()
		second := httptest.NewRecorder()
		s.ServeHTTP(second, httptest.NewRequest(http.MethodGet, wire.RouteWorkerNext, nil))
		if second.Code != 429 || second.Body.String() != "Already waiting" {
			t.Errorf("second waiter = %d %q; want 429 Already waiting", second.Code, second.Body.String())
		}
		<-done
		if d := time.Since(start); d != rtsandbox.SessionNextWait {
			t.Errorf("long poll ended after %v; want %v", d, rtsandbox.SessionNextWait)
		}
		if first.Code != 408 || first.Body.String() != "Retry" {
			t.Errorf("long poll = %d %q; want 408 Retry", first.Code, first.Body.String())
		}
		// The waiter is cleared: a new poll waits again.
		again := make(chan int)
		go func() {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, wire.RouteWorkerNext, nil))
			again <- w.Code
		}()
		time.Sleep(rtsandbox.SessionNextWait)
		if code := <-again; code != 408 {
			t.Errorf("second long poll = %d; want 408", code)
		}
	})
}

// A long poll is not limited by the listener's silence: it waits past it
// and still delivers a turn queued later.
func TestSessionLongPollOutlastsSilence(t *testing.T) {
	f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.Silence = 100 * time.Millisecond }})
	next := make(chan resp, 1)
	go func() { next <- f.deliver() }()
	waitWaiting(t, f)
	time.Sleep(300 * time.Millisecond)
	exec := f.execute(context.Background(), sessTurn(sessTurnID))
	wantResp(t, <-next, 200, "")
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"m1","result":{"ok":false,"error":"failed"}}`), 200, "Accepted")
	if got := waitExec(t, exec); got.Err != nil || got.Result.OK || got.Result.Error != "failed" {
		t.Errorf("Execute = %+v, %v; want the ok:false result", got.Result, got.Err)
	}
}

// patternReader yields n bytes of b repeated, then tail.
type patternReader struct {
	n     int64
	b     byte
	tail  string
	chunk []byte
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		if r.tail == "" {
			return 0, io.EOF
		}
		n := copy(p, r.tail)
		r.tail = r.tail[n:]
		return n, nil
	}
	if r.chunk == nil {
		r.chunk = bytes.Repeat([]byte{r.b}, 64<<10)
	}
	n := copy(p[:min(int64(len(p)), r.n)], r.chunk)
	r.n -= int64(n)
	return n, nil
}

// The reference's test "Body limits: ready 16 KiB, result 72 MiB, credential routes 96
// MiB": one byte over each is refused; the ready body is also accepted
// at its limit (the large ones at their limit would only time the JSON
// decoder on a busy machine). The report's 64 KiB belongs to docs/protocol.md, "Compaction".
func TestSessionBodyLimits(t *testing.T) {
	f := newSession(t, sessOptions{})
	at := func(n int64) io.Reader { return &patternReader{n: n - 2, b: ' ', tail: "{}"} }
	wantResp(t, f.postReader(wire.RouteWorkerReady, at(rtsandbox.MaxReadyBody), rtsandbox.MaxReadyBody), 200, "Ready")
	wantResp(t, f.postReader(wire.RouteWorkerReady, at(rtsandbox.MaxReadyBody+1), rtsandbox.MaxReadyBody+1), 400, "Invalid ready handshake")

	f.bind("")
	wantResp(t, f.postReader("/tools/lookup", at(rtsandbox.MaxSessionRequest+1), rtsandbox.MaxSessionRequest+1), 502, "Broker call failed")

	exec := f.execute(context.Background(), sessTurn(sessTurnID))
	wantResp(t, f.deliver(), 200, "")
	wantResp(t, f.postReader(wire.RouteWorkerResult, at(rtsandbox.MaxResultBody+1), rtsandbox.MaxResultBody+1), 400, "Invalid result")
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"m1","result":{"ok":true,"text":"t","files":[]}}`), 200, "Accepted")
	if got := waitExec(t, exec); got.Err != nil || got.Result.Text != "t" {
		t.Errorf("Execute = %+v, %v", got.Result, got.Err)
	}
}

// The reference's test "A model/tool call during the startup window → 410".
func TestSessionStartupWindowRefusesModelAndTools(t *testing.T) {
	f := newSession(t, sessOptions{})
	wantResp(t, f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`), 410, "Turn ended")
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 410, "Turn ended")
	wantResp(t, f.post("/mcp/research?beta=true", rpcBody("ping", "")), 404, "Not found")
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 200, "")
	if n := len(f.upstreamCalls("/v1/")); n != 0 {
		t.Errorf("model called %d times", n)
	}
}

// The reference's test "4-slot concurrency → 429": four calls in flight hold the four
// slots until their answers end; a fifth is refused.
func TestSessionFourSlotsInFlight(t *testing.T) {
	arrived := make(chan struct{}, 8)
	unblock := make(chan struct{})
	f := newSession(t, sessOptions{reply: heldReply(arrived, unblock)})
	f.bind("")
	assertSlots(t, f, rtsandbox.SessionMaxInFlight, arrived, unblock)
}

// assertSlots holds slots calls whose answers stream until unblock is
// closed: one call more gets 429 "Broker budget exhausted" while they
// run, and fits once they ended. The stand-in is heldReply(arrived,
// unblock).
func assertSlots(t *testing.T, f *sessFixture, slots int, arrived <-chan struct{}, unblock chan struct{}) {
	t.Helper()
	var wg sync.WaitGroup
	results := make(chan resp, slots)
	for range slots {
		wg.Go(func() { results <- f.post(wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`) })
	}
	for range slots {
		<-arrived
	}
	// The answers have begun streaming: their slots are still held.
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 429, "Broker budget exhausted")
	close(unblock)
	wg.Wait()
	close(results)
	for r := range results {
		wantResp(t, r, 200, `{"a":1}`)
	}
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 200, "")
}

// The reference's test "budget exhaustion at maxCalls": refused calls spend budget too.
func TestSessionBudgetExhaustedAtMaxCalls(t *testing.T) {
	f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.MaxCalls = 3 }})
	release, _ := f.bind("")
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 200, "")
	wantResp(t, f.post("/tools/lookup", `{"input":[]}`), 400, "Invalid tool input")
	wantResp(t, f.post("/tools/lookup", `[]`), 400, "Invalid input")
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 429, "Broker budget exhausted")
	release()
	f.bind("") // a new binding has a fresh budget
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 200, "")
}

// docs/session-mode.md, "Between turns: the startup window": the startup window has 32 calls.
func TestSessionStartupWindowBudget(t *testing.T) {
	f := newSession(t, sessOptions{})
	for i := range rtsandbox.StartupWindowCalls {
		if r := f.post("/mcp/research", rpcBody("ping", "")); r.Status != 200 {
			t.Fatalf("call %d = %d", i, r.Status)
		}
	}
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 429, "Broker budget exhausted")
}

// The reference's test "Response cap of 50 MiB": an answer past it is cut off after its
// head.
func TestSessionResponseCap50MiB(t *testing.T) {
	event := "data: " + strings.Repeat("a", 64<<10) + "\n\n"
	f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for n := 0; n <= rtsandbox.MaxStreamedAnswer; n += len(event) {
			if _, err := io.WriteString(w, event); err != nil {
				return
			}
		}
	}})
	f.bind("")
	r := f.post(wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`)
	if r.Err == nil || len(r.Body) > rtsandbox.MaxStreamedAnswer {
		t.Errorf("answer read %d bytes, err %v; want a cut body", len(r.Body), r.Err)
	}
}

// A streamed answer is read as events whatever its Content-Type (the
// worker's SDK does): one that never ends an event is held, and refused
// before its head once it passes the event bound.
func TestSessionStreamedJSONHeldAsOneEvent(t *testing.T) {
	f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.Copy(w, &patternReader{n: upstream.MaxStreamEvent + 1, b: 'a'})
	}})
	f.bind("")
	r := f.post(wire.RouteAnthropicMessages, `{"stream":true,"messages":`+userHi+`}`)
	wantResp(t, r, http.StatusBadGateway, "Broker call failed")
}

// The reference's test "header value filtering (a header longer than 256 chars, or one
// containing the secret, is dropped)".
func TestSessionHeaderValueFiltering(t *testing.T) {
	f := newSession(t, sessOptions{reply: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", strings.Repeat("r", 257))
		w.Header().Set("Retry-After", "x "+hostSecret)
		w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "7")
		w.Header().Set("Mcp-Session-Id", mcpSecret)
		io.WriteString(w, `{}`)
	}})
	f.bind("")
	r := f.post(wire.RouteAnthropicMessages, `{"messages":`+userHi+`}`)
	wantResp(t, r, 200, `{}`)
	if r.Header.Get("Request-Id") != "" || r.Header.Get("Retry-After") != "" || r.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "7" {
		t.Errorf("model answer headers = %v", r.Header)
	}
	r = f.post("/mcp/research", rpcBody("ping", ""))
	wantResp(t, r, 200, `{}`)
	if r.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("MCP answer passed a session id holding the secret: %v", r.Header)
	}
	// The worker's own headers: only mcp-session-id and
	// mcp-protocol-version reach the MCP server, each ≤ 256.
	f.post("/mcp/research", rpcBody("ping", ""), "Mcp-Session-Id", strings.Repeat("s", 257), "Mcp-Protocol-Version", "2025-06-18", "X-Other", "1")
	calls := f.upstreamCalls("/mcp")
	h := calls[len(calls)-1].Header
	if h.Get("Mcp-Session-Id") != "" || h.Get("Mcp-Protocol-Version") != "2025-06-18" || h.Get("X-Other") != "" || h.Get("Cookie") != "" {
		t.Errorf("MCP upstream headers = %v", h)
	}
}

// dialRaw writes raw to a new connection on the socket.
func dialRaw(t *testing.T, path, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if raw != "" {
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// closedAtOnce dials n connections to path and counts those the listener
// closes within 100 ms.
func closedAtOnce(t *testing.T, path string, n int) int {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialRaw(t, path, "")
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	closed := 0
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err == io.EOF {
				mu.Lock()
				closed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return closed
}

// heldReply answers with the head and the first bytes of a JSON answer,
// signals arrived and finishes it once unblock is closed: its call holds
// its slot meanwhile.
func heldReply(arrived chan<- struct{}, unblock <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"a":`)
		w.(http.Flusher).Flush()
		arrived <- struct{}{}
		<-unblock
		io.WriteString(w, `1}`)
	}
}

// The reference's test "Listener: 16-connection cap": of 24 connections, exactly 8 are
// closed at once.
func TestSessionConnectionCap(t *testing.T) {
	f := newSession(t, sessOptions{})
	if n := closedAtOnce(t, f.path, 24); n != 24-rtsandbox.SessionMaxConns {
		t.Errorf("%d of 24 connections closed; want %d", n, 24-rtsandbox.SessionMaxConns)
	}
}

// The reference's test "Listener: 10 s header deadline" (shortened): an idle connection
// is closed.
func TestSessionHeaderDeadline(t *testing.T) {
	f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.HeaderTimeout = 200 * time.Millisecond }})
	c := dialRaw(t, f.path, "POST /tools/lookup HTTP/1.1\r\n")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read = %v; want EOF", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v; want about 200ms", d)
	}
}

// The reference's test "Listener: 120 s silence kill" (shortened): a body that stops
// arriving kills the request, both directions, with no answer.
func TestSessionSilenceKill(t *testing.T) {
	f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.Silence = 200 * time.Millisecond }})
	f.bind("")
	c := dialRaw(t, f.path, "POST /tools/lookup HTTP/1.1\r\nHost: broker\r\nContent-Length: 100\r\n\r\n{\"input\"")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	out, _ := io.ReadAll(c)
	if len(out) != 0 {
		t.Errorf("a silent request got an answer: %q", out)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("killed after %v; want about 200ms", d)
	}
	// Body chunks below the limit keep the request alive.
	c = dialRaw(t, f.path, "POST /tools/lookup HTTP/1.1\r\nHost: broker\r\nContent-Length: 12\r\n\r\n{\"input\"")
	for _, part := range []string{":", "{", "}}"} {
		time.Sleep(120 * time.Millisecond)
		io.WriteString(c, part)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	out, _ = io.ReadAll(c)
	if !strings.HasPrefix(string(out), "HTTP/1.1 200 ") || !strings.Contains(strings.ToLower(string(out)), "connection: close") {
		t.Errorf("slow body answer = %q; want 200 with Connection: close", out)
	}
}

// docs/session.md, "Session broker": the socket is 0600, removed at Close, and every answer closes
// its connection.
func TestSessionSocketModeAndClose(t *testing.T) {
	f := newSession(t, sessOptions{})
	st, err := os.Stat(f.path)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket = %v, %v; want a 0600 socket", st, err)
	}
	out, _ := io.ReadAll(dialRaw(t, f.path, "GET /worker/config HTTP/1.1\r\nHost: x\r\n\r\nGET /worker/config HTTP/1.1\r\nHost: x\r\n\r\n"))
	if n := strings.Count(string(out), "HTTP/1.1 200"); n != 1 || !strings.Contains(string(out), `"modelApi":"anthropic"`) {
		t.Errorf("answers = %q; want one /worker/config answer", out)
	}
	if err := f.sess.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.path); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// docs/session.md, "Routes and statuses" URL hygiene and the route table's 404 and 410 rows (docs/session.md, "Routes and statuses").
func TestSessionRouteTable(t *testing.T) {
	f := newSession(t, sessOptions{})
	tests := []struct {
		method, target string
		status         int
		body           string
	}{
		{"GET", "/worker/config#x", 404, "Not found"},
		{"GET", "/worker/config?x=1", 404, "Not found"},
		{"GET", "/worker/config?", 404, "Not found"},
		{"GET", "/worker/config?beta=true", 410, "Turn ended"}, // falls through to the credential logic
		{"POST", "/worker/next", 404, "Not found"},
		{"GET", "/worker/ready", 404, "Not found"},
		{"GET", "/worker/other", 404, "Not found"},
		{"POST", "/mcp-tools", 404, "Not found"},
		{"GET", "/mcp-tools?beta=true", 410, "Turn ended"},
		{"POST", "/anything", 410, "Turn ended"},
		{"GET", "/mcp/research", 404, "Not found"},
		{"POST", "/tools/lookup", 410, "Turn ended"},
	}
	for _, tc := range tests {
		r := f.do(tc.method, tc.target, "")
		if tc.method == "GET" && strings.Contains(tc.target, "#") {
			// net/http never sends a fragment: send it raw.
			out, _ := io.ReadAll(dialRaw(t, f.path, "GET "+tc.target+" HTTP/1.1\r\nHost: x\r\n\r\n"))
			r = resp{Status: statusOf(string(out)), Body: bodyOf(string(out))}
		}
		if r.Status != tc.status || r.Body != tc.body {
			t.Errorf("%s %s = %d %q; want %d %q", tc.method, tc.target, r.Status, r.Body, tc.status, tc.body)
		}
	}
	f.bind("")
	wantResp(t, f.post("/anything", `{}`), 404, "Not found")
	wantResp(t, f.do(http.MethodGet, "/tools/lookup", ""), 404, "Not found")
	wantResp(t, f.post("/tools/lookup?beta=true", `{"input":{}}`), 404, "Not found")
}

func statusOf(raw string) int {
	_, rest, _ := strings.Cut(raw, " ")
	n, _ := strconv.Atoi(strings.SplitN(rest, " ", 2)[0])
	return n
}

func bodyOf(raw string) string {
	_, body, _ := strings.Cut(raw, "\r\n\r\n")
	return body
}

// The host API's refusals: a second Bind, a second Execute, a bad level.
func TestSessionHostAPIRefusals(t *testing.T) {
	f := newSession(t, sessOptions{})
	f.bind("")
	_, err := f.sess.Bind(context.Background(), wire.SessionBinding{Thinking: "low"})
	if !errors.Is(err, broker.ErrTurnActive) || !strings.Contains(err.Error(), "Broker turn already active") {
		t.Errorf("second Bind = %v", err)
	}
	if _, err := f.sess.Bind(context.Background(), wire.SessionBinding{Thinking: "max"}); !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("Bind at max = %v; want invalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exec := f.execute(ctx, sessTurn("a"))
	waitFor(t, "the turn pending", func() bool { return broker.SessionPending(f.sess) })
	if _, err := f.sess.Execute(ctx, sessTurn("b")); !errors.Is(err, broker.ErrWorkerBusy) || !strings.Contains(err.Error(), "Worker is busy") {
		t.Errorf("second Execute = %v", err)
	}
	if _, err := f.sess.Execute(ctx, sessTurn("../x")); !errors.Is(err, wire.ErrTurnInput) {
		t.Errorf("Execute of a bad turn = %v", err)
	}
	cancel()
	waitExec(t, exec)
	if _, err := broker.NewSession(broker.SessionConfig{}); err == nil {
		t.Error("NewSession without a broker succeeded")
	}
	b := plainBroker(t)
	for _, n := range []int{-1, rtsandbox.MaxCallsLimit + 1} {
		if _, err := broker.NewSession(broker.SessionConfig{Broker: b, MaxCalls: n}); !errors.Is(err, broker.ErrBudget) {
			t.Errorf("MaxCalls %d = %v; want ErrBudget", n, err)
		}
	}
}

// The reference's test "socket path > 100 → refused": the broker refuses it before
// creating anything.
func TestSessionSocketPathTooLong(t *testing.T) {
	s, err := broker.NewSession(broker.SessionConfig{Broker: plainBroker(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := shortDir(t)
	path := dir + "/" + strings.Repeat("s", broker.MaxSocketPath-len(dir))
	if err := s.Listen(path); !errors.Is(err, rtsandbox.ErrSocketPath) || !strings.Contains(err.Error(), "Broker socket path too long") {
		t.Fatalf("Listen(%d bytes) = %v; want ErrSocketPath", len(path), err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a file was created: %v", err)
	}
	if err := s.Listen(path[:broker.MaxSocketPath]); err != nil {
		t.Errorf("Listen(%d bytes) = %v", broker.MaxSocketPath, err)
	}
}

// Close ends a waiting long poll (408) and a pending Execute
// (ErrTurnCancelled), and refuses later turns.
func TestSessionCloseEndsPollAndExecute(t *testing.T) {
	f := newSession(t, sessOptions{})
	next := make(chan resp, 1)
	go func() { next <- f.deliver() }()
	waitWaiting(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exec := f.execute(ctx, sessTurn("a"))
	wantResp(t, <-next, 200, "") // delivered
	if err := f.sess.Close(); err != nil {
		t.Fatal(err)
	}
	if got := waitExec(t, exec); !errors.Is(got.Err, broker.ErrTurnCancelled) {
		t.Errorf("Execute after Close = %v; want ErrTurnCancelled", got.Err)
	}
	if _, err := f.sess.Execute(ctx, sessTurn("b")); !errors.Is(err, broker.ErrSessionClosed) {
		t.Errorf("Execute on a closed session = %v", err)
	}
}

// A SessionHostTool that panics fails its call with the fixed 502; the
// broker goes on.
func TestSessionToolPanicContained(t *testing.T) {
	f := newSession(t, sessOptions{broker: func(c *broker.Config) {
		c.Tools = append(c.Tools, broker.Tool{Spec: rtsandbox.ToolSpec{Name: "boom", Parameters: []byte(`{"type":"object"}`)}, Impl: panicTool{}})
	}})
	f.bind("")
	wantResp(t, f.post("/tools/boom", `{"input":{}}`), 502, "Broker call failed")
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 200, "")
	if !strings.Contains(f.logs.String(), "host tool panicked") {
		t.Error("the panic was not logged")
	}
}

type panicTool struct{}

func (panicTool) Run(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) {
	panic("never")
}

func (panicTool) RunSession(context.Context, json.RawMessage, wire.SessionBinding) (wire.SessionToolResponse, error) {
	panic("boom")
}

// The daily ledger counts a bound turn's calls for its speaker, channel
// and the installation, and the startup window's metadata calls for the
// channel and the installation only (issue 21): both spend the channel's
// budget.
func TestSessionDailyLedger(t *testing.T) {
	l := openLedger(t, budget.Config{PerChannel: budget.Limits{Calls: 2}})
	f := newSession(t, sessOptions{broker: func(c *broker.Config) { c.Budget = l }})
	wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 200, "")
	f.bindAs(sessChannel, ann, "")
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 200, "")
	wantResp(t, f.post("/tools/lookup", `{"input":{}}`), 429, "daily budget exhausted")
	scopes := budget.Scopes(sessChannel, ann.PrincipalID)
	for scope, want := range map[string]int64{scopes[0]: 1, scopes[1]: 2, scopes[2]: 2} {
		if u := usage(t, l, scope); u[budget.Calls].Used != want {
			t.Errorf("%s usage = %+v; want %d calls", scope, u, want)
		}
	}
}
