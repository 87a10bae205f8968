package safefetch

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeResolver answers from fn and records every lookup. fn receives the
// host and the 0-based call number for that host.
type fakeResolver struct {
	mu    sync.Mutex
	calls []string
	fn    func(host string, n int) ([]netip.Addr, error)
}

func (r *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	n := 0
	for _, h := range r.calls {
		if h == host {
			n++
		}
	}
	r.calls = append(r.calls, host)
	r.mu.Unlock()
	if network != "ip" {
		return nil, errors.New("unexpected network " + network)
	}
	return r.fn(host, n)
}

func (r *fakeResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// staticResolver answers from a table; names not in it get 8.8.8.8.
func staticResolver(table map[string][]string) *fakeResolver {
	return &fakeResolver{fn: func(host string, _ int) ([]netip.Addr, error) {
		ss, ok := table[host]
		if !ok {
			ss = []string{"8.8.8.8"}
		}
		return addrs(ss...), nil
	}}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// fakeTransport records every hop and answers from fn (200 "ok" if nil).
type fakeTransport struct {
	mu   sync.Mutex
	hops []Hop
	fn   func(hop Hop, n int) (*Result, error)
}

func (f *fakeTransport) RoundTrip(_ context.Context, hop Hop) (*Result, error) {
	f.mu.Lock()
	n := len(f.hops)
	f.hops = append(f.hops, hop)
	f.mu.Unlock()
	if f.fn == nil {
		return ok("ok"), nil
	}
	return f.fn(hop, n)
}

func (f *fakeTransport) addrs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, h := range f.hops {
		out = append(out, h.Addr.String())
	}
	return out
}

func (f *fakeTransport) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.hops)
}

func ok(body string) *Result {
	return &Result{Status: 200, StatusText: "OK", Header: http.Header{}, Body: []byte(body)}
}

func redirect(status int, loc string) *Result {
	h := http.Header{}
	if loc != "" {
		h.Set("Location", loc)
	}
	return &Result{Status: status, Header: h}
}

// ciStrict fails instead of skipping under CI=true.
func ciStrict(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}

func joinStrings(ss []string) string { return strings.Join(ss, ",") }
