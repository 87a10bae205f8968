package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	hostbroker "github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The reference's compaction tests as they apply to this worker. Where the
// reference triggers a "manual" compaction, this worker has no manual
// trigger: the tests cross its threshold instead, with history seeded
// into the session file as earlier turns would have written it.

const hostEngine = "host-compactor"

// compactConfig is a streamed Anthropic profile with a window, a
// compactor engine (or none: "") and a prompt.
func compactConfig(window int, engine, prompt string) string {
	compaction := ""
	if engine != "" {
		compaction = `,"compaction":{"engine":"` + engine + `"}`
	}
	p, _ := json.Marshal(prompt)
	return fmt.Sprintf(`{"modelApi":"anthropic","model":"claude-test","stream":true,"prompt":%s,"timeZone":"UTC","contextWindow":%d%s}`, p, window, compaction)
}

// chatExchange is a whole exchange of reader: a user text and an answer.
func chatExchange(id, reader, user, answer string) sessionExchange {
	return sessionExchange{turnID: id, reader: reader, messages: []message{
		{Role: "user", Content: "[" + reader + " (" + reader + ")] " + user}, {Role: "assistant", Content: answer},
	}}
}

// bigExchanges are n exchanges of ann whose prompts are chars long, each
// starting with its own marker (OLD-1, OLD-2, …).
func bigExchanges(n, chars int) []sessionExchange {
	var xs []sessionExchange
	for i := 1; i <= n; i++ {
		marker := fmt.Sprintf("OLD-%d ", i)
		xs = append(xs, chatExchange(fmt.Sprintf("s%d", i), "ann", marker+strings.Repeat("x", chars-len(marker)), fmt.Sprintf("answer %d", i)))
	}
	return xs
}

// seedSession writes xs into ws's session file as earlier turns would.
func seedSession(t *testing.T, ws string, xs ...sessionExchange) {
	t.Helper()
	s := openSessionStore(sessionsDir(ws), sessionHistoryBudget, time.Now, func(string, error) {})
	for _, x := range xs {
		turn := wire.SessionTurn{TurnID: x.turnID, Author: wire.SessionAuthor{ID: x.reader}}
		if x.privateMemory {
			turn.Memory = "private"
		}
		if err := s.begin(turn); err != nil {
			t.Fatal(err)
		}
		if err := s.finish(x.turnID, true, x.messages); err != nil {
			t.Fatal(err)
		}
	}
}

// compactingModel answers the worker's own summary requests (system
// prompt summaryPrompt) with PI SUMMARY, and the others with replies in
// order, the last repeated.
func compactingModel(replies ...string) *fakemodel.Server {
	answers := make([]fakemodel.Response, len(replies))
	for i, r := range replies {
		answers[i] = fakemodel.Response{Content: r}
	}
	return scriptedModel(fakemodel.Response{Content: "PI SUMMARY"}, answers...)
}

// scriptedModel answers the worker's own summary requests (system prompt
// summaryPrompt) with summary, and the others with answers in order, the
// last repeated.
func scriptedModel(summary fakemodel.Response, answers ...fakemodel.Response) *fakemodel.Server {
	var mu sync.Mutex
	n := 0
	return fakemodel.NewWithOptions(fakemodel.Options{Loop: true}, fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
		if req.System() == summaryPrompt {
			return summary
		}
		mu.Lock()
		defer mu.Unlock()
		r := answers[min(n, len(answers)-1)]
		n++
		return r
	}))
}

// hostCompactor answers docs/protocol.md, "Compaction"'s ok shape with summary and the request's
// firstKeptEntryId, its details {decisions:3, engine}.
func hostCompactor(summary string) func(*http.Request, []byte) (int, string) {
	return func(_ *http.Request, body []byte) (int, string) {
		var req wire.CompactRequest
		json.Unmarshal(body, &req)
		ans, _ := json.Marshal(map[string]any{"ok": true, "compaction": map[string]any{
			"summary": summary, "firstKeptEntryId": req.FirstKeptEntryID, "tokensBefore": req.TokensBefore,
			"details": map[string]any{"decisions": 3, "engine": hostEngine},
		}})
		return http.StatusOK, string(ans)
	}
}

// reportsOf parses the broker's reports.
func reportsOf(t *testing.T, b *sessionBroker) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, r := range b.reports {
		var m map[string]any
		if err := json.Unmarshal([]byte(r), &m); err != nil {
			t.Fatalf("report %q: %v", r, err)
		}
		out = append(out, m)
	}
	return out
}

// compactRequests parses the broker's /compaction/compact bodies as the
// broker does.
func compactRequests(t *testing.T, b *sessionBroker) []wire.CompactRequest {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []wire.CompactRequest
	for _, body := range b.compacts {
		req, err := wire.ParseCompactRequest([]byte(body))
		if err != nil {
			t.Fatalf("compact request: %v", err)
		}
		out = append(out, req)
	}
	return out
}

// roleOf is the role of a compact request's message.
func roleOf(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var m message
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("message %s: %v", raw, err)
	}
	return m.Role
}

// latestCompaction is the session file's latest compaction.
func latestCompaction(t *testing.T, ws string) *compaction {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(ws, "sessions", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("session files %v", files)
	}
	data, _ := os.ReadFile(files[0])
	log, err := parseSession(data)
	if err != nil || log.compacted == nil {
		t.Fatalf("no compaction in the session file (%v)", err)
	}
	return log.compacted
}

// compacting is a worker on a stand-in broker over a seeded workspace,
// with a model that writes PI SUMMARY when asked for a summary.
type compacting struct {
	t     *testing.T
	ws    string
	model *fakemodel.Server
	b     *sessionBroker
	w     *runningWorker
}

// startCompacting seeds a workspace with xs and starts the worker with
// the profile config and the host compactor (nil: none).
func startCompacting(t *testing.T, xs []sessionExchange, config string, compactor func(*http.Request, []byte) (int, string), opts ...func(*SessionOptions)) *compacting {
	t.Helper()
	return startCompactingWith(t, compactingModel("compacted", "again"), xs, config, compactor, opts...)
}

// startCompactingWith is startCompacting with model, which it closes.
func startCompactingWith(t *testing.T, model *fakemodel.Server, xs []sessionExchange, config string, compactor func(*http.Request, []byte) (int, string), opts ...func(*SessionOptions)) *compacting {
	t.Helper()
	c := &compacting{t: t, ws: t.TempDir(), model: model}
	t.Cleanup(c.model.Close)
	seedSession(t, c.ws, xs...)
	c.b = startSessionBroker(t, c.model)
	c.b.config, c.b.compactor = config, compactor
	c.w = startWorker(t, c.b, c.ws, opts...)
	return c
}

// mustTurn runs ann's turn and fails the test unless it answers ok.
func (c *compacting) mustTurn(id, text string) wire.SessionResult {
	c.t.Helper()
	r := c.b.execute(sessionTurn(id, text))
	if !r.OK {
		c.t.Fatalf("turn %s: %+v\n%s", id, r, c.w.log.String())
	}
	return r
}

// The tiers of docs/session.md, "Compaction in the worker", and the bypass rules.
func TestCompactionTiers(t *testing.T) {
	worker, host := engineWorker, engineHost
	tests := []struct {
		name          string
		window        int
		reserve       int
		last          *lastCompaction
		wantTrigger   int
		wantReserve   int
		before        int
		wantBypass    string
		wantBypassSet bool
	}{
		// The reference's test "With a compactor configured, WINDOW − reserveTokens ==
		// 300,000" and "Without a compactor … the 1M window at 300k".
		{name: "1M window, soft tier", window: 1_000_000, wantTrigger: 300_000, wantReserve: 700_000},
		{name: "default window, native", wantTrigger: 200_000 - 16_384, wantReserve: 16_384},
		{name: "small window, quarter reserve", window: 8_000, wantTrigger: 6_000, wantReserve: 2_000},
		{name: "native at the soft tier", window: 316_384, wantTrigger: 300_000, wantReserve: 16_384},
		{name: "left within the headroom", window: 1_000_000, last: &lastCompaction{host, 250_000}, wantTrigger: 300_000},
		// The reference's test "A prior host compaction that left about 280k tokens … the
		// next trigger is 500,000".
		{name: "left 280k", window: 1_000_000, last: &lastCompaction{host, 280_000}, wantTrigger: 500_000},
		{name: "left 280k, native under the hard tier", window: 400_000, last: &lastCompaction{host, 280_000}, wantTrigger: 400_000 - 16_384},
		{name: "worker left over 450k", window: 1_000_000, last: &lastCompaction{worker, 450_001}, wantTrigger: 1_000_000 - 16_384},
		{name: "host left over 450k", window: 1_000_000, last: &lastCompaction{host, 450_001}, wantTrigger: 500_000},
		// The reference's test "tokensBefore = 500,001 → … above the hard ceiling".
		{name: "bypass above the hard tier", window: 1_000_000, before: 500_001, wantBypass: "above the hard ceiling", wantBypassSet: true, wantTrigger: 300_000},
		{name: "no bypass at the hard tier", window: 1_000_000, before: 500_000, wantTrigger: 300_000},
		{name: "bypass after a big host summary", window: 1_000_000, last: &lastCompaction{host, 500_001}, before: 1,
			wantBypass: "the host compactor's last summary left more than the hard ceiling", wantBypassSet: true, wantTrigger: 500_000},
		{name: "no bypass after a big worker summary", window: 1_000_000, last: &lastCompaction{worker, 500_001}, before: 1, wantTrigger: 1_000_000 - 16_384},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTiers(tc.window, tc.reserve)
			if got := tr.trigger(tc.last); got != tc.wantTrigger {
				t.Errorf("trigger = %d; want %d", got, tc.wantTrigger)
			}
			if tc.wantReserve != 0 && tr.reserveTokens(tc.last) != tc.wantReserve {
				t.Errorf("reserveTokens = %d; want %d", tr.reserveTokens(tc.last), tc.wantReserve)
			}
			if tr.window-tr.reserveTokens(tc.last) != tr.trigger(tc.last) {
				t.Error("window − reserveTokens is not the trigger")
			}
			reason, ok := bypass(tc.before, tc.last)
			if ok != tc.wantBypassSet || reason != tc.wantBypass {
				t.Errorf("bypass = %q, %v; want %q, %v", reason, ok, tc.wantBypass, tc.wantBypassSet)
			}
		})
	}
}

// The reference's test "Round trip" and "reopened by continueRecent": over the soft tier
// of a 1M window the host compactor's summary replaces the older
// exchanges; the request has the docs/protocol.md, "The session protocol" shape; the end report says engine
// extension and the next trigger 300,000, and arrives before the result;
// a restarted worker continues from the summary.
func TestCompactionHostRoundTrip(t *testing.T) {
	// 4 × 80k tokens: over 300k
	c := startCompacting(t, bigExchanges(4, 320_000), compactConfig(1_000_000, hostEngine, "Be brief."), hostCompactor("HOST SUMMARY"))
	b, w, ws, model := c.b, c.w, c.ws, c.model
	c.mustTurn("t5", "what now?")

	reqs := compactRequests(t, b)
	if len(reqs) != 1 {
		t.Fatalf("%d compact requests; want 1", len(reqs))
	}
	req := reqs[0]
	if req.Reason != wire.CompactThreshold || req.TokensBefore <= softTier || req.FirstKeptEntryID != "s4" || req.IsSplitTurn ||
		len(req.MessagesToSummarize) != 6 || len(req.KeptMessages) != 3 || len(req.TurnPrefixMessages) != 0 ||
		req.ReadFiles == nil || req.ModifiedFiles == nil || req.PreviousSummary != "" {
		t.Errorf("compact request reason %q tokensBefore %d firstKept %q split %v summarize %d kept %d prefix %d",
			req.Reason, req.TokensBefore, req.FirstKeptEntryID, req.IsSplitTurn, len(req.MessagesToSummarize), len(req.KeptMessages), len(req.TurnPrefixMessages))
	}
	for _, m := range append(req.MessagesToSummarize, req.KeptMessages...) {
		if roleOf(t, m) == "" {
			t.Errorf("message without a role: %s", m)
		}
	}
	reports := reportsOf(t, b)
	if len(reports) != 1 {
		t.Fatalf("reports %v; want one", reports)
	}
	r := reports[0]
	if r["type"] != "end" || r["reason"] != wire.CompactThreshold || r["engine"] != engineHost || r["aborted"] != false || r["willRetry"] != false ||
		r["nextCompactionAt"] != float64(300_000) || r["tokensAfter"] == nil || r["contextAfter"] == nil || r["tokensBefore"] != float64(req.TokensBefore) {
		t.Errorf("end report %v", r)
	}
	routes := b.gotRoutes()
	report, result := indexOf(routes, "POST "+wire.RouteCompactionReport), indexOf(routes, "POST "+wire.RouteWorkerResult)
	if report < 0 || result < 0 || report > result {
		t.Errorf("the report does not come before the result: %v", routes)
	}
	last := model.Requests()[len(model.Requests())-1].Raw
	if !bytes.Contains(last, []byte("HOST SUMMARY")) || !bytes.Contains(last, []byte("OLD-4")) || bytes.Contains(last, []byte("OLD-3")) {
		t.Errorf("the request after compaction does not hold the summary and the kept exchange only")
	}
	lc := latestCompaction(t, ws)
	if lc.summary != "HOST SUMMARY" || lc.engine != engineHost || lc.firstKept != "s4" || string(lc.details) != `{"decisions":3,"engine":"host-compactor"}` {
		t.Errorf("session compaction %+v details %s", lc, lc.details)
	}
	if n := w.log.count(t, logCompacted); n != 1 {
		t.Errorf("%d %q lines; want 1", n, logCompacted)
	}

	// Reopen: a new worker continues from the summary, under the tier the
	// last compaction leaves (it left little: still 300k).
	w.stop(t)
	b2 := startSessionBroker(t, model)
	b2.config = b.config
	b2.compactor = b.compactor
	startWorker(t, b2, ws)
	if r := b2.execute(sessionTurn("t6", "still there?")); !r.OK {
		t.Fatalf("turn after restart %+v", r)
	}
	var roles []string
	next := model.Requests()[len(model.Requests())-1].Body.Messages
	for _, m := range next[1:] {
		roles = append(roles, m.Role+": "+prefix(m.Text(), 28))
	}
	want := []string{
		"user: " + prefix(summaryHeader+"HOST SUMMARY", 28),
		"user: [ann (ann)] OLD-4 xxxxxxxxxx", "assistant: answer 4",
		"user: [Ann (ann)] what now?", "assistant: compacted",
		"user: [Ann (ann)] still there?",
	}
	if diff := cmp.Diff(want, roles); diff != "" {
		t.Errorf("conversation after restart (-want +got):\n%s", diff)
	}
	if len(compactRequests(t, b2)) != 0 {
		t.Error("the restarted worker compacted again")
	}
}

func prefix(s string, n int) string { return s[:min(n, len(s))] }

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// The reference's test "A last reply reporting 360k input tokens (about 240k of fixed
// prompt and tools) → contextAfter > 250,000 and nextCompactionAt ==
// 500,000", with the fixed part a long operator prompt (this estimator
// reads no reported usage), and without a compactor (the reference's test "Without a
// compactor": the tiers still put the 1M window at 300k, and the
// worker's own summary runs).
func TestCompactionNextTriggerAfterLargeFixedPrompt(t *testing.T) {
	// 4 × 30k tokens of history, 240k of prompt
	c := startCompacting(t, bigExchanges(4, 120_000), compactConfig(1_000_000, "", strings.Repeat("p", 960_000)), nil)
	b, ws := c.b, c.ws
	c.mustTurn("t5", "go on")
	if n := len(compactRequests(t, b)); n != 0 {
		t.Errorf("%d compact requests without a compactor", n)
	}
	reports := reportsOf(t, b)
	if len(reports) != 1 {
		t.Fatalf("reports %v", reports)
	}
	r := reports[0]
	if after, _ := r["contextAfter"].(float64); r["engine"] != engineWorker || after <= 250_000 || r["nextCompactionAt"] != float64(500_000) {
		t.Errorf("end report %v; want engine pi, contextAfter over 250,000, nextCompactionAt 500,000", r)
	}
	if lc := latestCompaction(t, ws); lc.summary != "PI SUMMARY" || lc.engine != engineWorker {
		t.Errorf("compaction %+v", lc)
	}
}

// The reference's test "Fallbacks to Pi's summary", as the worker sees them: any answer
// but a valid ok one (a declined compactor, a broker without the routes,
// a wrong firstKeptEntryId, an invalid body) leads to the worker's own
// summary, a fallback line and an end report with engine pi.
func TestCompactionFallbacks(t *testing.T) {
	ok := hostCompactor("HOST SUMMARY")
	tests := []struct {
		name      string
		compactor func(*http.Request, []byte) (int, string)
		fallback  string
	}{
		{"declined", func(*http.Request, []byte) (int, string) {
			return 200, `{"ok":false,"fallback":"the compactor declined"}`
		}, "the compactor declined"},
		{"took too long", func(*http.Request, []byte) (int, string) {
			return 200, `{"ok":false,"fallback":"the compactor took over 1000 ms"}`
		}, "the compactor took over 1000 ms"},
		{"no routes", nil, "the broker answered 404"},
		{"turn ended", func(*http.Request, []byte) (int, string) { return 410, "Turn ended" }, "the broker answered 410"},
		{"wrong firstKeptEntryId", func(r *http.Request, body []byte) (int, string) {
			_, ans := ok(r, body)
			return 200, strings.Replace(ans, `"firstKeptEntryId":"s4"`, `"firstKeptEntryId":"s1"`, 1)
		}, errCompactAnswer.Error()},
		{"empty summary", func(*http.Request, []byte) (int, string) {
			return 200, `{"ok":true,"compaction":{"summary":"","firstKeptEntryId":"s4","tokensBefore":1,"details":{"engine":"host-compactor"}}}`
		}, errCompactAnswer.Error()},
		{"another engine", func(r *http.Request, body []byte) (int, string) {
			_, ans := ok(r, body)
			return 200, strings.Replace(ans, hostEngine, "other", 1)
		}, errCompactAnswer.Error()},
		{"not JSON", func(*http.Request, []byte) (int, string) { return 200, "<html>" }, errCompactAnswer.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// 20k tokens over the 15,000 of a 20k window
			c := startCompacting(t, bigExchanges(4, 20_000), compactConfig(20_000, hostEngine, "Be brief."), tc.compactor)
			b, w, ws := c.b, c.w, c.ws
			c.mustTurn("t5", "go on")
			if lc := latestCompaction(t, ws); lc.summary != "PI SUMMARY" || lc.engine != engineWorker {
				t.Errorf("compaction %+v; want the worker's", lc)
			}
			var fallbacks []string
			for _, l := range w.log.lines(t) {
				if l["msg"] == logCompactFallback {
					fallbacks = append(fallbacks, fmt.Sprint(l["engine"], ": ", l["fallback"]))
				}
			}
			if diff := cmp.Diff([]string{hostEngine + ": " + tc.fallback}, fallbacks); diff != "" {
				t.Errorf("fallback lines (-want +got):\n%s", diff)
			}
			if rs := reportsOf(t, b); len(rs) != 1 || rs[0]["engine"] != engineWorker || rs[0]["nextCompactionAt"] != float64(15_000) {
				t.Errorf("reports %v; want one end with engine pi", rs)
			}
		})
	}
}

// The reference's test "tokensBefore = 500,001 → … the compactor is called 0 times; …
// compaction skips the extension for Pi's summary {reason: above the hard
// ceiling, tokensBefore}".
func TestCompactionBypassAboveHardTier(t *testing.T) {
	// 4 × 130k tokens
	c := startCompacting(t, bigExchanges(4, 520_000), compactConfig(1_000_000, hostEngine, "Be brief."), hostCompactor("HOST SUMMARY"))
	b, w, ws := c.b, c.w, c.ws
	c.mustTurn("t5", "go on")
	if n := len(compactRequests(t, b)); n != 0 {
		t.Errorf("the host compactor was asked %d times", n)
	}
	reports := reportsOf(t, b)
	if len(reports) != 2 || reports[0]["type"] != "bypass" || reports[0]["reason"] != "above the hard ceiling" ||
		reports[0]["tokensBefore"].(float64) <= hardTier || reports[1]["type"] != "end" || reports[1]["engine"] != engineWorker {
		t.Errorf("reports %v; want a bypass then an end by the worker", reports)
	}
	if n := w.log.count(t, logCompactBypass); n != 1 {
		t.Errorf("%d bypass lines", n)
	}
	if lc := latestCompaction(t, ws); lc.summary != "PI SUMMARY" {
		t.Errorf("compaction %+v", lc)
	}
}

// The reference's test "Aborting the compaction's signal while the host compactor hangs":
// the turn's timer ends the compaction; the compactor's request is
// cancelled at once, the turn fails as timed out, an aborted end is
// reported and no compaction is recorded.
func TestCompactionAbort(t *testing.T) {
	cancelled := make(chan time.Time, 1)
	hang := func(r *http.Request, _ []byte) (int, string) {
		<-r.Context().Done()
		cancelled <- time.Now()
		return 200, `{"ok":false,"fallback":"the compaction was aborted"}`
	}
	c := startCompacting(t, bigExchanges(4, 20_000), compactConfig(20_000, hostEngine, "Be brief."), hang,
		func(o *SessionOptions) { o.TurnTimeout = 300 * time.Millisecond })
	b, w, ws, model := c.b, c.w, c.ws, c.model
	start := time.Now()
	if r := b.execute(sessionTurn("t5", "go on")); r.OK || r.Error != "prompt failed: turn timed out" {
		t.Errorf("turn %+v; want prompt failed: turn timed out", r)
	}
	select {
	case at := <-cancelled:
		if d := at.Sub(start); d > 1300*time.Millisecond {
			t.Errorf("the compactor's request ended %v after the turn began; want about its 300 ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the compactor's request was never cancelled")
	}
	rs := reportsOf(t, b)
	if len(rs) != 1 || rs[0]["type"] != "end" || rs[0]["aborted"] != true || rs[0]["error"] == nil {
		t.Errorf("reports %v; want one aborted end", rs)
	}
	if n := w.log.count(t, logCompactFallback); n != 0 {
		t.Errorf("an aborted compaction fell back to the worker's summary")
	}
	data, _ := os.ReadFile(filepath.Join(w.sessionFile(t, ws)))
	if bytes.Contains(data, []byte(`"type":"compaction"`)) {
		t.Error("an aborted compaction was recorded")
	}
	for _, r := range model.Requests() {
		if r.System() == summaryPrompt {
			t.Error("the worker summarised after the abort")
		}
	}
}

// sessionFile is the one session file of ws.
func (w *runningWorker) sessionFile(t *testing.T, ws string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(ws, "sessions", "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("session files %v", files)
	}
	return files[0]
}

// The reference's test "[SEC] Host compactor input" and "[SEC] Pi's own summary": after a
// private tool exchange, large public prompts and a private exchange at
// the tail, the one compaction request's kept messages hold the
// placeholder and the whole request none of the secrets; the worker's
// own summary request (through the real broker) holds none either, and
// neither does the summary the next reader gets.
func TestSecCompactionInputHoldsNoSecrets(t *testing.T) {
	private := func(id string) sessionExchange {
		return sessionExchange{turnID: id, reader: "ann", privateMemory: true, messages: []message{
			{Role: "user", Content: "[Ann (ann-actor)] what did I say?"},
			{Role: "assistant", Content: "Let me look up " + argSecret, ToolCalls: []wire.ToolCall{{ID: "toolu_" + id, Type: "function",
				Function: wire.FunctionCall{Name: "host_recall_person", Arguments: `{"query":"` + argSecret + `"}`}}}},
			{Role: "tool", ToolCallID: "toolu_" + id, Content: "ann said " + resultSecret, PrivateTo: "ann"},
			{Role: "assistant", Content: "You said something, privately."},
		}}
	}
	history := []sessionExchange{private("p1")}
	for i := 1; i <= 3; i++ {
		history = append(history, chatExchange(fmt.Sprintf("b%d", i), "bo", strings.Repeat("public ", 20_000/7), "ok"))
	}
	history = append(history, private("p2"))

	t.Run("host compactor", func(t *testing.T) {
		ws := t.TempDir()
		seedSession(t, ws, history...)
		model := compactingModel("done")
		defer model.Close()
		b := startSessionBroker(t, model)
		b.config = compactConfig(20_000, hostEngine, "Be brief.")
		b.compactor = hostCompactor("HOST SUMMARY")
		startWorker(t, b, ws)
		if r := b.execute(annTurn("t1", "hello", "")); !r.OK {
			t.Fatalf("turn %+v", r)
		}
		b.mu.Lock()
		bodies := append([]string(nil), b.compacts...)
		b.mu.Unlock()
		if len(bodies) != 1 {
			t.Fatalf("%d compact requests; want 1", len(bodies))
		}
		if got := secretsIn([]byte(bodies[0])); len(got) > 0 {
			t.Errorf("[SEC] the compact request holds %v", got)
		}
		req := compactRequests(t, b)[0]
		kept, _ := json.Marshal(req.KeptMessages)
		if !bytes.Contains(kept, []byte("private memory, hidden")) {
			t.Errorf("kept messages lack the placeholder: %s", prefix(string(kept), 400))
		}
	})

	t.Run("own summary through the real broker", func(t *testing.T) {
		ws := t.TempDir()
		seedSession(t, ws, history...)
		model := fakemodel.NewWithOptions(fakemodel.Options{Key: realModelKey, Loop: true}, fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if req.System() == summaryPrompt {
				return fakemodel.Response{Content: "PI SUMMARY"}
			}
			return fakemodel.Response{Content: "done"}
		}))
		defer model.Close()
		r := startRealSession(t, model, nil, ws, func(c *hostbroker.SessionConfig) { c.Worker.ContextWindow = 20_000 })
		r.mustRun(annTurn("t1", "hello", ""))
		r.mustRun(boTurn("t2", "and me?"))
		var summaries int
		for i, req := range model.Requests() {
			if req.System() == summaryPrompt {
				summaries++
				if got := secretsIn(req.Raw); len(got) > 0 {
					t.Errorf("[SEC] the summary request holds %v", got)
				}
			}
			if i == len(model.Requests())-1 && len(secretsIn(req.Raw)) > 0 {
				t.Errorf("[SEC] bo's request holds %v", secretsIn(req.Raw))
			}
		}
		if summaries != 1 {
			t.Errorf("%d summary requests; want 1", summaries)
		}
		if lc := latestCompaction(t, ws); lc.summary != "PI SUMMARY" {
			t.Errorf("compaction %+v", lc)
		}
	})
}

// A session file's compaction record drops all but its kept exchanges;
// invalid records and records in a version-1 file are skipped.
func TestParseSessionCompaction(t *testing.T) {
	record := func(keep int, summary, engine string) string {
		return fmt.Sprintf(`{"type":"compaction","turnId":"c","summary":%q,"firstKeptEntryId":"b","keep":%d,"engine":%q,"contextAfter":7}`+"\n", summary, keep, engine)
	}
	tests := []struct {
		name        string
		data        string
		want        []string
		wantSummary string
	}{
		{"keep one", testHeader + "\n" + turnLines("a", "1", "x") + turnLines("b", "2", "y") + record(1, "S", engineHost) + turnLines("c", "3", "z"), []string{"2", "3"}, "S"},
		{"keep none", testHeader + "\n" + turnLines("a", "1", "x") + record(0, "S", engineWorker) + turnLines("c", "3", "z"), []string{"3"}, "S"},
		{"keep more than there are", testHeader + "\n" + turnLines("a", "1", "x") + record(5, "S", engineWorker), []string{"1"}, "S"},
		{"the latest wins", testHeader + "\n" + turnLines("a", "1", "x") + record(1, "S1", engineWorker) + turnLines("b", "2", "y") + record(1, "S2", engineHost), []string{"2"}, "S2"},
		{"empty summary", testHeader + "\n" + turnLines("a", "1", "x") + record(0, "", engineWorker), []string{"1"}, ""},
		{"negative keep", testHeader + "\n" + turnLines("a", "1", "x") + record(-1, "S", engineWorker), []string{"1"}, ""},
		{"unknown engine", testHeader + "\n" + turnLines("a", "1", "x") + record(0, "S", "other"), []string{"1"}, ""},
		{"summary too long", testHeader + "\n" + turnLines("a", "1", "x") + record(0, strings.Repeat("s", maxSummary+1), engineWorker), []string{"1"}, ""},
		{"version 1", testHeaderV1 + "\n" + turnLines("a", "1", "x") + record(0, "S", engineWorker), []string{"1"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, err := parseSession([]byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, userTexts(log.exchanges)); diff != "" {
				t.Errorf("exchanges (-want +got):\n%s", diff)
			}
			summary := ""
			if log.compacted != nil {
				summary = log.compacted.summary
			}
			if summary != tc.wantSummary {
				t.Errorf("summary %q; want %q", summary, tc.wantSummary)
			}
		})
	}
}

// The answer of /compaction/compact, checked field by field (docs/protocol.md, "The session protocol").
func TestParseCompactAnswer(t *testing.T) {
	valid := `{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"k","tokensBefore":10,"estimatedTokensAfter":2,"details":{"engine":"e","n":1}}}`
	tests := []struct {
		name    string
		body    string
		want    string // summary, or the error text
		details string
	}{
		{"valid", valid, "S", `{"engine":"e","n":1}`},
		{"without estimate", strings.Replace(valid, `"estimatedTokensAfter":2,`, "", 1), "S", `{"engine":"e","n":1}`},
		{"fallback", `{"ok":false,"fallback":"the compactor declined"}`, "the compactor declined", ""},
		{"fallback without reason", `{"ok":false}`, "the broker gave no reason", ""},
		{"fallback cut", `{"ok":false,"fallback":"` + strings.Repeat("f", 3000) + `"}`, strings.Repeat("f", maxFallbackLog), ""},
		{"ok missing", `{"compaction":{}}`, errCompactAnswer.Error(), ""},
		{"not an object", `[]`, errCompactAnswer.Error(), ""},
		{"wrong first kept", strings.Replace(valid, `"k"`, `"x"`, 1), errCompactAnswer.Error(), ""},
		{"tokensBefore fractional", strings.Replace(valid, `10`, `10.5`, 1), errCompactAnswer.Error(), ""},
		{"tokensBefore negative", strings.Replace(valid, `10`, `-1`, 1), errCompactAnswer.Error(), ""},
		{"tokensBefore unsafe", strings.Replace(valid, `10`, `9007199254740993`, 1), errCompactAnswer.Error(), ""},
		{"tokensBefore a string", strings.Replace(valid, `10`, `"10"`, 1), errCompactAnswer.Error(), ""},
		{"estimate null", strings.Replace(valid, `2,`, `null,`, 1), errCompactAnswer.Error(), ""},
		{"details absent", strings.Replace(valid, `,"details":{"engine":"e","n":1}`, "", 1), errCompactAnswer.Error(), ""},
		{"details an array", strings.Replace(valid, `{"engine":"e","n":1}`, `[]`, 1), errCompactAnswer.Error(), ""},
		{"details too big", strings.Replace(valid, `"n":1`, `"n":"`+strings.Repeat("d", maxCompactDetails)+`"`, 1), errCompactAnswer.Error(), ""},
		{"summary not a string", strings.Replace(valid, `"S"`, `1`, 1), errCompactAnswer.Error(), ""},
		{"summary too long", strings.Replace(valid, `"S"`, `"`+strings.Repeat("s", maxSummary+1)+`"`, 1), errCompactAnswer.Error(), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCompactAnswer([]byte(tc.body), "k", "e")
			text := got.summary
			if err != nil {
				text = err.Error()
			}
			if text != tc.want || string(got.details) != tc.details {
				t.Errorf("got %q details %s, %v; want %q details %s", got.summary, got.details, err, tc.want, tc.details)
			}
		})
	}
}

func FuzzParseCompactAnswer(f *testing.F) {
	f.Add([]byte(`{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"k","tokensBefore":10,"details":{"engine":"e"}}}`))
	f.Add([]byte(`{"ok":false,"fallback":"the request is over 1024 bytes"}`))
	f.Add([]byte(`{"ok":true,"compaction":{"summary":"S","firstKeptEntryId":"k","tokensBefore":1e400}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseCompactAnswer(data, "k", "e")
		if err != nil {
			if got.summary != "" || rtsandbox.UTF16Len(err.Error()) > maxFallbackLog {
				t.Fatalf("error %q with summary %q", err, got.summary)
			}
			return
		}
		if got.summary == "" || rtsandbox.UTF16Len(got.summary) > maxSummary || len(got.details) > maxCompactDetails {
			t.Fatalf("accepted %+v", got)
		}
		if _, ok := object(got.details); !ok {
			t.Fatalf("details %s not an object", got.details)
		}
	})
}

// The transcript of the worker's own summary: one paragraph per message,
// calls with their arguments, results under their tool's name; a long
// transcript loses its start, never a character in two.
func TestSummaryProjection(t *testing.T) {
	msgs := []message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", Content: "looking", ToolCalls: []wire.ToolCall{{ID: "c", Type: "function", Function: wire.FunctionCall{Name: "host_x", Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: "c", Content: "r"},
		{Role: "assistant", Content: "bye"},
	}
	want := "[user] hi\n\n[assistant] looking\n\n[assistant calls host_x {}]\n\n[host_x result] r\n\n[assistant] bye"
	if got := summaryProjection(msgs, 1<<20); got != want {
		t.Errorf("transcript %q; want %q", got, want)
	}
	long := summaryProjection([]message{{Role: "user", Content: strings.Repeat("é", 1000)}}, 100)
	if len(long) > 100 || !strings.HasPrefix(long, "[The start of the conversation is left out.]\n") || !strings.HasSuffix(long, "é") || !utf8.ValidString(long) {
		t.Errorf("cut transcript %q (%d bytes)", long, len(long))
	}
}

// A conversation with more messages than the model route takes is
// compacted too (the chat-completions route takes 128), instead of
// losing its oldest exchanges to the safety net unsummarised.
func TestCompactionOverMessageBound(t *testing.T) {
	var xs []sessionExchange
	for i := range 70 {
		xs = append(xs, chatExchange(fmt.Sprintf("s%d", i), "ann", fmt.Sprintf("question %d", i), "answer"))
	}
	c := startCompacting(t, xs, `{"modelApi":"openai","model":"gpt-test","prompt":"Be brief.","timeZone":"UTC"}`, nil)
	ws, model := c.ws, c.model
	c.mustTurn("t1", "go on")
	last := model.Requests()[len(model.Requests())-1].Body.Messages
	if n := len(last); n > rtsandbox.MaxModelMessages || n < rtsandbox.MaxModelMessages/2 {
		t.Errorf("request of %d messages; want the summary and about half the route's bound", n)
	}
	if !strings.Contains(last[1].Text(), "PI SUMMARY") || !strings.Contains(last[len(last)-2].Text(), "answer") {
		t.Errorf("request starts %q; want the summary, then the kept exchanges", last[1].Text())
	}
	if lc := latestCompaction(t, ws); lc.engine != engineWorker {
		t.Errorf("compaction %+v", lc)
	}
}

// The request and reports go out as JSON.stringify writes them (package
// jsonjs), with the root package's shapes: <, > and & and the line
// separators as they are, so a body's size is what the reference
// measures, and [] for the lists the worker leaves empty.
func TestCompactionWireIsJSONStringify(t *testing.T) {
	text := "a <b> & c\u2028"
	req, err := compactRequest(wire.CompactThreshold, 7, "k", []message{{Role: "user", Content: text}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body any
		want string
	}{
		{"request", req, `{"reason":"threshold","tokensBefore":7,"firstKeptEntryId":"k","isSplitTurn":false,` +
			`"messagesToSummarize":[{"role":"user","content":"a <b> & c` + "\u2028" + `"}],"turnPrefixMessages":[],"keptMessages":[],"readFiles":[],"modifiedFiles":[]}`},
		{"bypass report", wire.CompactionReport{Type: wire.ReportBypass, Reason: "<why>", TokensBefore: int64p(9)},
			`{"type":"bypass","reason":"<why>","tokensBefore":9}`},
		{"end report", wire.CompactionReport{Type: wire.ReportEnd, Reason: wire.CompactThreshold, Engine: engineWorker,
			TokensBefore: int64p(9), TokensAfter: int64p(0), Error: text},
			`{"type":"end","reason":"threshold","aborted":false,"willRetry":false,"engine":"pi","tokensBefore":9,"tokensAfter":0,"error":"a <b> & c` + "\u2028" + `"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jsonjs.Marshal(tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("wire (-want +got):\n%s", diff)
			}
		})
	}
}
