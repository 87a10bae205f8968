package worker

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox/internal/fakemcp"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/wire"
)

// tokenGate stands in for the host's network listener in front of a
// session broker (docs/kubernetes.md, "Session channels"): the worker's
// own routes must carry the channel's token (the one the hello file names
// now), the turn's routes the turn's own token; anything else is 401.
type tokenGate struct {
	t     *testing.T
	inner http.Handler
	mu    sync.Mutex
	loop  string // the channel token in force
	turn  string // the turn token in force
	seen  []string
}

func (g *tokenGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get(wire.BrokerTokenHeader)
	r.Header.Del(wire.BrokerTokenHeader)
	own := isLoopRoute(r.URL.Path)
	g.mu.Lock()
	want := map[bool]string{true: g.loop, false: g.turn}[own]
	kind := map[bool]string{true: "loop", false: "turn"}[own]
	if tok != want {
		kind = "refused"
	}
	g.seen = append(g.seen, kind+" "+r.URL.Path)
	g.mu.Unlock()
	if kind == "refused" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	g.inner.ServeHTTP(w, r)
}

func isLoopRoute(p string) bool {
	return strings.HasPrefix(p, "/worker/") || p == wire.RouteMCPTools
}

func (g *tokenGate) set(loop, turn string) {
	g.mu.Lock()
	g.loop, g.turn = loop, turn
	g.mu.Unlock()
}

func (g *tokenGate) got() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

// startGate serves b behind a tokenGate on loopback, with the channel
// token 'c'×43 and the turn token 't'×43 in force, and writes the hello
// file naming it.
func startGate(t *testing.T, b http.Handler) (gate *tokenGate, addr, hello string) {
	t.Helper()
	gate = &tokenGate{t: t, inner: b}
	gate.set(token('c'), token('t'))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: gate, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	hello = filepath.Join(t.TempDir(), wire.SessionHelloName)
	writeHello(t, hello, ln.Addr().String(), token('c'))
	return gate, ln.Addr().String(), hello
}

func token(c byte) string { return strings.Repeat(string(c), 43) }

// writeHello writes the hello file as the host does: one line.
func writeHello(t *testing.T, path, addr, tok string) {
	t.Helper()
	line, err := wire.AppendBrokerHello(nil, wire.BrokerHello{Broker: addr, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, line, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A worker whose run directory holds a hello file reaches the broker's
// network listener: its own routes with the channel's token, read again
// from the file before every call (so a host that made the channel a new
// broker is followed), a turn's routes (the model, a host tool, MCP) with
// the turn's own token, and never the one where the other belongs.
func TestSessionWorkerOverTheNetwork(t *testing.T) {
	mcp := fakemcp.New(fakemcp.Tool{Name: "search", Reply: func(args json.RawMessage) string { return "mcp says " + string(args) }})
	defer mcp.Close()
	model := fakemodel.New(
		fakemodel.CallTools(fakemodel.Call("host_lookup", map[string]string{"q": "x"})),
		fakemodel.CallTools(fakemodel.Call("mcp_0_search", map[string]string{"query": "y"})),
		fakemodel.Reply("done"),
		fakemodel.Reply("again"),
	)
	defer model.Close()
	b := startSessionBroker(t, model)
	b.setConfig(toolsConfig, true)
	b.discovery = `{"servers":[{"name":"docs","tools":["search"]}]}`
	b.mcp["docs"] = mcp.URL
	b.tools["lookup"] = func(json.RawMessage) string { return `{"ok":true,"text":"found it"}` }

	gate, addr, hello := startGate(t, b)

	w := startWorkerOn(t, filepath.Join(t.TempDir(), "no.sock"), t.TempDir(), func(o *SessionOptions) { o.Hello = hello })
	turn := sessionTurn("t1", "hello")
	turn.BrokerToken = wire.TurnToken(token('t'))
	if got := b.execute(turn); !got.OK || got.Text != "done" {
		t.Fatalf("first turn: %+v\n%s", got, w.log.String())
	}

	// The host made the channel a new broker: a new channel token in the
	// file, and the next turn's own.
	gate.set(token('C'), token('T'))
	writeHello(t, hello, addr, token('C'))
	turn = sessionTurn("t2", "and now?")
	turn.BrokerToken = wire.TurnToken(token('T'))
	if got := b.execute(turn); !got.OK || got.Text != "again" {
		t.Fatalf("turn after a new channel token: %+v\n%s", got, w.log.String())
	}

	var turnRoutes []string
	for _, s := range gate.got() {
		if strings.HasPrefix(s, "turn ") {
			turnRoutes = append(turnRoutes, strings.TrimPrefix(s, "turn "))
		}
	}
	want := []string{wire.RouteAnthropicMessages, wire.RouteToolPrefix + "lookup", wire.RouteAnthropicMessages,
		wire.RouteMCPPrefix + "docs", wire.RouteMCPPrefix + "docs", wire.RouteMCPPrefix + "docs", wire.RouteAnthropicMessages,
		wire.RouteAnthropicMessages}
	if diff := cmp.Diff(want, turnRoutes); diff != "" {
		t.Errorf("the turns' routes (-want +got):\n%s", diff)
	}
	for _, s := range gate.got() {
		// The one refusal allowed: a poll under the old channel token in
		// the moment between the gate's change and the file's.
		if strings.HasPrefix(s, "refused ") && !isLoopRoute(strings.TrimPrefix(s, "refused ")) {
			t.Errorf("a turn's route went with the wrong token: %s", s)
		}
	}
}

// A turn that comes without a token on the network runs on the
// channel's token, which the host refuses on a turn's routes: the turn
// fails, it never runs on the channel's credential.
func TestSessionWorkerNetworkTurnWithoutToken(t *testing.T) {
	model := fakemodel.New(fakemodel.Reply("never"))
	defer model.Close()
	b := startSessionBroker(t, model)
	_, _, hello := startGate(t, b)
	startWorkerOn(t, filepath.Join(t.TempDir(), "no.sock"), t.TempDir(), func(o *SessionOptions) { o.Hello = hello })
	if got := b.execute(sessionTurn("t1", "hello")); got.OK {
		t.Fatalf("a turn without its token ran: %+v", got)
	}
	if n := len(model.Requests()); n != 0 {
		t.Errorf("the model was reached %d times", n)
	}
}
