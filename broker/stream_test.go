package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/chunkread"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

const streamBody = `{"stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`

// serveCatching serves r on turn and reports whether the handler aborted
// the connection (panic http.ErrAbortHandler), as a server would.
func serveCatching(turn http.Handler, r *http.Request) (w *httptest.ResponseRecorder, aborted bool) {
	w = httptest.NewRecorder()
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			aborted = true
		}
	}()
	turn.ServeHTTP(w, r)
	return w, false
}

func workerRequest(ctx context.Context, target, body string) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	r.Host = wire.BrokerHost
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+wire.DummyKey)
	return r
}

// withFakeModel points the broker at a stand-in model on loopback http.
func withFakeModel(s *fakemodel.Server, api string) func(*broker.Config) {
	return func(c *broker.Config) {
		c.API, c.Stream, c.Client = api, true, upstream.New(nil)
		c.ModelURL = ep(s.URL())
		if api == rtsandbox.ModelAPIOpenAI {
			c.ModelURL = ep(s.ChatURL())
		}
	}
}

// splitCases cuts an SSE event holding each form of the key at every
// offset into two chunks and at every pair of offsets into three. formOf
// names the form each case cuts.
func splitCases() (forms []string, cases [][][]byte, formOf []int) {
	// A clean event first: event mode passes on whole events only, so the
	// head and the clean event go out before the event that holds the form.
	prefix, suffix := deltaEvent+"event: content_block_delta\ndata: {\"delta\":\"", "\"}\n\n"
	forms = upstream.Forms(realKey)
	for fi, form := range forms {
		body := []byte(prefix + form + suffix)
		cut := func(offsets ...int) [][]byte {
			var out [][]byte
			last := 0
			for _, o := range offsets {
				out = append(out, body[last:len(prefix)+o])
				last = len(prefix) + o
			}
			return append(out, body[last:])
		}
		for i := 1; i < len(form); i++ {
			cases, formOf = append(cases, cut(i)), append(formOf, fi)
			for j := i + 1; j < len(form); j++ {
				cases, formOf = append(cases, cut(i, j)), append(formOf, fi)
			}
		}
	}
	return forms, cases, formOf
}

// chunkTransport answers every upstream call with the next case's chunks,
// one per read of the body: every cut falls between two reads.
type chunkTransport struct {
	cases [][][]byte
	next  atomic.Int64
}

func (c *chunkTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	body := chunkread.Reader(slices.Clone(c.cases[c.next.Add(1)-1]))
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: &body, Request: r, ContentLength: -1}, nil
}

// TestStreamReflectionSplitAtEveryOffset cuts every form of the key at
// every offset, into two and into three upstream reads of a streamed
// answer: each is cut off after the head (or refused with the fixed 502
// when the first read already holds a form, such as a base64 core), and
// the worker never receives any form.
func TestStreamReflectionSplitAtEveryOffset(t *testing.T) {
	forms, cases, formOf := splitCases()
	tr := &chunkTransport{cases: cases}
	f := newFixture(t, nil, func(c *broker.Config) {
		anthropicAPI(true)(c)
		c.Client, c.MaxCalls = upstream.New(tr), rtsandbox.MaxCallsLimit
	})
	var turn *broker.Turn
	for k, chunks := range cases {
		if k == 0 || formOf[k] != formOf[k-1] { // a fresh budget per form
			turn = f.broker.Turn(context.Background(), rtsandbox.Binding{Channel: testChannel, Speaker: guest})
		}
		w, aborted := serveCatching(turn, workerRequest(context.Background(), wire.RouteAnthropicMessages, streamBody))
		got := w.Body.String()
		early := slices.ContainsFunc(forms, func(f string) bool { return strings.Contains(string(chunks[0]), f) })
		if early && (aborted || w.Code != 502) || !early && (!aborted || w.Code != 200) {
			t.Fatalf("form %q, chunks %q: %d %q, aborted %v; want cut off after the head, or 502 when the first read holds a form",
				forms[formOf[k]], chunks, w.Code, got, aborted)
		}
		for _, form := range forms {
			if strings.Contains(got, form) {
				t.Fatalf("form %q, chunks %q: the worker got form %q", forms[formOf[k]], chunks, form)
			}
		}
	}
	if n := int(tr.next.Load()); n != len(cases) || n < 1000 {
		t.Errorf("served %d calls; want all %d cases (more than 1000)", n, len(cases))
	}
}

// TestStreamReflectionSplitOverHTTP plays the two-chunk cuts of every form
// through the stand-in model (Response.Chunks, flushed with a pause
// after each) over real HTTP: however the pieces arrive, the worker never
// receives a form: the answer is cut off after the head, or refused with
// the fixed 502 when the broker saw the key before writing anything.
func TestStreamReflectionSplitOverHTTP(t *testing.T) {
	forms, all, formOf := splitCases()
	var cases [][][]byte
	for k, c := range all {
		if len(c) == 2 {
			cases = append(cases, c)
			formOf[len(cases)-1] = formOf[k]
		}
	}
	next := atomic.Int64{}
	model := fakemodel.NewWithOptions(fakemodel.Options{Loop: true, NoRecord: true, StreamDelay: 200 * time.Microsecond}, fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
		return fakemodel.Response{Chunks: cases[next.Add(1)-1], ContentType: "text/event-stream"}
	}))
	defer model.Close()
	f := newFixture(t, nil, func(c *broker.Config) {
		withFakeModel(model, rtsandbox.ModelAPIAnthropic)(c)
		c.MaxCalls = rtsandbox.MaxCallsLimit
	})
	aborts := 0
	for k, chunks := range cases {
		w, aborted := serveCatching(f.turn, workerRequest(context.Background(), wire.RouteAnthropicMessages, streamBody))
		got := w.Body.String()
		if !(aborted && w.Code == 200) && !(!aborted && w.Code == 502 && got == "broker call failed") {
			t.Fatalf("form %q, chunks %q: %d %q, aborted %v; want an abort after the head or the fixed 502", forms[formOf[k]], chunks, w.Code, got, aborted)
		}
		if aborted {
			aborts++
		}
		for _, form := range forms {
			if strings.Contains(got, form) {
				t.Fatalf("form %q, chunks %q: the worker got form %q", forms[formOf[k]], chunks, form)
			}
		}
	}
	if n := int(next.Load()); n != len(cases) || aborts == 0 {
		t.Errorf("served %d calls, %d cut after the head; want all %d cases, some cut after the head", n, aborts, len(cases))
	}
}

// socketClient is an http.Client whose transport dials the broker socket.
func socketClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

func socketPost(t *testing.T, c *http.Client, ctx context.Context, target, body string) *http.Response {
	t.Helper()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+wire.BrokerHost+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+wire.DummyKey)
	resp, err := c.Do(r)
	if err != nil {
		t.Fatalf("POST %s: %v", target, err)
	}
	return resp
}

// sseHandler answers with a 200 event stream written by write, flushing
// after each call of send.
func sseHandler(write func(ctx context.Context, send func(string) bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		send := func(s string) bool {
			if _, err := io.WriteString(w, s); err != nil {
				return false
			}
			http.NewResponseController(w).Flush()
			return r.Context().Err() == nil
		}
		write(r.Context(), send)
	}
}

const deltaEvent = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n"

// TestStreamCutOffAfterHead: what ends a streamed answer early after its
// head cuts the connection, so the worker's read fails after the events it
// got, and the audit record says why.
func TestStreamCutOffAfterHead(t *testing.T) {
	tests := []struct {
		name    string
		silence time.Duration
		write   func(ctx context.Context, send func(string) bool)
		detail  string
	}{
		{
			name: "reflected-key", detail: "response reflects the credential",
			write: func(_ context.Context, send func(string) bool) {
				send(deltaEvent)
				send("data: {\"text\":\"" + realKey[:5])
				send(realKey[5:] + "\"}\n\n")
			},
		},
		{
			name: "over-50-MiB", detail: "response too large",
			write: func(_ context.Context, send func(string) bool) {
				chunk := strings.Repeat(deltaEvent, (1<<20)/len(deltaEvent))
				for total := 0; total <= rtsandbox.MaxStreamedAnswer; total += len(chunk) {
					if !send(chunk) {
						return
					}
				}
			},
		},
		{
			name: "silence", silence: 150 * time.Millisecond, detail: "stream cut: stream silence limit passed",
			write: func(ctx context.Context, send func(string) bool) {
				send(deltaEvent)
				select {
				case <-time.After(2 * time.Second):
				case <-ctx.Done():
					return
				}
				send(deltaEvent)
			},
		},
		{
			name: "upstream-breaks", detail: "stream cut: upstream read failed",
			write: func(_ context.Context, send func(string) bool) {
				send(deltaEvent)
				panic(http.ErrAbortHandler)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, sseHandler(tt.write), func(c *broker.Config) {
				anthropicAPI(true)(c)
				c.StreamSilence = tt.silence
			})
			srv := f.listen(t, broker.ListenOptions{})
			resp := socketPost(t, socketClient(srv.Path()), context.Background(), wire.RouteAnthropicMessages, streamBody)
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			f.bodies.Write(got)
			if resp.StatusCode != 200 || err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("status %d, read error %v; want 200 and a broken body", resp.StatusCode, err)
			}
			if !strings.HasPrefix(string(got), deltaEvent) {
				t.Errorf("worker got %.80q; want the first event", got)
			}
			if !strings.Contains(f.logs.String(), tt.detail) || !strings.Contains(f.logs.String(), "stream cut: ") {
				t.Errorf("audit log lacks %q:\n%s", tt.detail, f.logs.String())
			}
		})
	}
}

// TestStreamSilenceGapsBelowLimit: gaps shorter than the silence limit
// pass, however long the whole answer takes (the reference's listener streaming test).
func TestStreamSilenceGapsBelowLimit(t *testing.T) {
	f := newFixture(t, sseHandler(func(_ context.Context, send func(string) bool) {
		send("data: first\n\n")
		for range 4 {
			time.Sleep(100 * time.Millisecond)
			send("data: x\n\n")
		}
	}), func(c *broker.Config) {
		anthropicAPI(true)(c)
		c.StreamSilence = 250 * time.Millisecond
	})
	srv := f.listen(t, broker.ListenOptions{})
	start := time.Now()
	resp := socketPost(t, socketClient(srv.Path()), context.Background(), wire.RouteAnthropicMessages, streamBody)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != "data: first\n\n"+strings.Repeat("data: x\n\n", 4) || time.Since(start) < 400*time.Millisecond {
		t.Errorf("got %q, %v after %v; want the whole stream after at least 400ms", got, err, time.Since(start))
	}
}

// TestStreamWorkerDisconnectCancelsUpstream: a worker that goes away
// mid-stream cancels the upstream call.
func TestStreamWorkerDisconnectCancelsUpstream(t *testing.T) {
	upstreamDone := make(chan struct{})
	f := newFixture(t, sseHandler(func(ctx context.Context, send func(string) bool) {
		defer close(upstreamDone)
		for send(deltaEvent) {
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}), anthropicAPI(true))
	srv := f.listen(t, broker.ListenOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	resp := socketPost(t, socketClient(srv.Path()), ctx, wire.RouteAnthropicMessages, streamBody)
	buf := make([]byte, len(deltaEvent))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != deltaEvent {
		t.Fatalf("first event = %q, %v", buf, err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-upstreamDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream call was not cancelled 5s after the worker left")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(f.logs.String(), "stream cut") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(f.logs.String(), `"status":200`) || !strings.Contains(f.logs.String(), "stream cut") {
		t.Errorf("audit log lacks the cut stream:\n%s", f.logs.String())
	}
}

// TestStreamErrorStatusKeepsStatusAndBody: a streamed call answered with an
// error status passes it on with its filtered body.
func TestStreamErrorStatusKeepsStatusAndBody(t *testing.T) {
	const errBody = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	f := newFixture(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(529)
		io.WriteString(w, errBody)
	}, anthropicAPI(true))
	srv := f.listen(t, broker.ListenOptions{})
	resp := socketPost(t, socketClient(srv.Path()), context.Background(), wire.RouteAnthropicMessages, streamBody)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 529 || err != nil || string(got) != errBody || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("= %d %q (%v), retry-after %q; want 529 %q, 3", resp.StatusCode, got, err, resp.Header.Get("Retry-After"), errBody)
	}
}

// TestSSEErrorWatcher: an error event inside a 200 stream, split
// mid-event across chunks, reaches the worker unchanged and is logged
// once (as the reference's tests ask), however many follow.
func TestSSEErrorWatcher(t *testing.T) {
	errEvent := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	stream := "event: message_start\ndata: {\"type\":\"message_start\"}\n\n" + errEvent + errEvent
	cut := strings.Index(stream, "overloaded") + 4
	model := fakemodel.New(respond(fakemodel.Response{
		Chunks: [][]byte{[]byte(stream[:cut]), []byte(stream[cut:])}, ContentType: "text/event-stream",
	}))
	defer model.Close()
	f := newFixture(t, nil, withFakeModel(model, rtsandbox.ModelAPIAnthropic))
	w, aborted := serveCatching(f.turn, workerRequest(context.Background(), wire.RouteAnthropicMessages, streamBody))
	if aborted || w.Code != 200 || w.Body.String() != stream {
		t.Errorf("= %d %q (aborted %v); want 200 and the stream unchanged", w.Code, w.Body.String(), aborted)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "sandbox upstream call failed" {
			lines = append(lines, m)
		}
	}
	want := `stream error event: {"type":"error","error":{"type":"overloaded_error"`
	if len(lines) != 1 || lines[0]["status"] != 200.0 || !strings.HasPrefix(fmt.Sprint(lines[0]["body"]), want) {
		t.Errorf("watcher log lines = %v; want one with status 200 and body starting %q", lines, want)
	}
}

// TestStreamedCallSettlesUsage: a streamed call's tokens are settled from
// its usage events (Messages: message_start input plus the last
// message_delta output; OpenAI: the usage chunk), and its call counts once.
func TestStreamedCallSettlesUsage(t *testing.T) {
	tests := []struct {
		name   string
		api    string
		target string
		body   string
		want   int64
	}{
		{"anthropic", rtsandbox.ModelAPIAnthropic, wire.RouteAnthropicMessages, streamBody, 11 + 7},
		{"openai", rtsandbox.ModelAPIOpenAI, wire.RouteModel, `{"stream":true,"messages":[{"role":"user","content":"hello"}]}`, 11 + 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := fakemodel.New(respond(fakemodel.Response{Content: "hello there", Usage: &fakemodel.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18}}))
			defer model.Close()
			l := openLedger(t, budget.Config{PerSpeaker: budget.Limits{Tokens: 1000000}})
			f := newFixture(t, nil, func(c *broker.Config) {
				withFakeModel(model, tt.api)(c)
				c.Budget = l
			})
			w, aborted := serveCatching(f.turn, workerRequest(context.Background(), tt.target, tt.body))
			if aborted || w.Code != 200 || !strings.Contains(w.Body.String(), "hell") {
				t.Fatalf("= %d %q (aborted %v)", w.Code, w.Body.String(), aborted)
			}
			if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("Content-Type = %q; want text/event-stream", ct)
			}
			u := usage(t, l, budget.Scopes(testChannel, guest.PrincipalID)[0])
			if u[budget.Tokens].Used != tt.want || u[budget.Calls].Used != 1 || u[budget.Tokens].Reserved != 0 {
				t.Errorf("usage = %+v; want %d tokens and 1 call used, none reserved", u, tt.want)
			}
			reqs := model.Requests()
			if len(reqs) != 1 || !bytes.Contains(reqs[0].Raw, []byte(`"stream":true`)) {
				t.Errorf("upstream requests = %d; want one streamed", len(reqs))
			}
		})
	}
}

// respond is a step that always answers resp.
func respond(resp fakemodel.Response) fakemodel.Step {
	return fakemodel.Func(func(fakemodel.Request) fakemodel.Response { return resp })
}

// TestModelRouteStreamSetting: on /model, "stream": true is forwarded (with
// the usage chunk asked for) only when the host allows streaming; without
// it the route is unchanged: stream pinned to false, the answer whole.
// A streamed /model call keeps an upstream error status.
func TestModelRouteStreamSetting(t *testing.T) {
	const body = `{"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	tests := []struct {
		name       string
		allow      bool
		reply      http.HandlerFunc
		wantStatus int
		wantBody   string
		wantSent   string // in the upstream body
	}{
		{name: "not-allowed-pinned", reply: jsonReply(completionWithUsage), wantStatus: 200, wantBody: completionWithUsage,
			wantSent: `"stream":false,"max_tokens":4096`},
		{name: "allowed", allow: true, reply: sseHandler(func(_ context.Context, send func(string) bool) { send("data: [DONE]\n\n") }),
			wantStatus: 200, wantBody: "data: [DONE]\n\n", wantSent: `"stream":true,"stream_options":{"include_usage":true},"max_tokens":4096`},
		{name: "allowed-error-status", allow: true, reply: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"message":"slow down"}}`)
		}, wantStatus: 429, wantBody: `{"error":{"message":"slow down"}}`, wantSent: `"stream":true`},
		{name: "not-allowed-error-status", reply: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"message":"bad"}}`)
		}, wantStatus: 502, wantBody: "broker call failed", wantSent: `"stream":false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.reply, func(c *broker.Config) { c.Stream = tt.allow })
			w, aborted := serveCatching(f.turn, workerRequest(context.Background(), wire.RouteModel, body))
			if aborted || w.Code != tt.wantStatus || w.Body.String() != tt.wantBody {
				t.Errorf("= %d %q (aborted %v); want %d %q", w.Code, w.Body.String(), aborted, tt.wantStatus, tt.wantBody)
			}
			reqs := f.model.requests()
			if len(reqs) == 0 || !strings.Contains(string(reqs[0].Body), tt.wantSent) {
				t.Errorf("upstream requests %d, first body %q; want it to contain %q", len(reqs), reqs, tt.wantSent)
			}
		})
	}
}

// TestStreamReflectionEscapedInEvent: a key whose characters the upstream
// wrote as JSON \u escapes inside an event is found as the whole-body
// scan finds it, before any byte of that event reaches the worker.
func TestStreamReflectionEscapedInEvent(t *testing.T) {
	var escaped strings.Builder
	for _, r := range realKey {
		fmt.Fprintf(&escaped, `\u%04x`, r)
	}
	event := "event: content_block_delta\ndata: {\"delta\":{\"text\":\"" + escaped.String() + "\"}}\n\n"
	body := []byte(deltaEvent + event)
	half := len(deltaEvent) + len(event)/2
	tr := &chunkTransport{cases: [][][]byte{{body[:half], body[half:]}}}
	f := newFixture(t, nil, func(c *broker.Config) {
		anthropicAPI(true)(c)
		c.Client = upstream.New(tr)
	})
	w, aborted := serveCatching(f.turn, workerRequest(context.Background(), wire.RouteAnthropicMessages, streamBody))
	if got := w.Body.String(); !aborted || w.Code != 200 || got != deltaEvent {
		t.Fatalf("%d %q, aborted %v; want the clean event, then the connection cut", w.Code, got, aborted)
	}
	if !strings.Contains(f.logs.String(), "stream cut: "+upstream.ErrReflect.Error()) {
		t.Errorf("audit log lacks the reflection cut:\n%s", f.logs.String())
	}
}

// TestSecStreamLeadingBOMKeyRefused is the byte-order mark finding
// through the relay, from the stand-in model over real HTTP, in both
// dialects: an answer that begins with a mark and carries the key in its
// first event (cut across it and the next, or written in JSON escapes),
// which a client that strips the mark (EventSource) would assemble, is
// refused with the fixed 502 before the broker writes anything, and the
// operator's log says why.
func TestSecStreamLeadingBOMKeyRefused(t *testing.T) {
	const bom = "\xEF\xBB\xBF"
	half := len(realKey) / 2
	var escaped strings.Builder
	for _, r := range realKey {
		fmt.Fprintf(&escaped, `\u%04x`, r)
	}
	// The first event's data line comes first, its event line after (a
	// mark before an event line hides only the event's name).
	block := func(text string) string {
		return "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"" + text + "\"}}\nevent: content_block_start\n\n"
	}
	delta := func(text string) string {
		return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
	}
	chunk := func(text string) string {
		return "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}]}\n\n"
	}
	tests := []struct {
		name, api, route, body string
		events                 []string
	}{
		{"messages-split", rtsandbox.ModelAPIAnthropic, wire.RouteAnthropicMessages, streamBody, []string{bom + block("k: "+realKey[:half]), delta(realKey[half:])}},
		{"messages-escaped", rtsandbox.ModelAPIAnthropic, wire.RouteAnthropicMessages, streamBody, []string{bom + block(escaped.String()), delta("x")}},
		{"chat-split", rtsandbox.ModelAPIOpenAI, wire.RouteOpenAIChat, `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, []string{bom + chunk("k: "+realKey[:half]), chunk(realKey[half:]), "data: [DONE]\n\n"}},
		{"chat-escaped", rtsandbox.ModelAPIOpenAI, wire.RouteOpenAIChat, `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, []string{bom + chunk(escaped.String()), "data: [DONE]\n\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var chunks [][]byte
			for _, ev := range tt.events {
				chunks = append(chunks, []byte(ev))
			}
			model := fakemodel.NewWithOptions(fakemodel.Options{NoRecord: true}, fakemodel.Func(func(fakemodel.Request) fakemodel.Response {
				return fakemodel.Response{Chunks: chunks, ContentType: "text/event-stream"}
			}))
			defer model.Close()
			f := newFixture(t, nil, withFakeModel(model, tt.api))
			w, aborted := serveCatching(f.turn, workerRequest(context.Background(), tt.route, tt.body))
			got := w.Body.String()
			if aborted || w.Code != 502 || got != "broker call failed" {
				t.Fatalf("%d %q, aborted %v; want the fixed 502 before anything is written", w.Code, got, aborted)
			}
			if !strings.Contains(f.logs.String(), "byte-order mark") {
				t.Errorf("audit log does not say why:\n%s", f.logs.String())
			}
		})
	}
}
