package worker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/wire"
)

// A session worker in a Kubernetes Pod cannot share the host's socket. The
// host writes a hello file into the channel's run directory instead
// (wire.SessionHelloPath, one wire.BrokerHello line): the broker's network
// listener and the channel's token there, which covers only the worker's
// own routes. Each turn then carries a token of its own
// (wire.SessionTurn.BrokerToken) for the turn's routes, revoked when the
// turn ends (docs/kubernetes.md, "Session channels").

// loopBroker is the worker's way to its broker for its own routes: the
// network listener o.Hello names, read again before every call (the host
// writes a new token whenever it makes the channel a new broker, as it
// makes a new socket on Docker, and removes the file while it is down),
// else the socket.
func loopBroker(o SessionOptions) *broker {
	if o.Hello == "" {
		return newBroker(o.Socket)
	}
	h := &helloFile{path: o.Hello}
	return &broker{hello: h.network}
}

// helloFile reads the hello file, and parses it again only when its bytes
// changed.
type helloFile struct {
	path string
	mu   sync.Mutex
	last []byte
	n    *brokerclient.Network
}

var errHelloFile = errors.New("broker hello file unreadable")

func (h *helloFile) network() (*brokerclient.Network, error) {
	data, err := privdir.ReadFile(h.path, wire.MaxBrokerHello, -1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errHelloFile, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n != nil && bytes.Equal(data, h.last) {
		return h.n, nil
	}
	n, err := readHello(bufio.NewReader(bytes.NewReader(data)))
	if err != nil {
		return nil, err
	}
	h.last, h.n = data, n
	return n, nil
}

// useTurnBroker points the turn's routes at the network listener with the
// turn's own token, or back at the loop's broker for "" (after the turn,
// or on a socket, where no token is needed). A worker on the network that
// got no token keeps the loop's, which the host refuses on a turn's
// routes: the turn fails rather than run on the channel's credential.
func (w *sessionWorker) useTurnBroker(token wire.TurnToken) {
	w.broker = w.loop
	if token != "" && w.loop.hello != nil {
		if n, err := w.loop.hello(); err == nil {
			turn := *n
			turn.Token = string(token)
			w.broker = &broker{client: brokerclient.Client{Network: &turn}}
		}
	}
	if w.mcp != nil {
		w.mcp.broker = w.broker
	}
}
