package worker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemcp"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/wire"
)

// syncLog collects the worker's JSON log lines.
type syncLog struct{ syncbuf.Buffer }

// lines parses every log line; each must be one JSON object with
// app:"sandbox-worker", a time and a msg.
func (l *syncLog) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["app"] != "sandbox-worker" || m["time"] == nil || m["msg"] == nil {
			t.Errorf("log line %q lacks app, time or msg", line)
		}
		out = append(out, m)
	}
	return out
}

// count is how many lines have msg.
func (l *syncLog) count(t *testing.T, msg string) int {
	n := 0
	for _, m := range l.lines(t) {
		if m["msg"] == msg {
			n++
		}
	}
	return n
}

// runningWorker is RunSession in a goroutine.
type runningWorker struct {
	cancel context.CancelFunc
	done   chan int
	log    *syncLog
}

// startWorker runs a session worker against b with workspace, pausing
// 1 ms instead of 250 ms between rounds; it is stopped when t ends.
func startWorker(t *testing.T, b *sessionBroker, workspace string, opts ...func(*SessionOptions)) *runningWorker {
	t.Helper()
	return startWorkerOn(t, b.sock, workspace, opts...)
}

// startWorkerOn is startWorker against the broker listening on sock.
func startWorkerOn(t *testing.T, sock, workspace string, opts ...func(*SessionOptions)) *runningWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWorker{cancel: cancel, done: make(chan int, 1), log: &syncLog{}}
	o := SessionOptions{
		Socket: sock, Workspace: workspace, Stdout: w.log,
		Now:   func() time.Time { return time.Date(2026, 12, 1, 19, 40, 0, 0, time.UTC) },
		Sleep: func(ctx context.Context, d time.Duration) error { return sleep(ctx, time.Millisecond) },
	}
	for _, f := range opts {
		f(&o)
	}
	go func() { w.done <- RunSession(ctx, o) }()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop ends the worker and returns its exit code.
func (w *runningWorker) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	select {
	case code, ok := <-w.done:
		if ok {
			close(w.done)
			return code
		}
		return 0
	case <-time.After(10 * time.Second):
		t.Fatal("session worker did not stop")
		return -1
	}
}

func sessionTurn(id, text string) wire.SessionTurn {
	return wire.SessionTurn{TurnID: id, Author: wire.SessionAuthor{ID: "ann", Name: "Ann"}, Text: text, Images: []wire.Image{}, Thinking: "medium"}
}

// docs/session.md, "Process" startup order: GET /mcp-tools → GET /worker/config → POST
// /worker/ready → GET /worker/next, the ready body declaring the privacy
// capabilities it implements (sessionprivacy.go), every request with
// Host: broker and the dummy bearer (checked by the stand-in).
func TestSessionStartupOrder(t *testing.T) {
	b := startSessionBroker(t, nil)
	polled := make(chan struct{})
	var once sync.Once
	w := startWorker(t, b, t.TempDir(), func(o *SessionOptions) {
		o.Sleep = func(ctx context.Context, d time.Duration) error {
			once.Do(func() { close(polled) })
			return sleep(ctx, time.Millisecond)
		}
	})
	<-polled
	if code := w.stop(t); code != 0 {
		t.Errorf("exit code %d after cancel; want 0", code)
	}
	routes := b.gotRoutes()
	want := []string{"GET /mcp-tools", "GET /worker/config", "POST /worker/ready", "GET /worker/next"}
	if diff := cmp.Diff(want, routes[:4]); diff != "" {
		t.Errorf("startup order (-want +got):\n%s", diff)
	}
	for i := 4; i < len(routes); i += 2 {
		if routes[i] != "POST /worker/ready" {
			t.Errorf("route %d = %s; want a ready before every poll", i, routes[i])
		}
	}
	b.mu.Lock()
	ready := b.readyBodies[0]
	b.mu.Unlock()
	if want := `{"capabilities":{"privateTo":true,"readerRecords":true},"privateHistory":false}`; ready != want {
		t.Errorf("ready body %s; want %s", ready, want)
	}
}

// A fatal startup error logs "sandbox worker failed" and exits 1 (docs/session.md, "Process").
func TestSessionStartupFatal(t *testing.T) {
	tests := []struct {
		name  string
		setup func(b *sessionBroker)
	}{
		{"mcp-tools not JSON", func(b *sessionBroker) { b.discovery = `nope` }},
		{"config 404 has no model", func(b *sessionBroker) { b.config = "" }},
		{"config without model", func(b *sessionBroker) { b.config = `{"modelApi":"anthropic"}` }},
		{"config unknown model api", func(b *sessionBroker) { b.config = `{"modelApi":"gemini","model":"m"}` }},
		{"config bad time zone", func(b *sessionBroker) { b.config = `{"model":"m","timeZone":"Mars/Base"}` }},
		{"config tools not an array", func(b *sessionBroker) { b.config = `{"model":"m","tools":{}}` }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := startSessionBroker(t, nil)
			tc.setup(b)
			log := &syncLog{}
			code := RunSession(context.Background(), SessionOptions{Socket: b.sock, Workspace: t.TempDir(), Stdout: log})
			if code != 1 || log.count(t, logWorkerFailed) != 1 {
				t.Errorf("exit %d, %d failure lines; want 1 and 1\n%s", code, log.count(t, logWorkerFailed), log.String())
			}
			if slices.Contains(b.gotRoutes(), "POST /worker/ready") {
				t.Errorf("the worker announced itself after a fatal startup error")
			}
		})
	}
	t.Run("no broker", func(t *testing.T) {
		log := &syncLog{}
		code := RunSession(context.Background(), SessionOptions{Socket: filepath.Join(t.TempDir(), "none.sock"), Workspace: t.TempDir(), Stdout: log})
		if code != 1 || log.count(t, logWorkerFailed) != 1 {
			t.Errorf("exit %d; want 1 with one failure line", code)
		}
	})
}

// docs/session.md, "Process": a poll failure is logged once per outage, every failed or non-OK
// round is followed by the 250 ms pause, and a new outage logs again.
func TestSessionPollOutageLoggedOnce(t *testing.T) {
	b := startSessionBroker(t, nil)
	b.refuseReady = 3
	var mu sync.Mutex
	var sleeps []time.Duration
	done := make(chan struct{})
	w := startWorker(t, b, t.TempDir(), func(o *SessionOptions) {
		o.Sleep = func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			sleeps = append(sleeps, d)
			n := len(sleeps)
			mu.Unlock()
			switch n {
			case 5: // three refused, then two 408s: a second outage
				b.mu.Lock()
				b.refuseReady = 2
				b.mu.Unlock()
			case 9:
				close(done)
				<-ctx.Done()
			}
			return nil
		}
	})
	<-done
	w.stop(t)
	if n := w.log.count(t, logPollFailed); n != 2 {
		t.Errorf("%d %q lines; want 2 (one per outage)", n, logPollFailed)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, d := range sleeps {
		if d != rtsandbox.SessionWorkerRetry {
			t.Errorf("pause %d = %v; want %v", i, d, rtsandbox.SessionWorkerRetry)
		}
	}
}

// toolsConfig is a profile with the host tool lookup and the MCP server
// docs with its tool search.
const toolsConfig = `{"modelApi":"anthropic","model":"claude-test","stream":%t,"prompt":"Be brief.","timeZone":"Europe/Berlin",
 "tools":[{"name":"lookup","description":"Look up.","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}],
 "mcp":[{"server":"docs","tools":[{"name":"search","description":"Search docs.","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}]}]}`

// A turn end to end: the model calls a host tool and an MCP tool through
// the broker, then answers; the result, the prompt, the thinking budget,
// the image block, the MCP handshake and the session file are checked.
func TestSessionTurnEndToEnd(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			mcp := fakemcp.New(fakemcp.Tool{Name: "search", Reply: func(args json.RawMessage) string { return "mcp says " + string(args) }})
			defer mcp.Close()
			model := fakemodel.New(
				fakemodel.CallTools(fakemodel.Call("host_lookup", map[string]string{"q": "x"})),
				fakemodel.CallTools(fakemodel.Call("mcp_0_search", map[string]string{"query": "y"})),
				fakemodel.Reply("  done  "),
				fakemodel.Reply("again"),
			)
			defer model.Close()
			b := startSessionBroker(t, model)
			b.setConfig(toolsConfig, stream)
			b.discovery = `{"servers":[{"name":"docs","tools":["search"]}]}`
			b.mcp["docs"] = mcp.URL
			b.tools["lookup"] = func(json.RawMessage) string { return `{"ok":true,"text":"found it"}` }
			ws := t.TempDir()
			w := startWorker(t, b, ws)

			turn := sessionTurn("t1", "hello")
			turn.Images = []wire.Image{{Data: "AQID", MIMEType: rtsandbox.MIMEPNG}}
			got := b.execute(turn)
			if diff := cmp.Diff(wire.SessionResult{OK: true, Text: "done", Files: []wire.ReplyFile{}}, got); diff != "" {
				t.Fatalf("result (-want +got):\n%s\n%s", diff, w.log.String())
			}
			reqs := model.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d model requests; want 3", len(reqs))
			}
			if text := reqs[0].UserText(); !strings.HasPrefix(text, "[Ann (ann)] hello") {
				t.Errorf("prompt %q; want it to start with [Ann (ann)] hello", text)
			}
			if sys := reqs[0].System(); !strings.Contains(sys, "Be brief.") || !strings.Contains(sys, "12/1/2026, 8:40:00 PM") {
				t.Errorf("system prompt %q lacks the profile prompt or the local time", sys)
			}
			if r, _ := reqs[1].ToolResult(reqs[1].Body.Messages[2].ToolCalls[0].ID); r != "found it" {
				t.Errorf("host tool result %q; want found it", r)
			}
			if r := reqs[2].Last().Text(); !strings.Contains(r, `mcp says {"query":"y"}`) {
				t.Errorf("MCP result %q; want the server's text", r)
			}
			raw := b.gotModelBodies()[0]
			if !strings.Contains(raw, `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AQID"}}`) {
				t.Errorf("first model body has no image block: %s", raw)
			}
			var body struct {
				Thinking struct {
					BudgetTokens int `json:"budget_tokens"`
				} `json:"thinking"`
				Stream bool `json:"stream"`
			}
			json.Unmarshal([]byte(raw), &body)
			if budget, _ := rtsandbox.ThinkingBudget("medium"); body.Thinking.BudgetTokens != budget || body.Stream != stream {
				t.Errorf("thinking budget %d, stream %v; want %d, %v", body.Thinking.BudgetTokens, body.Stream, budget, stream)
			}
			var methods []string
			for _, r := range mcp.Requests() {
				methods = append(methods, r.Method)
			}
			if diff := cmp.Diff([]string{"initialize", "notifications/initialized", "tools/call"}, methods); diff != "" {
				t.Errorf("MCP requests (-want +got):\n%s", diff)
			}
			for _, msg := range []string{logTurnStarted, logTurnFinished} {
				if n := w.log.count(t, msg); n != 1 {
					t.Errorf("%d %q lines; want 1", n, msg)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, "outbox", "t1")); !os.IsNotExist(err) {
				t.Errorf("empty outbox not removed: %v", err)
			}
			xs := loadSessions(t, ws)
			if len(xs) != 1 || len(xs[0].messages) != 6 || xs[0].reader != "ann" {
				t.Fatalf("session holds %+v; want one exchange of 6 messages by ann", xs)
			}
			if c := xs[0].messages[0].Content; !strings.Contains(c, "1 image(s) were attached") {
				t.Errorf("stored prompt %q lacks the image note", c)
			}

			// The next turn replays the tool exchange as history, which the
			// broker's rebuild must accept (the stand-in fails the test if not).
			if r := b.execute(sessionTurn("t2", "and now?")); !r.OK || r.Text != "again" {
				t.Fatalf("second turn %+v", r)
			}
			var roles []string
			for _, m := range model.Requests()[3].Body.Messages[1:] {
				roles = append(roles, m.Role)
			}
			if diff := cmp.Diff([]string{"user", "assistant", "tool", "assistant", "tool", "assistant", "user"}, roles); diff != "" {
				t.Errorf("second turn's history (-want +got):\n%s", diff)
			}
		})
	}
}

// loadSessions parses the one session file of ws.
func loadSessions(t *testing.T, ws string) []sessionExchange {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(ws, "sessions", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("session files %v; want one", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	log, err := parseSession(data)
	xs := log.exchanges
	if err != nil {
		t.Fatal(err)
	}
	return xs
}

// A restarted worker continues the most recent session: the model sees
// the earlier turns; a fresh start (sessions archived) begins a new one.
func TestSessionRestartContinues(t *testing.T) {
	ws := t.TempDir()
	model := fakemodel.New(fakemodel.Reply("one"), fakemodel.Reply("two"), fakemodel.Reply("three"), fakemodel.Reply("four"))
	defer model.Close()
	b := startSessionBroker(t, model)
	w := startWorker(t, b, ws)
	for i, text := range []string{"first", "second"} {
		if r := b.execute(sessionTurn("t"+string(rune('1'+i)), text)); !r.OK {
			t.Fatalf("turn %d: %+v", i, r)
		}
	}
	w.stop(t)

	b2 := startSessionBroker(t, model)
	startWorker(t, b2, ws)
	if r := b2.execute(sessionTurn("t3", "third")); !r.OK || r.Text != "three" {
		t.Fatalf("turn after restart: %+v", r)
	}
	var got []string
	for _, m := range model.Requests()[2].Body.Messages[1:] {
		got = append(got, m.Role+": "+m.Text())
	}
	want := []string{"user: [Ann (ann)] first", "assistant: one", "user: [Ann (ann)] second", "assistant: two", "user: [Ann (ann)] third"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conversation after restart (-want +got):\n%s", diff)
	}

	// startFresh: the host archives the top-level files after removing the
	// container; the next worker begins a new session.
	archive := filepath.Join(ws, "sessions", "archive", "2026-12-01T19-41-00.000Z")
	if err := os.MkdirAll(archive, 0o700); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(ws, "sessions", "*.jsonl"))
	for _, f := range files {
		os.Rename(f, filepath.Join(archive, filepath.Base(f)))
	}
	b3 := startSessionBroker(t, model)
	startWorker(t, b3, ws)
	if r := b3.execute(sessionTurn("t4", "fresh")); !r.OK || r.Text != "four" {
		t.Fatalf("turn after fresh start: %+v", r)
	}
	if n := len(model.Requests()[3].Body.Messages); n != 2 {
		t.Errorf("fresh session sent %d messages; want system and user only", n)
	}
	if xs := loadSessions(t, ws); len(xs) != 1 {
		t.Errorf("new session holds %d exchanges; want 1", len(xs))
	}
}

// The final text must be 1–100,000 characters after trimming (docs/session.md, "Process"
// runTurn step 9); otherwise the turn fails and the conversation keeps
// nothing of it.
func TestSessionFinalTextBounds(t *testing.T) {
	tests := []struct {
		name  string
		reply string
		want  wire.SessionResult
	}{
		{"blank", " \n\t ", wire.SessionResult{Error: "Final text bounds exceeded"}},
		{"over 100,000", strings.Repeat("a", rtsandbox.MaxSessionText+1), wire.SessionResult{Error: "Final text bounds exceeded"}},
		{"exactly 100,000", strings.Repeat("a", rtsandbox.MaxSessionText), wire.SessionResult{OK: true, Text: strings.Repeat("a", rtsandbox.MaxSessionText), Files: []wire.ReplyFile{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := fakemodel.New(fakemodel.Reply(tc.reply))
			defer model.Close()
			b := startSessionBroker(t, model)
			b.config = `{"modelApi":"anthropic","model":"claude-test"}` // not streamed: 100,000 characters in 4-rune deltas are slow under -race
			startWorker(t, b, t.TempDir())
			got := b.execute(sessionTurn("t1", "hi"))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

// A turn body that does not validate is answered ok:false under its id,
// so the host need not wait for its deadline; the loop goes on.
func TestSessionInvalidTurnBody(t *testing.T) {
	model := fakemodel.New(fakemodel.Reply("fine"))
	defer model.Close()
	b := startSessionBroker(t, model)
	startWorker(t, b, t.TempDir())
	got := b.executeRaw("bad", []byte(`{"turnId":"bad","author":{"id":"a","name":"A"},"text":"x","memory":"","images":[],"thinking":"huge"}`))
	if got.OK || !strings.Contains(got.Error, "Invalid turn input") {
		t.Errorf("result %+v; want ok:false Invalid turn input", got)
	}
	if r := b.execute(sessionTurn("t2", "again")); !r.OK {
		t.Errorf("next turn %+v; want ok", r)
	}
}

// The 10-minute turn timer aborts a turn whose model never answers.
func TestSessionTurnTimeout(t *testing.T) {
	release := make(chan struct{})
	model := fakemodel.New(fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		<-release
		return fakemodel.Response{Content: "late"}
	}))
	defer model.Close()
	defer close(release)
	b := startSessionBroker(t, model)
	startWorker(t, b, t.TempDir(), func(o *SessionOptions) { o.TurnTimeout = 100 * time.Millisecond })
	got := b.execute(sessionTurn("t1", "hi"))
	if want := (wire.SessionResult{Error: "prompt failed: turn timed out"}); !cmp.Equal(want, got) {
		t.Errorf("result %+v; want %+v", got, want)
	}
}

// An expired MCP session (404) is initialised again, once, and the call
// retried.
func TestSessionMCPReinitialiseOn404(t *testing.T) {
	mcp := fakemcp.New(fakemcp.Tool{Name: "search", Reply: func(json.RawMessage) string { return "hit" }})
	defer mcp.Close()
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("mcp_0_search", map[string]string{"query": "a"})),
		fakemodel.CallTools(fakemodel.Call("mcp_0_search", map[string]string{"query": "b"})),
		fakemodel.Reply("ok"),
	)
	defer model.Close()
	b := startSessionBroker(t, model)
	b.setConfig(toolsConfig, false)
	b.discovery = `{"servers":[{"name":"docs","tools":["search"]}]}`
	b.mcp["docs"] = mcp.URL
	b.expireAt = 2 // the first call initialises; the second finds it expired
	startWorker(t, b, t.TempDir())
	if r := b.execute(sessionTurn("t1", "go")); !r.OK {
		t.Fatalf("result %+v", r)
	}
	var methods []string
	for _, r := range mcp.Requests() {
		methods = append(methods, r.Method)
	}
	want := []string{"initialize", "notifications/initialized", "tools/call", "initialize", "notifications/initialized", "tools/call"}
	if diff := cmp.Diff(want, methods); diff != "" {
		t.Errorf("MCP requests (-want +got):\n%s", diff)
	}
	if r := model.Requests()[2].Last().Text(); r != "hit" {
		t.Errorf("second result %q; want hit", r)
	}
}

// With the OpenAI API the turn goes to /model in the chat shape; the
// turn's images reach the model as image_url parts of the turn's user
// message, which the session /model rule admits (the stand-in rebuilds
// the body with it).
func TestSessionOpenAITurn(t *testing.T) {
	model := fakemodel.New(fakemodel.Reply("seen"))
	defer model.Close()
	b := startSessionBroker(t, model)
	b.config = `{"model":"gpt-test","prompt":"Be kind."}`
	startWorker(t, b, t.TempDir())
	turn := sessionTurn("t1", "look")
	turn.Images = []wire.Image{{Data: "AQID", MIMEType: rtsandbox.MIMEPNG}}
	if r := b.execute(turn); !r.OK || r.Text != "seen" {
		t.Fatalf("result %+v", r)
	}
	req := model.Requests()[0]
	if req.API != fakemodel.OpenAI || req.Body.Model != "gpt-test" {
		t.Errorf("request API %v model %q; want chat completions of gpt-test", req.API, req.Body.Model)
	}
	if want := "[Ann (ann)] look"; req.UserText() != want {
		t.Errorf("prompt %q; want %q", req.UserText(), want)
	}
	if diff := cmp.Diff([]fakemodel.Image{{MIMEType: rtsandbox.MIMEPNG, Data: "AQID"}}, req.Images()); diff != "" {
		t.Errorf("the image did not reach the model as an image part (-want +got):\n%s", diff)
	}
	if last := req.Body.Messages[len(req.Body.Messages)-1]; last.Role != "user" || len(last.Images) != 1 {
		t.Errorf("the image is not on the turn's user message: %+v", last)
	}
	if slices.Contains(b.gotRoutes(), "POST "+wire.RouteAnthropicMessages) {
		t.Errorf("an OpenAI profile called the Anthropic route")
	}
}

// A turn the host aborted meanwhile gets 409 for its result: the worker
// logs it once, pauses, and serves the next turn.
func TestSessionResultRefusedThenNextTurn(t *testing.T) {
	aborted := make(chan struct{})
	var b *sessionBroker
	model := fakemodel.New(
		fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
			b.mu.Lock()
			p := b.pending
			b.pending = nil // the host's abort: the result will find no turn
			b.mu.Unlock()
			p.done <- wire.SessionResult{Error: "Turn cancelled"}
			close(aborted)
			return fakemodel.Response{Content: "too late"}
		}),
		fakemodel.Reply("on time"),
	)
	defer model.Close()
	b = startSessionBroker(t, model)
	w := startWorker(t, b, t.TempDir())
	if r := b.execute(sessionTurn("t1", "slow")); r.Error != "Turn cancelled" {
		t.Fatalf("first turn %+v", r)
	}
	<-aborted
	if r := b.execute(sessionTurn("t2", "next")); !r.OK || r.Text != "on time" {
		t.Fatalf("next turn %+v", r)
	}
	if n := w.log.count(t, logResultFailed); n != 1 {
		t.Errorf("%d %q lines; want 1", n, logResultFailed)
	}
	if !slices.Contains(b.gotRoutes(), "POST "+wire.RouteWorkerResult) {
		t.Errorf("no result posted")
	}
}

// An upstream overload is retried after its retry-after and logged as a
// model retry; the turn then succeeds.
func TestSessionModelRetryLogged(t *testing.T) {
	model := fakemodel.New(fakemodel.Status(statusOverloaded), fakemodel.Reply("back"))
	defer model.Close()
	b := startSessionBroker(t, model)
	b.retryAfter = "0"
	w := startWorker(t, b, t.TempDir())
	if r := b.execute(sessionTurn("t1", "hi")); !r.OK || r.Text != "back" {
		t.Fatalf("result %+v", r)
	}
	if n := w.log.count(t, logModelRetry); n != 1 {
		t.Errorf("%d %q lines; want 1", n, logModelRetry)
	}
}
