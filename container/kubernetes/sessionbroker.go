package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/wire"
)

// SessionCore is the channel's own session broker (*broker.Session),
// listening on its socket in the channel's run directory on the host.
type SessionCore interface {
	Bind(ctx context.Context, b wire.SessionBinding) (release func(), err error)
	Execute(ctx context.Context, t wire.SessionTurn) (wire.SessionResult, error)
	Ready() bool
	Close() error
}

// SessionBroker puts a channel's session broker behind the broker's network
// listener, for a worker in a Pod (docs/kubernetes.md, "Session
// channels"). The broker itself stays on its socket, with every rule it
// has; two kinds of token on the listener relay to it:
//
//   - the channel's token, issued when the SessionBroker is made and
//     revoked when it is closed, covers only the worker's own routes
//     (ready, next, result, config, discovery). It is written, as a
//     wire.BrokerHello line, to the run directory's hello file
//     (wire.SessionHelloName), which the channel's Pod alone mounts, at
//     /run/sandbox: where a Docker worker finds its socket;
//   - each bound turn's token, issued at Bind and revoked when the turn
//     is released or its context ends, covers only the turn's routes
//     (model, tools, MCP, compaction). It reaches the worker in the turn
//     it polls (wire.SessionTurn.BrokerToken).
//
// So a token read from the volume cannot spend a turn's budget, a turn's
// token cannot announce a worker or post a result, and neither outlives
// what it was issued for. A route the token does not cover is 404 Not
// found, as the broker answers a route it does not have.
type SessionBroker struct {
	core   SessionCore
	tokens *broker.Tokens
	relay  *Relay
	hello  string // the hello file's path
	revoke func() // the channel token's

	mu   sync.Mutex
	turn string // the bound turn's token, "" when none
}

// NewSessionBroker relays the network listener's tokens to core, listening
// on socket, and writes the hello file into runDir: at listener (its
// address and the CA its certificate chains to, "" for plain TCP), with the
// channel's token. handOver gives the file to the worker's user (the
// session runtime's rule for its socket); the file is written whole, 0600,
// and renamed into place, so the worker never reads half of one.
func NewSessionBroker(core SessionCore, tokens *broker.Tokens, listener wire.BrokerHello, socket, runDir string, handOver func(path string) error) (*SessionBroker, error) {
	relay := NewRelay(socket)
	tok, revoke := tokens.Issue(context.Background(), onlyRoutes(relay, true))
	b := &SessionBroker{core: core, tokens: tokens, relay: relay, revoke: revoke,
		hello: filepath.Join(runDir, wire.SessionHelloName)}
	listener.Token = tok.Reveal()
	if err := writeHello(b.hello, listener, handOver); err != nil {
		revoke()
		relay.Close()
		return nil, err
	}
	return b, nil
}

// writeHello writes h's line to path atomically (privdir.WriteFileWith),
// handing the file to the worker (handOver) before it is in place.
func writeHello(path string, h wire.BrokerHello, handOver func(string) error) error {
	line, err := wire.AppendBrokerHello(nil, h)
	if err == nil {
		err = privdir.WriteFileWith(path, line, handOver)
	}
	if err != nil {
		return fmt.Errorf("broker hello: %w", err)
	}
	return nil
}

// Bind binds the turn on the broker and issues its token, live until the
// turn is released or ctx (the turn's signal) ends.
func (b *SessionBroker) Bind(ctx context.Context, bind wire.SessionBinding) (func(), error) {
	release, err := b.core.Bind(ctx, bind)
	if err != nil {
		return nil, err
	}
	tok, revoke := b.tokens.Issue(ctx, onlyRoutes(b.relay, false))
	b.mu.Lock()
	b.turn = tok.Reveal()
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			revoke()
			b.mu.Lock()
			b.turn = ""
			b.mu.Unlock()
			release()
		})
	}, nil
}

// Execute hands the turn to the worker with the bound turn's token.
func (b *SessionBroker) Execute(ctx context.Context, t wire.SessionTurn) (wire.SessionResult, error) {
	b.mu.Lock()
	t.BrokerToken = wire.TurnToken(b.turn)
	b.mu.Unlock()
	return b.core.Execute(ctx, t)
}

// Ready reports whether the worker announced itself.
func (b *SessionBroker) Ready() bool { return b.core.Ready() }

// Close revokes the channel's token, removes the hello file and closes
// the broker.
func (b *SessionBroker) Close() error {
	b.revoke()
	err := os.Remove(b.hello)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	err = errors.Join(err, b.core.Close())
	b.relay.Close()
	return err
}

// workerRoutes are the routes of the worker's own loop: the channel
// token's, and never a turn's.
var workerRoutes = map[string]bool{
	wire.RouteWorkerReady: true, wire.RouteWorkerConfig: true, wire.RouteWorkerNext: true,
	wire.RouteWorkerResult: true, wire.RouteMCPTools: true,
}

// onlyRoutes passes to h the worker's own routes (own) or all the others
// (!own), and answers the rest 404 Not found.
func onlyRoutes(h http.Handler, own bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if workerRoutes[r.URL.Path] != own {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("Not found"))
			return
		}
		h.ServeHTTP(w, r)
	})
}
