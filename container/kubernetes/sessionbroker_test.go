package kubernetes

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/wire"
)

// socketBroker stands in for a channel's broker on its socket: it records
// each request's route and whether a token reached it.
type socketBroker struct {
	mu     sync.Mutex
	routes []string
}

func (s *socketBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.routes = append(s.routes, r.URL.Path)
	s.mu.Unlock()
	if r.Header.Get(wire.BrokerTokenHeader) != "" {
		http.Error(w, "token reached the broker", http.StatusTeapot)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

func (s *socketBroker) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.routes...)
}

// coreBroker stands in for broker.Session's binding: one bound turn at a
// time; Execute keeps the turn it was handed.
type coreBroker struct {
	mu     sync.Mutex
	bound  bool
	turns  []wire.SessionTurn
	closed bool
}

func (c *coreBroker) Bind(ctx context.Context, _ wire.SessionBinding) (func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound {
		return nil, broker.ErrTurnActive
	}
	c.bound = true
	return func() { c.mu.Lock(); c.bound = false; c.mu.Unlock() }, nil
}

func (c *coreBroker) Execute(_ context.Context, t wire.SessionTurn) (wire.SessionResult, error) {
	c.mu.Lock()
	c.turns = append(c.turns, t)
	c.mu.Unlock()
	return wire.SessionResult{OK: true, Text: "done"}, nil
}

func (c *coreBroker) Ready() bool  { return true }
func (c *coreBroker) Close() error { c.mu.Lock(); c.closed = true; c.mu.Unlock(); return nil }

type sessionNet struct {
	core   *coreBroker
	sock   *socketBroker
	b      *SessionBroker
	addr   string
	runDir string
	tokens *broker.Tokens
}

func newSessionNet(t *testing.T) *sessionNet {
	t.Helper()
	tokens := broker.NewTokens()
	ln, err := broker.ListenNet("127.0.0.1:0", tokens, broker.NetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := &sessionNet{core: &coreBroker{}, sock: &socketBroker{}, addr: ln.Addr().String(), runDir: t.TempDir(), tokens: tokens}
	sockPath := filepath.Join(n.runDir, wire.SessionSocketName)
	sl, err := net.Listen("unix", sockPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: n.sock, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(sl)
	t.Cleanup(func() { srv.Close() })
	var handed []string
	n.b, err = NewSessionBroker(n.core, tokens, wire.BrokerHello{Broker: n.addr}, sockPath, n.runDir,
		func(p string) error { handed = append(handed, filepath.Base(p)); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(handed) != 1 || !strings.HasPrefix(handed[0], wire.SessionHelloName+".tmp-") {
		t.Errorf("handed to the worker: %q, want the hello file before it is in place", handed)
	}
	t.Cleanup(func() { n.b.Close() })
	return n
}

// hello reads the channel's hello file as the worker does.
func (n *sessionNet) hello(t *testing.T) wire.BrokerHello {
	t.Helper()
	f, err := os.Open(filepath.Join(n.runDir, wire.SessionHelloName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := wire.ReadBrokerHello(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// call posts to route on the listener with token ("" for none) and
// returns the status.
func (n *sessionNet) call(t *testing.T, route, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.addr+route, strings.NewReader(`{}`))
	req.Host = wire.BrokerHost
	if token != "" {
		req.Header.Set(wire.BrokerTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (n *sessionNet) turn(t *testing.T, ctx context.Context) (token string, release func()) {
	t.Helper()
	release, err := n.b.Bind(ctx, wire.SessionBinding{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.b.Execute(ctx, wire.SessionTurn{TurnID: "t"}); err != nil {
		t.Fatal(err)
	}
	n.core.mu.Lock()
	token = string(n.core.turns[len(n.core.turns)-1].BrokerToken)
	n.core.mu.Unlock()
	return token, release
}

// The channel's token, from the hello file in the run directory, covers
// the worker's own routes and nothing else; the file is the worker's,
// read-only, and gone when the broker closes, with its token.
func TestSessionBrokerChannelToken(t *testing.T) {
	n := newSessionNet(t)
	h := n.hello(t)
	if h.Broker != n.addr {
		t.Errorf("hello names %s, want %s", h.Broker, n.addr)
	}
	fi, err := os.Stat(filepath.Join(n.runDir, wire.SessionHelloName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("hello file: %v, %v; want mode 0600", fi, err)
	}
	for _, route := range []string{wire.RouteWorkerReady, wire.RouteWorkerNext, wire.RouteWorkerResult, wire.RouteWorkerConfig, wire.RouteMCPTools} {
		if got := n.call(t, route, h.Token); got != http.StatusOK {
			t.Errorf("channel token on %s: %d, want 200", route, got)
		}
	}
	for _, route := range []string{wire.RouteAnthropicMessages, wire.RouteModel, wire.RouteToolPrefix + "clock", wire.RouteMCPPrefix + "docs", wire.RouteCompactionCompact} {
		if got := n.call(t, route, h.Token); got != http.StatusNotFound {
			t.Errorf("channel token on a turn's route %s: %d, want 404", route, got)
		}
	}
	if got := len(n.sock.got()); got != 5 {
		t.Errorf("%d requests reached the broker, want the 5 worker routes: %q", got, n.sock.got())
	}
	if err := n.b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := n.call(t, wire.RouteWorkerNext, h.Token); got != http.StatusUnauthorized {
		t.Errorf("channel token after close: %d, want 401", got)
	}
	if _, err := os.Stat(filepath.Join(n.runDir, wire.SessionHelloName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("hello file after close: %v", err)
	}
	if !n.core.closed || n.tokens.Live() != 0 {
		t.Errorf("after close: broker closed %v, %d live tokens", n.core.closed, n.tokens.Live())
	}
}

// The attacks on a session turn's token over the network: none, a wrong
// one, the channel's on a turn's route, the turn's on the worker's routes,
// a replay after the turn, another turn's, one whose turn was cancelled.
func TestSessionBrokerTurnTokenAttacks(t *testing.T) {
	n := newSessionNet(t)
	const model = wire.RouteAnthropicMessages
	tok1, release := n.turn(t, context.Background())
	if !wire.ValidBrokerToken(tok1) || tok1 == n.hello(t).Token {
		t.Fatalf("turn token of %d characters: not a token of its own", len(tok1))
	}
	if got := n.call(t, model, tok1); got != http.StatusOK {
		t.Errorf("turn token on the model route: %d, want 200", got)
	}
	for name, c := range map[string]struct {
		route, token string
		want         int
	}{
		"no token":                     {model, "", http.StatusUnauthorized},
		"wrong token":                  {model, strings.Repeat("A", broker.TokenLen), http.StatusUnauthorized},
		"turn token posts a result":    {wire.RouteWorkerResult, tok1, http.StatusNotFound},
		"turn token announces":         {wire.RouteWorkerReady, tok1, http.StatusNotFound},
		"channel token on the model":   {model, n.hello(t).Token, http.StatusNotFound},
		"malformed token":              {model, tok1[:42] + "!", http.StatusUnauthorized},
		"token with a trailing suffix": {model, tok1 + "A", http.StatusUnauthorized},
	} {
		if got := n.call(t, c.route, c.token); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
	release()
	if got := n.call(t, model, tok1); got != http.StatusUnauthorized {
		t.Errorf("replay after the turn: %d, want 401", got)
	}
	tok2, release2 := n.turn(t, context.Background())
	if tok2 == tok1 {
		t.Fatal("the second turn got the first's token")
	}
	if got := n.call(t, model, tok1); got != http.StatusUnauthorized {
		t.Errorf("another turn's token: %d, want 401", got)
	}
	if got := n.call(t, model, tok2); got != http.StatusOK {
		t.Errorf("the second turn's own token: %d, want 200", got)
	}
	release2()
	ctx, cancel := context.WithCancel(context.Background())
	tok3, release3 := n.turn(t, ctx)
	defer release3()
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for n.call(t, model, tok3) != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("a cancelled turn's token still answers")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if live := n.tokens.Live(); live != 1 {
		t.Errorf("%d live tokens after the turns, want the channel's alone", live)
	}
}
