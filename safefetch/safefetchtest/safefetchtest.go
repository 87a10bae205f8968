// Package safefetchtest serves tests of code that fetches through
// safefetch: a Fetcher whose seams reach a local test server while the
// production policy runs unchanged.
package safefetchtest

import (
	"context"
	"net"
	"net/http/httptest"
	"net/netip"

	"github.com/rtsandbox/rtsandbox/safefetch"
)

// Loopback returns a Fetcher that resolves each name of names to its
// address (any other name does not exist) and connects every vetted
// address to srv. Admission, address vetting and the body bounds all run
// as in production, so a name mapped to a private address is refused; no
// DNS query is ever made.
func Loopback(srv *httptest.Server, names map[string]string) *safefetch.Fetcher {
	return &safefetch.Fetcher{
		Resolver: resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
			if a, ok := names[host]; ok {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}),
		Transport: &safefetch.Pinned{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, srv.Listener.Addr().String())
		}},
	}
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}
