package memstore

// Through the real broker: the memory tools registered on a
// broker.Session, called over its Unix socket the way the worker calls
// them (POST /tools/<name> with {"input":{…}}), are bound to the bound
// turn's speaker.

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// memorySession is a broker.Session with the memory tools of s, listening
// on a short socket path, and a client for it.
type memorySession struct {
	t      *testing.T
	sess   *broker.Session
	client *http.Client
}

func newMemorySession(t *testing.T, s *Store) *memorySession {
	t.Helper()
	var tools []broker.Tool
	for _, tl := range s.Tools(nil) {
		tools = append(tools, broker.Tool{Spec: tl.Spec(), Impl: tl})
	}
	b, err := broker.New(broker.Config{
		API: rtsandbox.ModelAPIAnthropic, Stream: true,
		// Never called: the test makes tool calls only.
		ModelURL: upstream.MustParseEndpoint("http://127.0.0.1:9/v1/messages", true), Model: "m",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "k", nil },
		Tools:  tools,
	})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := broker.NewSession(broker.SessionConfig{Broker: b, WorkerImage: "sandbox:test",
		Worker: wire.SessionWorkerConfig{ModelAPI: rtsandbox.ModelAPIAnthropic, Model: "m", Stream: true}})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rts")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "broker.sock")
	if err := sess.Listen(sock); err != nil {
		t.Fatal(err)
	}
	m := &memorySession{t: t, sess: sess, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}}
	t.Cleanup(func() {
		if err := sess.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		m.client.CloseIdleConnections()
		os.RemoveAll(dir)
	})
	return m
}

// post sends body to route as the worker does and returns the answer.
func (m *memorySession) post(route, body string) (int, string) {
	m.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://broker"+route, strings.NewReader(body))
	if err != nil {
		m.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+wire.SessionDummyOAuthKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := m.client.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		m.t.Fatal(err)
	}
	return res.StatusCode, string(data)
}

// bind binds a turn of sp in chanA until the returned release.
func (m *memorySession) bind(sp rtsandbox.Speaker) func() {
	m.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	release, err := m.sess.Bind(ctx, wire.SessionBinding{Binding: bind(chanA, sp), Profile: "studio",
		Thinking: "low", Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		m.t.Fatal(err)
	}
	return func() { release(); cancel() }
}

// TestSessionBrokerMemoryBoundToSpeaker: over the socket, a worker that
// keeps privacy saves alice's fact as alice's; the answer is private to
// her; bob's turn cannot read it, whatever his input says (the broker's
// schema refuses extra members with 400 before the tool runs), and sees
// the channel notes.
func TestSessionBrokerMemoryBoundToSpeaker(t *testing.T) {
	s, _ := testStore(t, nil)
	m := newMemorySession(t, s)
	if status, body := m.post(wire.RouteWorkerReady, `{"capabilities":{"privateTo":true,"readerRecords":true}}`); status != 200 {
		t.Fatalf("ready = %d %s", status, body)
	}
	release := m.bind(alice)
	steps := []struct {
		route, body string
		status      int
		answer      string
	}{
		{"/tools/memory_set", `{"input":{"scope":"speaker","key":"drink","text":"Tea"}}`, 200, `{"ok":true,"text":"Saved.","privateTo":"alice"}`},
		{"/tools/memory_set", `{"input":{"scope":"channel","key":"meeting","text":"Wednesday"}}`, 200, `{"ok":true,"text":"Saved."}`},
		{"/tools/memory_get", `{"input":{"scope":"speaker"},"speaker":{"id":"bob"}}`, 200, `{"ok":true,"text":"[{\"key\":\"drink\",\"text\":\"Tea\"}]","privateTo":"alice"}`},
	}
	for _, st := range steps {
		if status, body := m.post(st.route, st.body); status != st.status || body != st.answer {
			t.Errorf("alice %s %s = %d %s; want %d %s", st.route, st.body, status, body, st.status, st.answer)
		}
	}
	release()
	defer m.bind(bob)()
	for _, st := range []struct {
		body   string
		status int
		answer string
	}{
		{`{"input":{"scope":"speaker"}}`, 200, `{"ok":true,"text":"[]","privateTo":"bob"}`},
		{`{"input":{"scope":"speaker","speaker":"alice"}}`, 400, ""},
		{`{"input":{"scope":"speaker:alice"}}`, 400, ""},
		{`{"input":{"scope":"channel"}}`, 200, `{"ok":true,"text":"[{\"key\":\"meeting\",\"text\":\"Wednesday\"}]"}`},
	} {
		status, body := m.post("/tools/memory_get", st.body)
		if status != st.status || (st.answer != "" && body != st.answer) || strings.Contains(body, "Tea") {
			t.Errorf("bob memory_get %s = %d %s; want %d %s", st.body, status, body, st.status, st.answer)
		}
	}
	if got, vis, err := s.Block(context.Background(), bind(chanA, alice)); err != nil || !strings.Contains(got, "Tea") || vis != wire.MemoryPrivate {
		t.Errorf("alice's block = %q, %q, %v", got, vis, err)
	}
}

// TestSessionBrokerMemoryPrivacyGate: with a worker that did not declare
// the privacy capabilities, a speaker-scope answer is never released
// (409, the docs/broker.md, "The listener" problem) and the turn fails; channel notes still are.
func TestSessionBrokerMemoryPrivacyGate(t *testing.T) {
	s, _ := testStore(t, nil)
	mustCall(t, s, bind(chanA, alice), "memory_set", `{"scope":"speaker","key":"drink","text":"Tea"}`)
	m := newMemorySession(t, s)
	if status, _ := m.post(wire.RouteWorkerReady, `{}`); status != 200 {
		t.Fatal("ready refused")
	}
	defer m.bind(alice)()
	if status, body := m.post("/tools/memory_get", `{"input":{"scope":"channel"}}`); status != 200 || body != `{"ok":true,"text":"[]"}` {
		t.Errorf("channel get = %d %s", status, body)
	}
	status, body := m.post("/tools/memory_get", `{"input":{"scope":"speaker"}}`)
	if status != http.StatusConflict || strings.Contains(body, "Tea") || !strings.Contains(body, "rebuild") {
		t.Errorf("speaker get on an old worker = %d %s; want 409 with the rebuild problem", status, body)
	}
}
