package kubernetes

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"

	"github.com/rtsandbox/rtsandbox/wire"
)

// Relay is the handler a turn's token names on the broker's network
// listener: it forwards each request, unchanged but for the token the
// listener already removed, to the turn's broker on its Unix socket, and
// streams the answer back as it comes (a streamed model answer is flushed
// event by event). Every broker rule (routes, headers, budgets,
// reflection, the host-bound identity) is the socket's broker's: the relay
// adds no header (no Connection, X-Forwarded-*, Accept-Encoding) and
// removes only the hop-by-hop ones. A socket that does not answer is 502
// with a fixed body. Close drops its idle connections when the turn ends.
type Relay struct {
	tr    *http.Transport
	proxy *httputil.ReverseProxy
}

// NewRelay is the relay to the broker listening on socket.
func NewRelay(socket string) *Relay {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		// Keep-alives stay on: without them every request would carry
		// "Connection: close", a header the broker refuses.
		DisableCompression: true,
	}
	return &Relay{tr: tr, proxy: &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = wire.BrokerHost
			r.Out.Host = r.In.Host
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			http.Error(w, "broker unavailable", http.StatusBadGateway)
		},
	}}
}

func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.proxy.ServeHTTP(w, req) }

// Close closes the relay's idle connections to the socket.
func (r *Relay) Close() { r.tr.CloseIdleConnections() }
