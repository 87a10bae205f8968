package safefetch

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

// inetAton interprets host the way a cgo/glibc resolver would (1–4 parts,
// decimal, octal or hex), so the fuzz target can check that no admitted
// name could be reinterpreted as an address downstream.
func inetAton(host string) (netip.Addr, bool) {
	if host == "" || strings.HasSuffix(host, ".") {
		return netip.Addr{}, false
	}
	for _, p := range strings.Split(host, ".") {
		if p == "" {
			return netip.Addr{}, false
		}
	}
	return parseIPv4(host)
}

// FuzzAdmitURL checks URL admission and the address policy together:
// admission never panics; an admitted URL is idempotent under admission;
// and when a resolver would answer with whatever address the name could be
// read as, a vetted URL never reaches a refused address.
func FuzzAdmitURL(f *testing.F) {
	for _, tc := range admitCases {
		f.Add(tc.in)
	}
	for _, tc := range a3URLCases {
		f.Add(tc.url)
	}
	for _, tc := range policyCases {
		f.Add("http://" + tc.in + "/")
		f.Add("http://[" + tc.in + "]/")
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tgt, err := admit(raw, nil)
		if err != nil {
			return
		}
		href := tgt.href()
		again, err := admit(href, nil)
		if err != nil || again.href() != href {
			t.Fatalf("admit(%q) = %q, but admit(%q) = %v, %v", raw, href, href, again, err)
		}
		if tgt.scheme != "http" && tgt.scheme != "https" {
			t.Fatalf("admit(%q) admitted scheme %q", raw, tgt.scheme)
		}
		if tgt.u.Hostname() != tgt.hostname() {
			t.Fatalf("admit(%q): net/url host %q, admitted host %q", raw, tgt.u.Hostname(), tgt.hostname())
		}
		res := &fakeResolver{fn: func(host string, _ int) ([]netip.Addr, error) {
			if a, ok := inetAton(host); ok {
				return []netip.Addr{a}, nil
			}
			return addrs("8.8.8.8"), nil
		}}
		tr := &fakeTransport{}
		fr := &Fetcher{Resolver: res, Transport: tr}
		if _, err := fr.Fetch(context.Background(), raw, DefaultOptions()); err != nil {
			if tr.count() != 0 {
				t.Fatalf("Fetch(%q) failed with %v after connecting", raw, err)
			}
			return
		}
		for _, h := range tr.hops {
			if !IsPublicAddr(h.Addr) {
				t.Fatalf("Fetch(%q) connected to refused %v", raw, h.Addr)
			}
			if a, ok := tgt.literal(); ok && a.Unmap() != h.Addr {
				t.Fatalf("Fetch(%q) literal %v connected to %v", raw, a, h.Addr)
			}
			if a, ok := inetAton(h.URL.Hostname()); ok && !IsPublicAddr(a) {
				t.Fatalf("Fetch(%q): host %q reads as refused %v", raw, h.URL.Hostname(), a)
			}
		}
	})
}
