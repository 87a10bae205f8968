package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"github.com/rtsandbox/rtsandbox/internal/fakeruntime"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/door"
	"github.com/rtsandbox/rtsandbox/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	guestToken = "guest-token-123"
	ownerToken = "owner-token-456"
	lobby      = rtsandbox.ChannelKey("http:lobby")
)

// memChannels is an in-memory channel set.
type memChannels struct {
	mu   sync.Mutex
	set  map[rtsandbox.ChannelKey]bool
	fail error // returned by Enable and Disable, which then change nothing
}

func (m *memChannels) Enabled(k rtsandbox.ChannelKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.set[k]
}

func (m *memChannels) Enable(k rtsandbox.ChannelKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.set[k] = true
	return nil
}

func (m *memChannels) Disable(k rtsandbox.ChannelKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	delete(m.set, k)
	return nil
}

type (
	turnCall    = fakeruntime.Call
	fakeRuntime = fakeruntime.Runtime
)

// echo is the fixture runtime's default answer.
func echo(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
	return rtsandbox.Reply{OK: true, Text: "echo: " + c.Text}, nil
}

type fixture struct {
	api      *API
	router   *router.Router
	rt       *fakeRuntime
	channels *memChannels
	srv      *httptest.Server
	logs     *logRecorder // the router's and the API's operator log
	token    string       // what Options.Token returns; tests may change it
	mu       sync.Mutex
	drops    []string // what router.Options.OnDrop saw: "<channel> <reason>"
}

// dropped returns what OnDrop saw.
func (f *fixture) dropped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.drops)
}

// logRecorder keeps log records as attribute maps, with "msg" and
// "level" among them.
type logRecorder struct {
	mu    sync.Mutex
	attrs []map[string]string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{"msg": r.Message, "level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attrs = append(l.attrs, attrs)
	return nil
}

// records returns the records with message msg.
func (l *logRecorder) records(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, a := range l.attrs {
		if a["msg"] == msg {
			out = append(out, a)
		}
	}
	return out
}

// newFixture serves an API over a router with a fake runtime; lobby is
// sandboxed, alice a member, boss the owner. edit adjusts the options.
func newFixture(t *testing.T, rt *fakeRuntime, edit func(*Options), routerEdits ...func(*router.Options)) *fixture {
	t.Helper()
	if rt == nil {
		rt = &fakeRuntime{Turn: echo}
	}
	f := &fixture{rt: rt, channels: &memChannels{set: map[rtsandbox.ChannelKey]bool{lobby: true}}, token: guestToken, logs: &logRecorder{}}
	pol, err := access.New(access.Rules{Owners: []access.Identity{"http:boss"}, Members: []access.Identity{"http:alice", "http:bob"}})
	if err != nil {
		t.Fatal(err)
	}
	ropts := router.Options{Door: door.New(nil),
		Channels: f.channels, Runtime: rt, Access: pol, Logger: slog.New(f.logs),
		OnDrop: func(ch rtsandbox.ChannelKey, reason string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.drops = append(f.drops, string(ch)+" "+reason)
		},
	}
	for _, e := range routerEdits {
		e(&ropts)
	}
	f.router, err = router.New(ropts)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Router: f.router,
		Token: func() string {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.token
		},
		OwnerToken:    func() string { return ownerToken },
		OwnerID:       "boss",
		LoopbackHosts: true,
		Logger:        slog.New(f.logs),
	}
	if edit != nil {
		edit(&opts)
	}
	f.api, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.router.AddSurface(Prefix, f.api); err != nil {
		t.Fatal(err)
	}
	f.srv = newLoopbackServer(t, f.api)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f.api.Stop()
		if err := f.router.Close(ctx); err != nil {
			t.Errorf("router.Close = %v", err)
		}
		if err := f.api.Close(ctx); err != nil {
			t.Errorf("api.Close = %v", err)
		}
	})
	return f
}

// queueLimit sets the router's per-channel bound.
func queueLimit(n int) func(*router.Options) {
	return func(o *router.Options) { o.QueueLimit = n }
}

// newLoopbackServer serves api on loopback with NewServer's settings; it
// closes when the test ends, after the test's other cleanups.
func newLoopbackServer(t *testing.T, api *API) *httptest.Server {
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = NewServer(api.Handler(), nil)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// do sends a request and returns the status and body.
func (f *fixture) do(t *testing.T, method, path, token, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// post sends a message from alice in lobby that mentions the bot; extra
// JSON fields are merged in.
func (f *fixture) post(t *testing.T, text string, extra string) (int, string) {
	t.Helper()
	body := `{"channel":"http:lobby","author":{"id":"alice","name":"Alice"},"text":` + jsonString(text) + `,"mentions_bot":true` + extra + `}`
	return f.do(t, http.MethodPost, "/api/v1/messages", guestToken, body)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

type sseEvent struct {
	Type string
	Data Event
}

// stream is an open event stream.
type stream struct {
	resp   *http.Response
	events chan sseEvent
	done   chan struct{}
}

// subscribe opens the event stream (query is "" or "?channel=…") and reads
// events in the background until the stream ends or the test does.
func (f *fixture) subscribe(t *testing.T, query string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/api/v1/events"+query, nil)
	req.Header.Set("Authorization", "Bearer "+guestToken)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /api/v1/events = %d; want 200", resp.StatusCode)
	}
	s := &stream{resp: resp, events: make(chan sseEvent, 1024), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.events)
		readSSE(resp.Body, s.events)
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-s.done })
	return s
}

func readSSE(r io.Reader, out chan<- sseEvent) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 128<<20) // events with reply files
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Type != "" {
				out <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.Type = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			_ = json.NewDecoder(bytes.NewReader([]byte(strings.TrimPrefix(line, "data: ")))).Decode(&ev.Data)
		}
	}
}

// next returns the next event or fails after a timeout.
func (s *stream) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			t.Fatal("event stream ended")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

// until collects events until one of type done for message id arrives.
func (s *stream) until(t *testing.T, id string) []sseEvent {
	t.Helper()
	var got []sseEvent
	for {
		e := s.next(t)
		got = append(got, e)
		if e.Type == EventDone && e.Data.MessageID == id {
			return got
		}
	}
}
