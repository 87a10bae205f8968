package broker_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/wire"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The common fixture of the broker's tests, after the reference's.
const (
	testChannel rtsandbox.ChannelKey = "fake:guests"
	testModel   string               = "test-model"
	realKey     string               = "real-model-key"
	realMCPKey  string               = "real-mcp-key"
)

var guest = rtsandbox.Speaker{ID: "guest-a", Name: "Guest", PrincipalID: "p_guest_a"}

// secrets are the values no log line, error body or audit record may hold.
var secrets = []string{realKey, realMCPKey}

// recorded is one request an upstream stand-in received.
type recorded struct {
	Path   string
	Header http.Header
	Body   []byte
}

// fakeUpstream is a loopback HTTPS server standing in for a model or MCP
// endpoint. It records every request and answers with reply.
type fakeUpstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	reqs  []recorded
	reply http.HandlerFunc
}

func newUpstream(t testing.TB, reply http.HandlerFunc) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{reply: reply}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *fakeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, recorded{Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
	u.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if u.reply == nil {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[]}`)
		return
	}
	u.reply(w, r)
}

func (u *fakeUpstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

func (u *fakeUpstream) url(path string) string { return u.srv.URL + path }

// client trusts the stand-in's certificate and nothing else changes from
// the production transport.
func (u *fakeUpstream) client() *upstream.Client {
	tr := upstream.NewTransport()
	tr.TLSClientConfig = u.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	return upstream.New(tr)
}

func jsonReply(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

// fixture is one broker turn on the common fixture, with its audit log.
type fixture struct {
	t      *testing.T
	model  *fakeUpstream
	broker *broker.Broker
	turn   *broker.Turn
	cancel context.CancelFunc
	logs   *syncbuf.Buffer
	bodies *syncbuf.Buffer
	scopes []rtsandbox.Binding
	mu     sync.Mutex
}

// newFixture builds a broker for the common fixture; edit adjusts the
// config before construction. At cleanup it asserts that no secret reached
// a log line or a response body.
func newFixture(t *testing.T, model http.HandlerFunc, edit func(*broker.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, logs: &syncbuf.Buffer{}, bodies: &syncbuf.Buffer{}}
	f.model = newUpstream(t, model)
	cfg := broker.Config{
		ModelURL: ep(f.model.url("/v1/chat/completions")),
		Model:    testModel,
		APIKey: func(_ context.Context, s rtsandbox.Binding) (rtsandbox.Secret, error) {
			f.mu.Lock()
			f.scopes = append(f.scopes, s)
			f.mu.Unlock()
			return rtsandbox.Secret(realKey), nil
		},
		Client: f.model.client(),
		Logger: slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	f.broker = b
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.turn = b.Turn(ctx, rtsandbox.Binding{Channel: testChannel, Speaker: guest})
	t.Cleanup(func() {
		cancel()
		assertNoSecrets(t, "audit log", f.logs.String())
		assertNoSecrets(t, "response bodies", f.bodies.String())
	})
	return f
}

func assertNoSecrets(t *testing.T, where, s string) {
	t.Helper()
	for _, k := range secrets {
		if strings.Contains(s, k) {
			t.Errorf("%s contains the secret %q", where, k)
		}
	}
}

// do sends one request through the handler with the worker's headers
// (content-type JSON, the dummy bearer, Host broker) plus extra.
func (f *fixture) do(method, target, body string, extra map[string]string) *httptest.ResponseRecorder {
	f.t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Host = wire.BrokerHost
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+wire.DummyKey)
	for k, v := range extra {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.turn.ServeHTTP(w, r)
	f.bodies.Write(w.Body.Bytes())
	return w
}

func (f *fixture) post(target, body string) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.do(http.MethodPost, target, body, nil)
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int, body string) {
	t.Helper()
	if w.Code != status || (body != "" && w.Body.String() != body) {
		t.Errorf("response = %d %q; want %d %q", w.Code, w.Body.String(), status, body)
	}
}

// shortDir returns a private directory with a short path, for Unix
// sockets (sun_path is 108 bytes).
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bk")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
