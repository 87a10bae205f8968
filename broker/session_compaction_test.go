package broker_test

// The host compaction routes of docs/protocol.md, "Compaction": every step of POST
// /compaction/compact as a named test, the report route, and the
// compactor's constructor rules. The timing tests run in a synctest
// bubble and call the handler directly (no socket), so a 1 s or 2 s
// timeout passes in no real time; TestCompactionOverSocket covers the
// listener.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/wire"
)

// partyChannel is the bound channel of the reference's fixture.
const partyChannel rtsandbox.ChannelKey = "discord:party"

const hostEngine = "host-compactor"

// fakeCompactor is a Compactor whose answer is fn; it records its calls.
type fakeCompactor struct {
	engine   string
	timeout  time.Duration
	maxBytes int64
	fn       func(ctx context.Context, req wire.CompactRequest) (*wire.Compaction, error)

	mu    sync.Mutex
	calls []compactCall
}

type compactCall struct {
	Req     wire.CompactRequest
	Channel rtsandbox.ChannelKey
}

func (c *fakeCompactor) Engine() string         { return c.engine }
func (c *fakeCompactor) Timeout() time.Duration { return c.timeout }
func (c *fakeCompactor) MaxRequestBytes() int64 { return c.maxBytes }

func (c *fakeCompactor) Compact(ctx context.Context, req wire.CompactRequest, ch rtsandbox.ChannelKey) (*wire.Compaction, error) {
	c.mu.Lock()
	c.calls = append(c.calls, compactCall{req, ch})
	c.mu.Unlock()
	return c.fn(ctx, req)
}

func (c *fakeCompactor) called() []compactCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]compactCall(nil), c.calls...)
}

// newCompactor answers HOST SUMMARY with details {decisions:3}, with a
// 120 s timeout and the 32 MiB default request bound.
func newCompactor() *fakeCompactor {
	return &fakeCompactor{engine: hostEngine, timeout: 120 * time.Second, maxBytes: wire.DefaultCompactorRequest,
		fn: func(_ context.Context, req wire.CompactRequest) (*wire.Compaction, error) {
			after := int64(40)
			return &wire.Compaction{Summary: "HOST SUMMARY", FirstKeptEntryID: req.FirstKeptEntryID,
				TokensBefore: req.TokensBefore, EstimatedTokensAfter: &after, Details: map[string]any{"decisions": 3}}, nil
		}}
}

// compactFixture is a Session without a socket, served by calling its
// handler, with the log captured.
type compactFixture struct {
	t    *testing.T
	sess *broker.Session
	logs *syncbuf.Buffer
}

// newCompactFixture builds the session with comp (nil: no compactor);
// mod adjusts its configuration.
func newCompactFixture(t *testing.T, comp broker.Compactor, mod func(*broker.SessionConfig)) *compactFixture {
	t.Helper()
	f := &compactFixture{t: t, logs: &syncbuf.Buffer{}}
	b, err := broker.New(broker.Config{ModelURL: ep("https://model.example"), Model: hostModel,
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return hostSecret, nil },
		Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.SessionConfig{Broker: b}
	if comp != nil {
		cfg.Compactor = comp
	}
	if mod != nil {
		mod(&cfg)
	}
	if f.sess, err = broker.NewSession(cfg); err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { f.sess.Close() })
	return f
}

// bind binds a turn on discord:party whose deadline is left from now;
// cancel aborts the turn.
func (f *compactFixture) bind(left time.Duration) (release func(), cancel context.CancelFunc) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	release, err := f.sess.Bind(ctx, wire.SessionBinding{
		Binding:  rtsandbox.Binding{Channel: partyChannel, Speaker: rtsandbox.Speaker{ID: "ann", Name: "Ann"}},
		Thinking: "high", Deadline: time.Now().Add(left),
	})
	if err != nil {
		f.t.Fatalf("Bind: %v", err)
	}
	f.t.Cleanup(func() { release(); cancel() })
	return release, cancel
}

// serve sends one request to the handler; size -1 sends the body without
// a length.
func (f *compactFixture) serve(method, target string, body io.Reader, size int64) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://broker/", body)
	r.RequestURI = target
	if size != 0 {
		r.ContentLength = size
	}
	w := httptest.NewRecorder()
	f.sess.ServeHTTP(w, r)
	return w
}

func (f *compactFixture) post(target, body string) *httptest.ResponseRecorder {
	return f.serve(http.MethodPost, target, strings.NewReader(body), int64(len(body)))
}

// compact posts a compact request and decodes the answer.
func (f *compactFixture) compact(body string) wire.CompactResponse {
	f.t.Helper()
	w := f.post(wire.RouteCompactionCompact, body)
	return decodeCompact(f.t, w)
}

func decodeCompact(t *testing.T, w *httptest.ResponseRecorder) wire.CompactResponse {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("compact = %d %q; want 200", w.Code, w.Body.String())
	}
	r, err := wire.ParseCompactResponse(w.Body.Bytes())
	if err != nil {
		t.Fatalf("compact answer %q: %v", w.Body.String(), err)
	}
	return r
}

// lines returns the log lines with message msg, without time and level.
func (f *compactFixture) lines(msg string) []map[string]any {
	return logLines(f.logs.String(), msg)
}

func logLines(logs, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			delete(m, "time")
			out = append(out, m)
		}
	}
	return out
}

// compactBody is a manual compact request keeping entry first.
func compactBody(first string) string {
	r := wire.CompactRequest{Reason: wire.CompactManual, TokensBefore: 480000, FirstKeptEntryID: first,
		MessagesToSummarize: []json.RawMessage{json.RawMessage(`{"role":"user","content":"plan the garden"}`)},
		KeptMessages:        []json.RawMessage{json.RawMessage(`{"role":"assistant","content":"beds first"}`)}}
	data, _ := json.Marshal(r)
	return string(data)
}

var body7 = compactBody("e7")

// wantFallback checks the answer and the fallback log line.
func (f *compactFixture) wantFallback(r wire.CompactResponse, reason string) {
	f.t.Helper()
	if r.OK || r.Fallback != reason {
		f.t.Errorf("answer = %+v; want fallback %q", r, reason)
	}
	lines := f.lines("compaction falls back to Pi's summary")
	want := map[string]any{"level": "WARN", "msg": "compaction falls back to Pi's summary",
		"channel": string(partyChannel), "engine": hostEngine, "fallback": reason}
	if len(lines) == 0 || !cmp.Equal(lines[len(lines)-1], want) {
		f.t.Errorf("fallback log = %v; want last %v", lines, want)
	}
}

// The reference's test "Round trip": /worker/config names the engine, the compactor sees
// the bound channel and a manual request with messages on both sides of
// a matching firstKeptEntryId, the answer carries HOST SUMMARY with
// details {decisions:3, engine}, and the host logs "host compactor
// answered" with its latency.
func TestCompactRoundTrip(t *testing.T) {
	comp := newCompactor()
	f := newCompactFixture(t, comp, nil)
	cfg := f.serve(http.MethodGet, wire.RouteWorkerConfig, nil, 0)
	var wc struct{ Compaction map[string]string }
	if err := json.Unmarshal(cfg.Body.Bytes(), &wc); err != nil || !cmp.Equal(wc.Compaction, map[string]string{"engine": hostEngine}) {
		t.Errorf("/worker/config = %s; want compaction {engine:%q}", cfg.Body, hostEngine)
	}
	f.bind(time.Minute)
	r := f.compact(body7)
	after := int64(40)
	want := &wire.Compaction{Summary: "HOST SUMMARY", FirstKeptEntryID: "e7", TokensBefore: 480000,
		EstimatedTokensAfter: &after, Details: map[string]any{"decisions": json.Number("3"), "engine": hostEngine}}
	if diff := cmp.Diff(want, r.Compaction); !r.OK || diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	calls := comp.called()
	if len(calls) != 1 || calls[0].Channel != partyChannel {
		t.Fatalf("compactor calls = %+v; want one on %s", calls, partyChannel)
	}
	req := calls[0].Req
	if req.Reason != wire.CompactManual || len(req.MessagesToSummarize) == 0 || len(req.KeptMessages) == 0 || req.FirstKeptEntryID != "e7" {
		t.Errorf("compactor request = %+v", req)
	}
	lines := f.lines("host compactor answered")
	if len(lines) != 1 {
		t.Fatalf("answered lines = %v; want one", lines)
	}
	if _, ok := lines[0]["latencyMs"].(float64); !ok {
		t.Errorf("answered line %v lacks latencyMs", lines[0])
	}
	delete(lines[0], "latencyMs")
	wantLine := map[string]any{"level": "INFO", "msg": "host compactor answered", "channel": string(partyChannel),
		"engine": hostEngine, "tokensBefore": 480000.0, "tokensAfter": 40.0}
	if diff := cmp.Diff(wantLine, lines[0]); diff != "" {
		t.Errorf("answered line (-want +got):\n%s", diff)
	}
}

// The reference's test "compact with no compactor → fallback", docs/protocol.md, "The session protocol": without a compactor
// /worker/config names none and every compact request falls back.
func TestCompactNoCompactor(t *testing.T) {
	f := newCompactFixture(t, nil, func(c *broker.SessionConfig) {
		c.Worker.Compaction = &wire.SessionCompactionID{Engine: "stale"} // ignored without a compactor
	})
	if body := f.serve(http.MethodGet, wire.RouteWorkerConfig, nil, 0).Body.String(); strings.Contains(body, "compaction") {
		t.Errorf("/worker/config = %s; want no compaction", body)
	}
	f.bind(time.Minute)
	r := f.compact(body7)
	if r.OK || r.Fallback != "the host has no compactor" {
		t.Errorf("answer = %+v", r)
	}
	want := []map[string]any{{"level": "WARN", "msg": "compaction falls back to Pi's summary",
		"channel": string(partyChannel), "fallback": "the host has no compactor"}}
	if diff := cmp.Diff(want, f.lines("compaction falls back to Pi's summary")); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// The reference's test "Fallbacks to Pi's summary", the host's side: declined, never
// settling with a 1 s timeout, maxRequestBytes 1024, throwing "service
// unreachable" and a wrong firstKeptEntryId, each with its fallback
// answer and log line. Adaptation: a Go error has no JavaScript name, so
// the text is "the compactor failed: service unreachable" without
// "Error: ".
func TestCompactFallbacks(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		maxBytes int64
		fn       func(ctx context.Context, req wire.CompactRequest, release <-chan struct{}) (*wire.Compaction, error)
		want     string
		calls    int
	}{
		{name: "declined", want: "the compactor declined", calls: 1,
			fn: func(context.Context, wire.CompactRequest, <-chan struct{}) (*wire.Compaction, error) {
				return nil, nil
			}},
		{name: "never-settles", timeout: time.Second, want: "the compactor took over 1000 ms", calls: 1,
			fn: func(_ context.Context, _ wire.CompactRequest, release <-chan struct{}) (*wire.Compaction, error) {
				<-release // ignores its signal
				return nil, nil
			}},
		{name: "request-over-1024", maxBytes: 1024, want: "the request is over 1024 bytes", calls: 0},
		{name: "throws", want: "the compactor failed: service unreachable", calls: 1,
			fn: func(context.Context, wire.CompactRequest, <-chan struct{}) (*wire.Compaction, error) {
				return nil, errors.New("service unreachable")
			}},
		{name: "wrong-first-kept", want: "the compactor's result is invalid", calls: 1,
			fn: func(_ context.Context, req wire.CompactRequest, _ <-chan struct{}) (*wire.Compaction, error) {
				return &wire.Compaction{Summary: "HOST SUMMARY", FirstKeptEntryID: "elsewhere", TokensBefore: req.TokensBefore}, nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				defer synctest.Wait()
				defer close(release)
				comp := newCompactor()
				if tc.timeout != 0 {
					comp.timeout = tc.timeout
				}
				if tc.maxBytes != 0 {
					comp.maxBytes = tc.maxBytes
				}
				if tc.fn != nil {
					comp.fn = func(ctx context.Context, req wire.CompactRequest) (*wire.Compaction, error) {
						return tc.fn(ctx, req, release)
					}
				}
				f := newCompactFixture(t, comp, nil)
				f.bind(time.Minute)
				body := body7
				if tc.maxBytes != 0 {
					body = compactBody(strings.Repeat("e", 256)) + strings.Repeat(" ", 1024)
				}
				f.wantFallback(f.compact(body), tc.want)
				if n := len(comp.called()); n != tc.calls {
					t.Errorf("compactor called %d times; want %d", n, tc.calls)
				}
			})
		})
	}
}

// Step 4 and step 6: a body without a length that runs over
// maxRequestBytes is cut off as one announced over it is; an invalid one
// never reaches the compactor.
func TestCompactRequestBodyRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		size int64
		want string
	}{
		{"chunked-over-limit", compactBody("e7") + strings.Repeat(" ", 2048), -1, "the request is over 1024 bytes"},
		{"announced-over-limit", `{}`, 1025, "the request is over 1024 bytes"},
		{"not-json", `{"reason":`, 0, "the request is invalid"},
		{"not-object", `[]`, 0, "the request is invalid"},
		{"bad-reason", strings.Replace(body7, "manual", "soon", 1), 0, "the request is invalid"},
		{"message-without-role", strings.Replace(body7, `"role":"user"`, `"author":"user"`, 1), 0, "the request is invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comp := newCompactor()
			comp.maxBytes = 1024
			f := newCompactFixture(t, comp, nil)
			f.bind(time.Minute)
			size := tc.size
			if size == 0 {
				size = int64(len(tc.body))
			}
			w := f.serve(http.MethodPost, wire.RouteCompactionCompact, strings.NewReader(tc.body), size)
			f.wantFallback(decodeCompact(t, w), tc.want)
			if n := len(comp.called()); n != 0 {
				t.Errorf("compactor called %d times; want none", n)
			}
		})
	}
}

// Step 9: every result shape check.
func TestCompactResultShapeChecks(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		res  wire.Compaction
	}{
		{"empty-summary", wire.Compaction{FirstKeptEntryID: "e7", TokensBefore: 1}},
		{"wrong-first-kept", wire.Compaction{Summary: "s", FirstKeptEntryID: "e8", TokensBefore: 1}},
		{"tokens-before-unsafe", wire.Compaction{Summary: "s", FirstKeptEntryID: "e7", TokensBefore: 1 << 53}},
		{"estimate-unsafe", wire.Compaction{Summary: "s", FirstKeptEntryID: "e7", EstimatedTokensAfter: n(1 << 60)}},
		{"details-not-json", wire.Compaction{Summary: "s", FirstKeptEntryID: "e7", Details: map[string]any{"c": make(chan int)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comp := newCompactor()
			comp.fn = func(context.Context, wire.CompactRequest) (*wire.Compaction, error) { return &tc.res, nil }
			f := newCompactFixture(t, comp, nil)
			f.bind(time.Minute)
			f.wantFallback(f.compact(body7), "the compactor's result is invalid")
		})
	}
}

// The reference's test "Five compaction handler calls in one turn → the compactor is
// called 3 times, and 2 fallback lines contain "already asked"". A new
// turn may ask again.
func TestCompactFiveCallsOneTurn(t *testing.T) {
	comp := newCompactor()
	f := newCompactFixture(t, comp, nil)
	release, _ := f.bind(time.Minute)
	ok := 0
	for range 5 {
		if f.compact(body7).OK {
			ok++
		}
	}
	if n := len(comp.called()); n != 3 || ok != 3 {
		t.Errorf("compactor called %d times, %d answers ok; want 3 and 3", n, ok)
	}
	asked := 0
	for _, l := range f.lines("compaction falls back to Pi's summary") {
		if strings.Contains(l["fallback"].(string), "already asked") {
			asked++
		}
	}
	if asked != 2 {
		t.Errorf("%d fallback lines say already asked; want 2", asked)
	}
	release()
	f.bind(time.Minute)
	if !f.compact(body7).OK {
		t.Error("a new turn's first compaction fell back")
	}
}

// The reference's test "a concurrent compaction → fallback": while one compaction runs,
// another gets "a compaction is already running", and does not count
// against the turn's three.
func TestCompactConcurrentFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		comp := newCompactor()
		release := make(chan struct{})
		inner := comp.fn
		comp.fn = func(ctx context.Context, req wire.CompactRequest) (*wire.Compaction, error) {
			<-release
			return inner(ctx, req)
		}
		f := newCompactFixture(t, comp, nil)
		f.bind(time.Minute)
		first := make(chan *httptest.ResponseRecorder, 1)
		go func() { first <- f.post(wire.RouteCompactionCompact, body7) }()
		synctest.Wait() // the first waits in the compactor
		f.wantFallback(f.compact(body7), "a compaction is already running")
		close(release)
		if r := decodeCompact(t, <-first); !r.OK {
			t.Errorf("first answer = %+v; want ok", r)
		}
		for i := range 2 { // the second and third of the turn
			if !f.compact(body7).OK {
				t.Errorf("compaction %d fell back: the refused one counted against the turn's three", i+2)
			}
		}
		if n := len(comp.called()); n != 3 {
			t.Errorf("compactor called %d times; want 3", n)
		}
	})
}

// docs/protocol.md, "Compaction": a compactor that ignores its abort keeps the slot
// after its request fell back, also across turns, until it truly
// returns.
func TestCompactIgnoredAbortHoldsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		comp := newCompactor()
		comp.timeout = time.Second
		release := make(chan struct{})
		hung := true
		inner := comp.fn
		comp.fn = func(ctx context.Context, req wire.CompactRequest) (*wire.Compaction, error) {
			if hung {
				hung = false
				<-release // never looks at ctx
			}
			return inner(ctx, req)
		}
		f := newCompactFixture(t, comp, nil)
		releaseTurn, _ := f.bind(time.Minute)
		f.wantFallback(f.compact(body7), "the compactor took over 1000 ms")
		f.wantFallback(f.compact(body7), "a compaction is already running")
		releaseTurn()
		f.bind(time.Minute)
		f.wantFallback(f.compact(body7), "a compaction is already running")
		close(release)
		synctest.Wait() // the hung compactor returns and frees the slot
		if r := f.compact(body7); !r.OK {
			t.Errorf("answer after the compactor returned = %+v; want ok", r)
		}
	})
}

// The reference's test "Compactor time share": with the deadline 1.5 s away the compactor
// is never called; with it 4 s away and a 120 s compactor timeout the
// request falls back after 2000 ms, and the compactor's signal is
// aborted.
func TestCompactTimeShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		comp := newCompactor()
		f := newCompactFixture(t, comp, nil)
		release, _ := f.bind(1500 * time.Millisecond)
		f.wantFallback(f.compact(body7), "the turn has too little time left for the host compactor")
		if n := len(comp.called()); n != 0 {
			t.Errorf("compactor called %d times; want none", n)
		}
		release()

		aborted := make(chan error, 1)
		comp.fn = func(ctx context.Context, _ wire.CompactRequest) (*wire.Compaction, error) {
			<-ctx.Done()
			aborted <- ctx.Err()
			return nil, ctx.Err()
		}
		f.bind(4 * time.Second)
		start := time.Now()
		f.wantFallback(f.compact(body7), "the compactor took over 2000 ms")
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("fell back after %v; want 2s", d)
		}
		synctest.Wait()
		select {
		case err := <-aborted:
			if err == nil {
				t.Error("the compactor's signal did not end")
			}
		default:
			t.Error("the compactor's signal was not aborted")
		}
	})
}

// docs/protocol.md, "Compaction" at its edge: half of 2000 ms left is the 1000 ms floor and
// runs; half of 1999 ms is 999 ms and falls back.
func TestCompactTimeoutFloor(t *testing.T) {
	for _, tc := range []struct {
		left  time.Duration
		calls int
	}{{2000 * time.Millisecond, 1}, {1999 * time.Millisecond, 0}} {
		t.Run(tc.left.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				comp := newCompactor()
				f := newCompactFixture(t, comp, nil)
				f.bind(tc.left)
				r := f.compact(body7)
				if n := len(comp.called()); n != tc.calls || r.OK != (tc.calls == 1) {
					t.Errorf("answer %+v after %d compactor calls; want %d", r, n, tc.calls)
				}
			})
		})
	}
}

// The reference's test "Aborting the compaction's signal while the host compactor hangs":
// the turn ends while the compactor waits; the answer falls back at once
// with "the compaction was aborted" and the compactor's signal is
// aborted.
func TestCompactTurnAbortCancelsCompactor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		comp := newCompactor()
		seen := make(chan error, 1)
		comp.fn = func(ctx context.Context, _ wire.CompactRequest) (*wire.Compaction, error) {
			<-ctx.Done()
			seen <- ctx.Err()
			return nil, ctx.Err()
		}
		f := newCompactFixture(t, comp, nil)
		_, cancel := f.bind(time.Minute)
		answer := make(chan *httptest.ResponseRecorder, 1)
		go func() { answer <- f.post(wire.RouteCompactionCompact, body7) }()
		synctest.Wait()
		start := time.Now()
		cancel()
		r := decodeCompact(t, <-answer)
		if r.Fallback != "the compaction was aborted" || time.Since(start) != 0 {
			t.Errorf("answer = %+v after %v; want the abort at once", r, time.Since(start))
		}
		if err := <-seen; !errors.Is(err, context.Canceled) {
			t.Errorf("compactor's signal ended with %v; want canceled", err)
		}
	})
}

// The worker going away aborts the compaction the same way.
func TestCompactWorkerGoneAborts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		comp := newCompactor()
		comp.fn = func(ctx context.Context, _ wire.CompactRequest) (*wire.Compaction, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		f := newCompactFixture(t, comp, nil)
		f.bind(time.Minute)
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://broker/", strings.NewReader(body7))
		r.RequestURI = wire.RouteCompactionCompact
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { f.sess.ServeHTTP(w, r); close(done) }()
		synctest.Wait()
		cancel()
		<-done
		f.wantFallback(decodeCompact(t, w), "the compaction was aborted")
	})
}

// A panicking compactor is contained: the request falls back as a
// failure and the log has the stack.
func TestCompactorPanicContained(t *testing.T) {
	comp := newCompactor()
	comp.fn = func(context.Context, wire.CompactRequest) (*wire.Compaction, error) { panic("boom") }
	f := newCompactFixture(t, comp, nil)
	f.bind(time.Minute)
	f.wantFallback(f.compact(body7), "the compactor failed: host compactor panicked")
	if lines := f.lines("host compactor panicked"); len(lines) != 1 || lines[0]["stack"] == "" {
		t.Errorf("panic log = %v", lines)
	}
}

// [SEC] The compactor sees the host-bound channel and speaker's channel,
// never a channel the body names.
func TestCompactorSeesHostBoundChannel(t *testing.T) {
	comp := newCompactor()
	f := newCompactFixture(t, comp, nil)
	f.bind(time.Minute)
	body := strings.Replace(body7, `{"reason"`, `{"channel":"discord:owner","author":{"id":"owner"},"reason"`, 1)
	if !f.compact(body).OK {
		t.Fatal("compaction fell back")
	}
	if calls := comp.called(); len(calls) != 1 || calls[0].Channel != partyChannel {
		t.Errorf("compactor calls = %+v; want channel %s", calls, partyChannel)
	}
}

// [SEC] A compactor error that holds the model credential, raw or
// encoded, reaches neither the worker nor the log: its forms are masked,
// then the host's scrubber runs, then the text is cut to 2,000 units.
func TestCompactorErrorCredentialScrubbed(t *testing.T) {
	secretB64 := base64.StdEncoding.EncodeToString([]byte(hostSecret))
	comp := newCompactor()
	comp.fn = func(context.Context, wire.CompactRequest) (*wire.Compaction, error) {
		return nil, errors.New("upstream refused key " + hostSecret + " (as " + secretB64 + ") for sk-abcdefghijklmnopqrstuvwx " + strings.Repeat("x", 3000))
	}
	var scrubIn []string
	f := newCompactFixture(t, comp, func(c *broker.SessionConfig) {
		c.Scrub = func(s string) string {
			scrubIn = append(scrubIn, s)
			return strings.ReplaceAll(s, "sk-abcdefghijklmnopqrstuvwx", "[redacted]")
		}
	})
	f.bind(time.Minute)
	r := f.compact(body7)
	for _, leak := range []string{hostSecret, secretB64, "sk-abcdefghijklmnopqrstuvwx"} {
		if strings.Contains(r.Fallback, leak) || strings.Contains(f.logs.String(), leak) {
			t.Errorf("%q leaks into the fallback or the log", leak)
		}
	}
	// The credential is masked before the host's scrubber sees the text.
	if len(scrubIn) != 1 || strings.Contains(scrubIn[0], hostSecret) || strings.Contains(scrubIn[0], secretB64) {
		t.Errorf("scrubber input = %.200q", scrubIn)
	}
	prefix := "the compactor failed: upstream refused key [redacted] (as [redacted]) for [redacted] xxx"
	if !strings.HasPrefix(r.Fallback, prefix) {
		t.Errorf("fallback = %.200q; want prefix %q", r.Fallback, prefix)
	}
	if n := rtsandbox.UTF16Len(strings.TrimPrefix(r.Fallback, "the compactor failed: ")); n != 2000 {
		t.Errorf("error text is %d units; want cut to 2000", n)
	}
}

// [SEC] Without a host scrubber the error's control characters are
// blanked, so a worker-bound text cannot forge log lines.
func TestCompactorErrorDefaultScrub(t *testing.T) {
	comp := newCompactor()
	comp.fn = func(context.Context, wire.CompactRequest) (*wire.Compaction, error) {
		return nil, errors.New("line one\n{\"msg\":\"forged\"}\x1b[31m")
	}
	f := newCompactFixture(t, comp, nil)
	f.bind(time.Minute)
	f.wantFallback(f.compact(body7), `the compactor failed: line one {"msg":"forged"} [31m`)
}

// docs/session.md, "Routes and statuses": the compaction routes need a live bound turn (410 "Turn ended"
// without one, after release, or once the turn ended) and answer 404 to
// any method but POST and to any other /compaction/ path.
func TestCompactionRoutesNeedBoundTurn(t *testing.T) {
	f := newCompactFixture(t, newCompactor(), nil)
	want := func(w *httptest.ResponseRecorder, status int, body string) {
		t.Helper()
		if w.Code != status || w.Body.String() != body {
			t.Errorf("answer = %d %q; want %d %q", w.Code, w.Body.String(), status, body)
		}
	}
	for _, path := range []string{wire.RouteCompactionCompact, wire.RouteCompactionReport} {
		want(f.post(path, body7), 410, "Turn ended")
		want(f.serve(http.MethodGet, path, nil, 0), 404, "Not found")
	}
	release, cancel := f.bind(time.Minute)
	want(f.serve(http.MethodGet, wire.RouteCompactionCompact, nil, 0), 404, "Not found")
	want(f.serve(http.MethodPut, wire.RouteCompactionReport, strings.NewReader(`{}`), 2), 404, "Not found")
	want(f.post("/compaction/other", `{}`), 404, "Not found")
	cancel()
	want(f.post(wire.RouteCompactionCompact, body7), 410, "Turn ended")
	want(f.post(wire.RouteCompactionReport, bypassReport), 410, "Turn ended")
	release()
	want(f.post(wire.RouteCompactionCompact, body7), 410, "Turn ended")
}

const (
	bypassReport = `{"type":"bypass","reason":"above the hard ceiling","tokensBefore":500001}`
	endReport    = `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"engine":"extension","tokensBefore":480000,"tokensAfter":900,"contextAfter":260000,"nextCompactionAt":300000}`
)

// The reference's test "Report budget 16 → 429": sixteen reports a turn are accepted,
// the seventeenth is 429 "Report budget exhausted"; invalid reports
// spend the budget too; the next turn has sixteen again.
func TestReportBudget(t *testing.T) {
	f := newCompactFixture(t, nil, nil)
	release, _ := f.bind(time.Minute)
	if w := f.post(wire.RouteCompactionReport, `{}`); w.Code != 400 {
		t.Fatalf("invalid report = %d", w.Code)
	}
	for i := 2; i <= 16; i++ {
		if w := f.post(wire.RouteCompactionReport, bypassReport); w.Code != 200 || w.Body.String() != "Accepted" {
			t.Fatalf("report %d = %d %q", i, w.Code, w.Body.String())
		}
	}
	if w := f.post(wire.RouteCompactionReport, bypassReport); w.Code != 429 || w.Body.String() != "Report budget exhausted" {
		t.Errorf("17th report = %d %q; want 429 Report budget exhausted", w.Code, w.Body.String())
	}
	release()
	f.bind(time.Minute)
	if w := f.post(wire.RouteCompactionReport, bypassReport); w.Code != 200 {
		t.Errorf("next turn's report = %d; want 200", w.Code)
	}
}

// The reference's test "Body limits: … report 64 KiB": a report of exactly 64 KiB is
// read, one byte more is 400 "Invalid report", with or without a length.
func TestReportBodyLimit(t *testing.T) {
	f := newCompactFixture(t, nil, nil)
	f.bind(time.Minute)
	pad := func(n int) string { return bypassReport + strings.Repeat(" ", n-len(bypassReport)) }
	for _, tc := range []struct {
		name   string
		body   string
		size   int64
		status int
	}{
		{"exactly-64k", pad(64 << 10), 64 << 10, 200},
		{"over-64k", pad(64<<10 + 1), 64<<10 + 1, 400},
		{"over-64k-chunked", pad(64<<10 + 1), -1, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.serve(http.MethodPost, wire.RouteCompactionReport, strings.NewReader(tc.body), tc.size)
			if w.Code != tc.status {
				t.Errorf("answer = %d %q; want %d", w.Code, w.Body.String(), tc.status)
			}
		})
	}
}

// docs/protocol.md, "Compaction": an invalid report is 400 "Invalid report" and logs nothing.
func TestReportInvalid(t *testing.T) {
	f := newCompactFixture(t, nil, nil)
	f.bind(time.Minute)
	for _, body := range []string{``, `[]`, `{"type":"end","reason":"manual"}`, `{"type":"bypass","reason":"x","tokensBefore":-1}`,
		`{"type":"end","reason":"manual","aborted":false,"willRetry":false,"engine":"host"}`, `{"type":"end","reason":"manual","aborted":false,"willRetry":false,"tokensAfter":1.5}`} {
		if w := f.post(wire.RouteCompactionReport, body); w.Code != 400 || w.Body.String() != "Invalid report" {
			t.Errorf("report %q = %d %q; want 400 Invalid report", body, w.Code, w.Body.String())
		}
	}
	for _, msg := range []string{"compaction skips the extension for Pi's summary", "compaction failed", "conversation compacted"} {
		if lines := f.lines(msg); len(lines) != 0 {
			t.Errorf("invalid reports logged %v", lines)
		}
	}
}

// docs/protocol.md, "Compaction" "Log messages" and the reference's tests: a bypass, a failed compaction and a
// compaction each log their line with their fields; trigger is "self"
// for a manual compaction, else the reason.
func TestReportLogLines(t *testing.T) {
	f := newCompactFixture(t, nil, nil)
	f.bind(time.Minute)
	for _, body := range []string{
		bypassReport,
		`{"type":"end","reason":"threshold","aborted":true,"willRetry":false,"error":"model said no\nreally"}`,
		endReport,
		`{"type":"end","reason":"overflow","aborted":false,"willRetry":true,"engine":"pi","tokensAfter":10}`,
	} {
		if w := f.post(wire.RouteCompactionReport, body); w.Code != 200 {
			t.Fatalf("report %s = %d %q", body, w.Code, w.Body.String())
		}
	}
	ch := string(partyChannel)
	if diff := cmp.Diff([]map[string]any{{"level": "INFO", "msg": "compaction skips the extension for Pi's summary",
		"channel": ch, "reason": "above the hard ceiling", "tokensBefore": 500001.0, "ceiling": 500000.0}},
		f.lines("compaction skips the extension for Pi's summary")); diff != "" {
		t.Errorf("bypass line (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]map[string]any{{"level": "WARN", "msg": "compaction failed",
		"channel": ch, "trigger": "threshold", "aborted": true, "error": "model said no really"}},
		f.lines("compaction failed")); diff != "" {
		t.Errorf("failed line (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]map[string]any{
		{"level": "INFO", "msg": "conversation compacted", "channel": ch, "trigger": "self", "engine": "extension",
			"tokensBefore": 480000.0, "tokensAfter": 900.0, "contextAfter": 260000.0, "nextCompactionAt": 300000.0},
		{"level": "INFO", "msg": "conversation compacted", "channel": ch, "trigger": "overflow", "engine": "pi", "tokensAfter": 10.0},
	}, f.lines("conversation compacted")); diff != "" {
		t.Errorf("compacted lines (-want +got):\n%s", diff)
	}
}

// docs/protocol.md, "Compaction" "Constructor validation": the engine name, the timeout and the
// request bound, at their edges; NewSession refuses a compactor that
// breaks one.
func TestCheckCompactor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		engine   string
		timeout  time.Duration
		maxBytes int64
		ok       bool
	}{
		{"defaults", hostEngine, 120 * time.Second, 32 << 20, true},
		{"engine-charset", "@scope/pkg_v1.2-x", time.Second, 1, true},
		{"engine-100", strings.Repeat("e", 100), 600 * time.Second, 96 << 20, true},
		{"engine-101", strings.Repeat("e", 101), time.Second, 1, false},
		{"engine-empty", "", time.Second, 1, false},
		{"engine-space", "host compactor", time.Second, 1, false},
		{"engine-colon", "host:compactor", time.Second, 1, false},
		{"timeout-999ms", hostEngine, 999 * time.Millisecond, 1, false},
		{"timeout-600001ms", hostEngine, 600*time.Second + time.Millisecond, 1, false},
		{"bytes-zero", hostEngine, time.Second, 0, false},
		{"bytes-over-96m", hostEngine, time.Second, 96<<20 + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comp := &fakeCompactor{engine: tc.engine, timeout: tc.timeout, maxBytes: tc.maxBytes}
			err := broker.CheckCompactor(comp)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, broker.ErrCompactor)) {
				t.Errorf("CheckCompactor = %v; want ok %v", err, tc.ok)
			}
			_, err = broker.NewSession(broker.SessionConfig{Broker: plainBroker(t), Compactor: comp})
			if (err == nil) != tc.ok {
				t.Errorf("NewSession = %v; want ok %v", err, tc.ok)
			}
		})
	}
}

// The compaction routes over the real socket: a round trip and a report,
// with the reads bounded by the listener's connection.
func TestCompactionOverSocket(t *testing.T) {
	comp := newCompactor()
	f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.Compactor = comp }})
	if cfg := f.do(http.MethodGet, wire.RouteWorkerConfig, ""); !strings.Contains(cfg.Body, `"compaction":{"engine":"host-compactor"}`) {
		t.Errorf("/worker/config = %q", cfg.Body)
	}
	f.bind("")
	r := f.post(wire.RouteCompactionCompact, body7)
	got, err := wire.ParseCompactResponse([]byte(r.Body))
	if r.Status != 200 || err != nil || !got.OK || got.Compaction.Summary != "HOST SUMMARY" {
		t.Errorf("compact = %d %q (%v)", r.Status, r.Body, err)
	}
	if calls := comp.called(); len(calls) != 1 || calls[0].Channel != sessChannel {
		t.Errorf("compactor calls = %+v; want one on %s", calls, sessChannel)
	}
	wantResp(t, f.post(wire.RouteCompactionReport, endReport), 200, "Accepted")
	wantResp(t, f.post(wire.RouteCompactionCompact+"?beta=true", body7), 404, "Not found")
}
