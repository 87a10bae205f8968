package broker_test

// Issue 21, "parsing costs what the bytes cost": a compromised worker sent
// four parallel 96 MiB /model bodies whose messages held some 33 million
// empty arrays, and every element was built before the message-count rule
// ran. These tests put the adversarial shapes at every position of every
// route, in both modes, and hold the broker's allocations to a small
// constant times the body; attack_test.go measures the whole process.

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/adversarial"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// shapes are the adversarial elements of issue 21 (package adversarial).
var shapes = adversarial.Shapes()

// flood is an array of about size bytes of shape's elements.
func flood(shape string, size int) string { return adversarial.Flood(shape, size) }

// floodSize is the size of the floods: large enough that the node
// budget's floor does not hide a cost per byte, smaller under the race
// detector.
var floodSize = map[bool]int{false: 4 << 20, true: 256 << 10}[raceEnabled]

// position is where a route reads a flood: a count rule refuses any
// flood (its count, or the kind of its elements); a kept value (a tree:
// tool_use input, tool and MCP arguments) refuses a flood of many values
// for the budget and takes one large value; a skipped member takes any.
type position int

const (
	counted position = iota
	kept
	skipped
)

// routeCase is one route and position: body wraps a flood; refusal is
// the answer's body (or a part of it) when refused.
type routeCase struct {
	name    string
	route   string
	at      position
	body    func(flood string) string
	refusal string
}

// wantOutcome asserts the answer to a flood of shape at c.
func wantOutcome(t *testing.T, c routeCase, single bool, status int, body string) {
	t.Helper()
	refused := c.at == counted || c.at == kept && !single
	switch {
	case refused && (status != http.StatusBadRequest || !strings.Contains(body, c.refusal)):
		t.Errorf("answer %d %.200q; want 400 with %q", status, body, c.refusal)
	case !refused && status != http.StatusOK:
		t.Errorf("answer %d %.200q; want 200", status, body)
	}
}

// decodeLimit is what one call may allocate for a body of size bytes, the
// client's and the stand-ins' work included: DecodeFactor times the body
// for the broker, twice more for the stand-in reading an accepted
// request, and 16 MiB for the node budget's floor and the buffers.
func decodeLimit(size int) uint64 {
	return uint64((rtsandbox.DecodeFactor+2)*size + 16<<20)
}

// allocated is the bytes fn allocates, in the whole process.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

var messagesRoutes = []routeCase{
	{"Messages", wire.RouteAnthropicMessages, counted,
		func(f string) string { return `{"messages":` + f + `}` }, "invalid_request_error"},
	{"Content", wire.RouteAnthropicMessages, counted,
		func(f string) string { return `{"messages":[{"role":"user","content":` + f + `}]}` }, "invalid_request_error"},
	{"ToolUseInput", wire.RouteAnthropicMessages, kept, func(f string) string {
		return `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{"x":` + f + `}}]}]}`
	}, modelapi.RefuseBudget},
	{"BlockMember", wire.RouteAnthropicMessages, skipped, func(f string) string {
		return `{"messages":[{"role":"user","content":[{"type":"text","text":"hi","x":` + f + `}]}]}`
	}, ""},
	{"ToolInput", "/tools/recall", kept, func(f string) string { return `{"input":{"x":` + f + `}}` }, "Invalid tool input"},
	{"MCPArguments", "/mcp/research", kept, func(f string) string {
		return rpcBody(wire.MCPMethodCall, `{"name":"search","arguments":{"x":`+f+`}}`)
	}, "Invalid tool input"},
	{"MCPUnknownMember", "/mcp/research", skipped, func(f string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"ping","x":` + f + `}`
	}, ""},
}

var chatRoutes = []routeCase{
	{"Messages", wire.RouteModel, counted, func(f string) string { return `{"messages":` + f + `}` }, ""},
	{"ContentParts", wire.RouteModel, counted, func(f string) string {
		return `{"messages":[{"role":"user","content":` + f + `}]}`
	}, ""},
	{"TopMember", wire.RouteModel, skipped, func(f string) string {
		return `{"messages":[{"role":"user","content":"hi"}],"x":` + f + `}`
	}, ""},
}

// TestSessionDecodeAdversarialShapes sends every shape to every position
// of the session routes in both dialects: each answer is the rule's, and
// each call allocates at most decodeLimit of its body.
func TestSessionDecodeAdversarialShapes(t *testing.T) {
	run := func(t *testing.T, f *sessFixture, cases []routeCase) {
		for _, c := range cases {
			for _, s := range shapes {
				t.Run(c.name+"/"+s.Name, func(t *testing.T) {
					body := c.body(flood(s.Name, floodSize))
					var r resp
					alloc := allocated(func() { r = f.post(c.route, body) })
					if r.Err != nil {
						t.Fatalf("post: %v", r.Err)
					}
					wantOutcome(t, c, s.One != nil, r.Status, r.Body)
					if alloc > decodeLimit(len(body)) {
						t.Errorf("the call allocated %d bytes for a body of %d (%.1f×); want at most %d", alloc, len(body), float64(alloc)/float64(len(body)), decodeLimit(len(body)))
					}
				})
			}
		}
	}
	t.Run("Anthropic", func(t *testing.T) {
		f := newSession(t, sessOptions{})
		f.bind("")
		run(t, f, messagesRoutes)
	})
	t.Run("OpenAI", func(t *testing.T) {
		f := openaiSession(t)
		f.bind("")
		run(t, f, chatRoutes)
	})
}

// TestSessionResultFilesFlood posts results whose files are floods: the
// count rule (10 files) refuses every one as "Invalid result" before a
// file is decoded, and the turn still takes a valid result after.
func TestSessionResultFilesFlood(t *testing.T) {
	f := newSession(t, sessOptions{})
	exec := f.execute(context.Background(), sessTurn(sessTurnID))
	wantResp(t, f.deliver(), 200, "")
	for _, s := range shapes {
		t.Run(s.Name, func(t *testing.T) {
			body := `{"turnId":"m1","result":{"ok":true,"text":"t","files":` + flood(s.Name, floodSize) + `}}`
			var r resp
			alloc := allocated(func() { r = f.post(wire.RouteWorkerResult, body) })
			wantResp(t, r, http.StatusBadRequest, "Invalid result")
			if alloc > decodeLimit(len(body)) {
				t.Errorf("the result allocated %d bytes for a body of %d; want at most %d", alloc, len(body), decodeLimit(len(body)))
			}
		})
	}
	wantResp(t, f.post(wire.RouteWorkerResult, `{"turnId":"m1","result":{"ok":true,"text":"t","files":[]}}`), 200, "Accepted")
	if got := waitExec(t, exec); got.Err != nil || got.Result.Text != "t" {
		t.Errorf("Execute = %+v, %v; want the valid result", got.Result, got.Err)
	}
}

// TestSealedDecodeAdversarialShapes is the same for a sealed turn, whose
// bodies are at most 256 KiB: /model, the Anthropic route (model.api
// anthropic), a host tool and an MCP call.
func TestSealedDecodeAdversarialShapes(t *testing.T) {
	size := rtsandbox.MaxBrokerRequest - 1<<10
	mcp := newMCPStub(t, nil, textResult("found"))
	anthropic := func(c routeCase) routeCase { c.name = "Anthropic" + c.name; return c }
	cases := []routeCase{
		{"Messages", wire.RouteModel, counted, func(f string) string { return `{"messages":` + f + `}` }, "text/function model payload required"},
		anthropic(messagesRoutes[0]),
		anthropic(messagesRoutes[2]),
		anthropic(messagesRoutes[3]),
		{"ToolArguments", wire.ToolRoute("echo"), kept, func(f string) string { return `{"x":` + f + `}` }, "invalid tool arguments"},
		{"MCPArguments", wire.MCPRoute("public"), kept, func(f string) string {
			return `{"method":"tools/call","params":{"name":"search","arguments":{"x":` + f + `}}}`
		}, "invalid tool arguments"},
	}
	for _, c := range cases {
		for _, s := range shapes {
			t.Run(c.name+"/"+s.Name, func(t *testing.T) {
				reply := jsonReply(`{"choices":[]}`)
				if strings.HasPrefix(c.name, "Anthropic") {
					reply = jsonReply(messageAnswer)
				}
				f := newFixture(t, reply, func(cfg *broker.Config) {
					withTool("echo", `{"type":"object"}`, &echoTool{})(cfg)
					withMCP(mcp.fakeUpstream, "")(cfg)
					cfg.Client = mcp.client()
					if strings.HasPrefix(c.name, "Anthropic") {
						anthropicAPI(false)(cfg)
					}
				})
				body := c.body(flood(s.Name, size-200))
				var status int
				var answer string
				alloc := allocated(func() {
					w := f.post(c.route, body)
					status, answer = w.Code, w.Body.String()
				})
				wantOutcome(t, c, s.One != nil, status, answer)
				if alloc > decodeLimit(len(body)) {
					t.Errorf("the call allocated %d bytes for a body of %d; want at most %d", alloc, len(body), decodeLimit(len(body)))
				}
			})
		}
	}
}

// sessionIntake is a session fixture whose broker shares in with others.
func sessionIntake(t *testing.T, in *broker.Intake, o sessOptions) *sessFixture {
	t.Helper()
	edit := o.broker
	o.broker = func(c *broker.Config) {
		c.Intake = in
		if edit != nil {
			edit(c)
		}
	}
	return newSession(t, o)
}

// stalledBody declares size bytes and sends all but the last, then waits
// until it is released (or the test returns) and ends short of its last
// byte: a body being read that holds its share of the decoding budget.
// sent is closed once the first part is out.
type stalledBody struct {
	left    int
	sent    chan struct{}
	done    chan struct{}
	release func()
}

func newStalledBody(t *testing.T, size int) *stalledBody {
	b := &stalledBody{left: size - 1, sent: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	b.release = func() { once.Do(func() { close(b.done) }) }
	t.Cleanup(b.release)
	return b
}

// wantAbandoned checks the answer to the call whose stalled body the
// broker stopped reading when its turn ended. The broker answers 502
// and closes the connection with the upload unread, so the client sees
// that answer or the connection reset, whichever its transport reads
// first; either way the call ended. The client's transport returns only
// once its body writer stops (on a reset it waits for it), so the body is
// released first: the caller has already checked, on the broker's side,
// that the read was abandoned while the body still stalled.
func wantAbandoned(t *testing.T, body *stalledBody, answer <-chan resp) {
	t.Helper()
	body.release()
	r := <-answer
	if r.Err == nil {
		wantResp(t, r, http.StatusBadGateway, "Broker call failed")
	}
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		close(b.sent)
		<-b.done
		return 0, io.ErrUnexpectedEOF
	}
	n := min(len(p), b.left)
	for i := range p[:n] {
		p[i] = ' '
	}
	b.left -= n
	return n, nil
}

// postAsyncSized posts body of the declared size in the background.
func (f *sessFixture) postAsyncSized(target string, body io.Reader, size int64) <-chan resp {
	ch := make(chan resp, 1)
	go func() { ch <- f.postReader(target, body, size) }()
	return ch
}

// The host's decoding budget (broker.Intake) is shared by every channel:
// while one channel's body holds all of it, another channel's call waits
// for its share, and goes on once the first turn ends, whose body being
// read is abandoned then, not read to its end.
func TestIntakeSharedAcrossChannels(t *testing.T) {
	const size = 1 << 20
	in := broker.NewIntake(rtsandbox.DecodeFactor * size)
	a := sessionIntake(t, in, sessOptions{})
	b := sessionIntake(t, in, sessOptions{})
	_, endA := a.bind("")
	b.bind("")

	stalled := newStalledBody(t, size)
	first := a.postAsyncSized("/tools/recall", stalled, size)
	<-stalled.sent
	second := b.postAsync("/tools/recall", strings.NewReader(`{"input":{}}`))
	waitFor(t, "the second channel's call waiting for its share", func() bool { return broker.IntakeWaiting(in) == 1 })

	start := time.Now()
	endA() // the first turn ends: its body is no longer read
	// The other channel's call goes on at once, while the first worker
	// still keeps its upload open (readBody's cutReader: once in CI,
	// before it, this call waited a minute, its own turn's deadline).
	wantResp(t, <-second, http.StatusOK, "")
	if d := time.Since(start); d > time.Second {
		t.Errorf("the second call answered %v after the first turn ended; want it to go on at once", d)
	}
	wantAbandoned(t, stalled, first)
}

// A channel's own share is one largest body's worth: a worker whose body
// holds it waits for its own share with its next call, whatever the
// host's budget has left, so one channel never holds more of the host's
// budget than its largest body needs.
func TestIntakeChannelShare(t *testing.T) {
	in := broker.NewIntake(1 << 40) // the host's budget is never the limit here
	f := sessionIntake(t, in, sessOptions{})
	_, end := f.bind("")
	// A call declared at the credential routes' limit, the channel's
	// largest body, holds the channel's whole share.
	stalled := newStalledBody(t, rtsandbox.MaxSessionRequest)
	first := f.postAsyncSized("/tools/recall", stalled, rtsandbox.MaxSessionRequest)
	<-stalled.sent
	second := f.postAsync("/tools/recall", strings.NewReader(`{"input":{}}`))
	waitFor(t, "the call waiting for its channel's share", func() bool { return broker.SessionIntakeWaiting(f.sess) == 1 })
	if n := broker.IntakeWaiting(in); n != 0 {
		t.Errorf("%d calls wait for the host's share; want none", n)
	}
	end()
	waitFor(t, "the first body abandoned, its share released", func() bool { return broker.IntakeHeld(in) == 0 })
	wantResp(t, <-second, http.StatusBadGateway, "Broker call failed")
	wantAbandoned(t, stalled, first)
}

// A call waiting for its share when its turn ends fails at once, without
// ever taking the share.
func TestIntakeWaitEndsWithTheTurn(t *testing.T) {
	const size = 1 << 20
	in := broker.NewIntake(rtsandbox.DecodeFactor * size)
	a := sessionIntake(t, in, sessOptions{})
	b := sessionIntake(t, in, sessOptions{})
	_, endA := a.bind("")
	_, endB := b.bind("")
	stalled := newStalledBody(t, size)
	first := a.postAsyncSized("/tools/recall", stalled, size)
	<-stalled.sent
	second := b.postAsync("/tools/recall", strings.NewReader(`{"input":{}}`))
	waitFor(t, "the second call waiting", func() bool { return broker.IntakeWaiting(in) == 1 })
	endB()
	wantResp(t, <-second, http.StatusBadGateway, "Broker call failed")
	if n := broker.IntakeWaiting(in); n != 0 {
		t.Errorf("%d calls still wait after the turn ended", n)
	}
	endA()
	waitFor(t, "the first body abandoned, its share released", func() bool { return broker.IntakeHeld(in) == 0 })
	wantAbandoned(t, stalled, first)
}

// Decoding stops within 100 ms of the turn's end: a body whose reading
// takes far longer (its skipped member is scanned at every level of the
// rule) is cut off once its turn ends, and the call answers the failure
// of a call that ended, not the rule's answer. The body is sent chunked,
// so that its share of the decoding budget, taken for the routes' limit,
// shrinks to its size once it is read: then the turn ends.
func TestDecodeStopsWithin100msOfTurnEnd(t *testing.T) {
	size := map[bool]int{false: 96<<20 - 1<<10, true: 32 << 20}[raceEnabled]
	in := broker.NewIntake(1 << 40)
	f := sessionIntake(t, in, sessOptions{})
	_, end := f.bind("")
	text := messagesRoutes[3].body(flood("EmptyArrays", size))
	answer := f.postAsyncSized(wire.RouteAnthropicMessages, io.MultiReader(strings.NewReader(text)), -1) // no length: chunked
	waitFor(t, "the body read", func() bool { return broker.IntakeHeld(in) == rtsandbox.DecodeFactor*int64(len(text)) })
	start := time.Now()
	end()
	r := <-answer
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("the call answered %v after its turn ended; want within 100 ms", d)
	}
	wantResp(t, r, http.StatusBadGateway, "Broker call failed")
	// The audit record follows the answer.
	waitFor(t, "the audit record", func() bool { return strings.Contains(f.logs.String(), `"msg":"broker call"`) })
	if !strings.Contains(f.logs.String(), `"detail":"call canceled"`) {
		t.Errorf("audit log lacks the canceled call:\n%.3000s", f.logs.String())
	}
}
