package safefetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// a3URLCases are the URL rows of appendix A.3 (and the reference's test vector (3)
// refusals), fetched through the seams. In every refused case the
// transport must not be called; for a literal host the resolver must not
// be called either.
var a3URLCases = []struct {
	name string
	url  string
	dns  map[string][]string
	err  error  // nil: ALLOW
	addr string // ALLOW: the address the transport must receive
}{
	{"a3-01-loopback", "http://127.0.0.1:80", nil, ErrNonPublic, ""},
	{"a3-02-unspecified-v4", "https://0.0.0.0:443", nil, ErrNonPublic, ""},
	{"a3-03-localhost", "http://localhost:22", map[string][]string{"localhost": {"127.0.0.1", "::1"}}, ErrNonPublic, ""},
	{"a3-04-unspecified-v6", "http://[::]:80/", nil, ErrNonPublic, ""},
	{"a3-09-loopback-127-127", "http://127.127.127.127", nil, ErrNonPublic, ""},
	{"a3-10-single-zero", "http://0/", nil, ErrNonPublic, ""},
	{"a3-12-dotless-decimal", "http://2130706433/", nil, ErrNonPublic, ""},
	{"a3-15-octal", "http://0177.0.0.1/", nil, ErrNonPublic, ""},
	{"a3-22-jar", "jar:http://127.0.0.1!/", nil, ErrScheme, ""},
	{"a3-22-file", "file:///etc/passwd", nil, ErrScheme, ""},
	{"a3-22-file-backslashes", `file://\/\/etc/passwd`, nil, ErrScheme, ""},
	{"a3-22-dict", "dict://attacker:11111/", nil, ErrScheme, ""},
	{"a3-22-gopher", "gopher://127.0.0.1:6379/_save", nil, ErrScheme, ""},
	{"a3-22-ldap", "ldap://localhost:11211/", nil, ErrScheme, ""},
	{"a3-22-sftp", "sftp://evil.com:11111/", nil, ErrScheme, ""},
	{"a3-22-tftp", "tftp://evil.com:12346/x", nil, ErrScheme, ""},
	{"a3-22-netdoc", "netdoc:///etc/passwd", nil, ErrScheme, ""},
	{"a3-24-imds", "http://169.254.169.254/latest/meta-data/", nil, ErrNonPublic, ""},
	{"a3-25-imds-v6", "http://[fd00:ec2::254]/latest/meta-data/", nil, ErrNonPublic, ""},
	{"a3-27-imds-hex-parts", "http://0xA9.0xFE.0xA9.0xFE", nil, ErrNonPublic, ""},
	{"a3-27-imds-hex", "http://0xA9FEA9FE", nil, ErrNonPublic, ""},
	{"a3-30-ecs", "http://169.254.170.2/v2/credentials/x", nil, ErrNonPublic, ""},
	{"a3-33-docker-api", "http://127.0.0.1:2375/v1.24/containers/json", nil, ErrNonPublic, ""},
	{"a3-38-broadcast", "http://255.255.255.255", nil, ErrNonPublic, ""},
	{"a3-38-multicast-v4", "http://224.0.0.1", nil, ErrNonPublic, ""},
	{"a3-38-multicast-v6", "http://[ff00::1]", nil, ErrNonPublic, ""},
	{"a3-39-ietf-dummy", "http://192.0.0.8", nil, ErrNonPublic, ""},
	{"a3-39-cgnat", "http://100.64.0.1", nil, ErrNonPublic, ""},
	{"a3-40-discard", "http://[0100::1]", nil, ErrNonPublic, ""},
	{"a3-40-6to4", "http://[2002::1]", nil, ErrNonPublic, ""},
	{"a3-40-teredo", "http://[2001:0:1::1]", nil, ErrNonPublic, ""},
	{"a3-44-hex-private", "http://0xc0a80014", nil, ErrNonPublic, ""},
	{"a3-46-v6-loopback-path", "http://[::1]/server-status", nil, ErrNonPublic, ""},
	{"a3-47-credentials", "http://user:pass@service.test:8080", nil, ErrScheme, ""},
	{"a3-47-short-user", "http://u:pass@service.test:8080", nil, ErrScheme, ""},
	{"a3-47-short-password", "http://user:p@service.test:8080", nil, ErrScheme, ""},
	{"a3-48-at-decoy", "http://A.com@127.0.0.1", nil, ErrScheme, ""},
	{"a3-54-nat64-imds", "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", nil, ErrNonPublic, ""},
	{"a3-57-6to4-imds", "http://[2002:a9fe:a9fe::]/", nil, ErrNonPublic, ""},
	{"a3-57-6to4-loopback", "http://[2002:7f00:1::]/", nil, ErrNonPublic, ""},
	{"a3-59-nat64-public", "http://[64:ff9b::808:808]/", nil, ErrNonPublic, ""},
	{"a3-64-empty-userinfo", "http://@example.com/", map[string][]string{"example.com": {"93.184.215.14"}}, nil, "93.184.215.14"},
	{"a3-67-short-public", "http://1.256/", nil, nil, "1.0.1.0"},
	{"a3-68-azure-wireserver", "http://168.63.129.16/", nil, nil, "168.63.129.16"},
	{"a3-71-mixed-answer", "http://mixed.test/", map[string][]string{"mixed.test": {"8.8.8.8", "127.0.0.1"}}, ErrNonPublic, ""},
	// The reference's test (3).
	{"upstream-3-file", "file:///etc/passwd", nil, ErrScheme, ""},
	{"upstream-3-gopher", "gopher://example.test/", nil, ErrScheme, ""},
	{"upstream-3-credentials", "http://user:password@example.test", nil, ErrScheme, ""},
	{"upstream-3-decimal", "http://2130706433", nil, ErrNonPublic, ""},
	{"upstream-3-hex", "http://0x7f000001", nil, ErrNonPublic, ""},
	{"upstream-3-octal", "http://0177.0.0.1", nil, ErrNonPublic, ""},
	{"upstream-3-mapped", "http://[::ffff:7f00:1]", nil, ErrNonPublic, ""},
	// More spellings of refused targets.
	{"circled-loopback", "http://①②⑦.⓪.⓪.①/", nil, ErrNonPublic, ""},
	{"percent-loopback", "http://%31%32%37.0.0.1/", nil, ErrNonPublic, ""},
	{"short-loopback", "http://127.1/", nil, ErrNonPublic, ""},
	{"trailing-dot-loopback", "http://127.0.0.1./", nil, ErrNonPublic, ""},
	{"backslash-loopback", `http:/\/127.0.0.1`, nil, ErrNonPublic, ""},
	{"no-slash-loopback", "http:127.0.0.1", nil, ErrNonPublic, ""},
	{"compatible-public", "http://[::8.8.8.8]/", nil, ErrNonPublic, ""},
	{"mapped-imds", "http://[::ffff:169.254.169.254]/", nil, ErrNonPublic, ""},
	{"zone", "http://[fe80::1%25eth0]/", nil, ErrInvalidURL, ""},
	{"metadata-name", "http://metadata.google.internal/", map[string][]string{"metadata.google.internal": {"169.254.169.254"}}, ErrNonPublic, ""},
	{"empty-answer", "http://empty.test/", map[string][]string{"empty.test": {}}, ErrNonPublic, ""},
	{"zoned-answer", "http://zoned.test/", map[string][]string{"zoned.test": {"fe80::1%eth0"}}, ErrNonPublic, ""},
	{"mapped-loopback-answer", "http://mapped.test/", map[string][]string{"mapped.test": {"::ffff:127.0.0.1"}}, ErrNonPublic, ""},
	{"mapped-public-answer", "http://mapped.test/", map[string][]string{"mapped.test": {"::ffff:8.8.8.8"}}, nil, "8.8.8.8"},
	{"mapped-public-literal", "http://[::ffff:8.8.8.8]/", nil, nil, "8.8.8.8"},
	{"public-v6-literal", "https://[2606:4700:4700::1111]:8443/", nil, nil, "2606:4700:4700::1111"},
}

func TestFetchA3(t *testing.T) {
	for _, tc := range a3URLCases {
		t.Run(tc.name, func(t *testing.T) {
			res := staticResolver(tc.dns)
			tr := &fakeTransport{}
			f := &Fetcher{Resolver: res, Transport: tr}
			got, err := f.Fetch(context.Background(), tc.url, DefaultOptions())
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !errors.Is(err, ErrUnsafe) {
					t.Fatalf("Fetch(%q) = %v, %v; want %v", tc.url, got, err, tc.err)
				}
				if n := tr.count(); n != 0 {
					t.Errorf("Fetch(%q): %d transport calls; want 0", tc.url, n)
				}
				if tc.dns == nil && res.count() != 0 {
					t.Errorf("Fetch(%q): %d lookups for a literal; want 0", tc.url, res.count())
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch(%q) error %v; want allowed", tc.url, err)
			}
			if a := tr.addrs(); len(a) != 1 || a[0] != tc.addr {
				t.Errorf("Fetch(%q) connected to %v; want [%s]", tc.url, a, tc.addr)
			}
		})
	}
}

// TestAssertPublicURL is the reference's test (16).
func TestAssertPublicURL(t *testing.T) {
	f := &Fetcher{Resolver: staticResolver(map[string][]string{"bad.test": {"8.8.8.8", "10.0.0.1"}})}
	u, err := f.AssertPublicURL(context.Background(), "http://ok.test/#frag")
	if err != nil || u.String() != "http://ok.test/" {
		t.Fatalf("AssertPublicURL(ok.test) = %v, %v; want http://ok.test/", u, err)
	}
	for _, tc := range []struct {
		name, in string
		err      error
	}{
		{"file", "file:///etc/passwd", ErrScheme},
		{"relative", "/etc/hosts", ErrInvalidURL},
		{"credentials", "http://u:p@ok.test/", ErrScheme},
		{"mixed-answer", "http://bad.test/", ErrNonPublic},
		{"literal", "http://10.0.0.1/", ErrNonPublic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if u, err := f.AssertPublicURL(context.Background(), tc.in); !errors.Is(err, tc.err) {
				t.Errorf("AssertPublicURL(%q) = %v, %v; want %v", tc.in, u, err, tc.err)
			}
		})
	}
}

// TestFetchPinsFirstAnswer is the reference's test (4) and B2: one lookup, the connection
// goes to the first answer even though a later lookup would say loopback.
func TestFetchPinsFirstAnswer(t *testing.T) {
	res := &fakeResolver{fn: func(_ string, n int) ([]netip.Addr, error) {
		if n == 0 {
			return addrs("8.8.8.8"), nil
		}
		return addrs("127.0.0.1"), nil
	}}
	tr := &fakeTransport{}
	got, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "https://example.test", DefaultOptions())
	if err != nil || string(got.Body) != "ok" {
		t.Fatalf("Fetch = %v, %v; want body ok", got, err)
	}
	if res.count() != 1 || joinStrings(tr.addrs()) != "8.8.8.8" {
		t.Errorf("lookups %d, connections %v; want 1, [8.8.8.8]", res.count(), tr.addrs())
	}
	if h := tr.hops[0]; h.URL.Hostname() != "example.test" || got.URL != "https://example.test/" {
		t.Errorf("hop host %q, result URL %q; want the name, not the address", h.URL.Hostname(), got.URL)
	}
}

// TestFetchFailover is the reference's test (5): only connection-class errors fail over,
// in answer order, without re-resolving.
func TestFetchFailover(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENETUNREACH, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ETIMEDOUT} {
		t.Run(errno.Error(), func(t *testing.T) {
			res := staticResolver(map[string][]string{"example.test": {"2606:4700:4700::1111", "8.8.8.8"}})
			tr := &fakeTransport{fn: func(h Hop, _ int) (*Result, error) {
				if h.Addr.Is6() {
					return nil, &net.OpError{Op: "dial", Net: "tcp6", Err: errno}
				}
				return ok("ok"), nil
			}}
			got, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "http://example.test/", DefaultOptions())
			if err != nil || got.Status != 200 {
				t.Fatalf("Fetch = %v, %v; want 200", got, err)
			}
			if res.count() != 1 || joinStrings(tr.addrs()) != "2606:4700:4700::1111,8.8.8.8" {
				t.Errorf("lookups %d, connections %v; want 1, [v6 v4]", res.count(), tr.addrs())
			}
		})
	}
}

func TestFetchNoFailoverOnOtherErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"tls", errors.New("tls: failed to verify certificate")},
		{"too-large", ErrBodyTooLarge},
		{"encoding", ErrEncoding},
		{"non-public-control", ErrNonPublic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := staticResolver(map[string][]string{"example.test": {"8.8.8.8", "1.1.1.1"}})
			tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return nil, tc.err }}
			_, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "http://example.test/", DefaultOptions())
			if !errors.Is(err, tc.err) || tr.count() != 1 {
				t.Errorf("Fetch error %v after %d calls; want %v after 1", err, tr.count(), tc.err)
			}
		})
	}
}

func TestFetchAllAddressesFail(t *testing.T) {
	res := staticResolver(map[string][]string{"example.test": {"8.8.8.8", "1.1.1.1"}})
	tr := &fakeTransport{fn: func(Hop, int) (*Result, error) {
		return nil, &net.OpError{Op: "dial", Net: "tcp4", Err: syscall.ECONNREFUSED}
	}}
	_, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "http://example.test/", DefaultOptions())
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) || tr.count() != 2 || res.count() != 1 {
		t.Fatalf("Fetch error %v, %d calls, %d lookups; want ErrUnreachable, 2, 1", err, tr.count(), res.count())
	}
	if err.Error() != "No vetted address could be reached" {
		t.Errorf("error text %q leaks detail", err.Error())
	}
}

// TestFetchRebinding is the reference's test (6) and B1: the redirect to the same host is
// re-vetted, and the rebound answer is refused before connecting.
func TestFetchRebinding(t *testing.T) {
	for _, tc := range []struct{ host, public, private string }{
		{"service-rbnd.test", "8.8.8.8", "10.0.0.1"},
		{"make-1.2.3.4-rebind-169.254-169.254-rr.1u.ms", "1.2.3.4", "169.254.169.254"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			res := &fakeResolver{fn: func(_ string, n int) ([]netip.Addr, error) {
				if n%2 == 0 {
					return addrs(tc.public), nil
				}
				return addrs(tc.private), nil
			}}
			tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return redirect(302, "/private"), nil }}
			_, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "http://"+tc.host+"/", DefaultOptions())
			if !errors.Is(err, ErrNonPublic) || joinStrings(tr.addrs()) != tc.public || res.count() != 2 {
				t.Fatalf("Fetch error %v, connections %v, lookups %d; want non-public, [%s], 2", err, tr.addrs(), res.count(), tc.public)
			}
		})
	}
}

// TestFetchRedirectToRefused is the reference's test (7) and B3.
func TestFetchRedirectToRefused(t *testing.T) {
	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, tc := range []struct {
			name, loc string
			err       error
		}{
			{"localhost", "http://localhost/", ErrNonPublic},
			{"imds", "http://169.254.169.254/latest/meta-data", ErrNonPublic},
			{"v6-loopback", "http://[::1]/", ErrNonPublic},
			{"file", "file:///etc/passwd", ErrScheme},
			{"gopher", "gopher://127.0.0.1:6379/_save", ErrScheme},
			{"credentials", "http://u:p@public.test/", ErrScheme}, // B7
			{"hex-loopback", "http://0x7f000001/", ErrNonPublic},
			{"protocol-relative-private", "//10.0.0.1/x", ErrNonPublic},
			{"invalid", "http://[::1", ErrInvalidURL},
		} {
			t.Run(fmt.Sprintf("%d-%s", status, tc.name), func(t *testing.T) {
				res := staticResolver(map[string][]string{"localhost": {"127.0.0.1", "::1"}})
				tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return redirect(status, tc.loc), nil }}
				_, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "http://public.test/start", DefaultOptions())
				if !errors.Is(err, tc.err) || tr.count() != 1 {
					t.Fatalf("Fetch error %v after %d calls; want %v after 1", err, tr.count(), tc.err)
				}
			})
		}
	}
}

func TestFetchRedirectFollowed(t *testing.T) {
	res := staticResolver(map[string][]string{"next.test": {"1.1.1.1"}})
	tr := &fakeTransport{fn: func(h Hop, n int) (*Result, error) {
		if n == 0 {
			return redirect(307, "http://next.test/b?q#frag"), nil
		}
		return ok(h.URL.String()), nil
	}}
	opts := DefaultOptions()
	opts.Header = http.Header{"X-Trusted": {"1"}}
	got, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "http://start.test/a", opts)
	if err != nil || got.URL != "http://next.test/b?q" || string(got.Body) != "http://next.test/b?q" {
		t.Fatalf("Fetch = %+v, %v; want the second hop", got, err)
	}
	if joinStrings(tr.addrs()) != "8.8.8.8,1.1.1.1" || tr.hops[1].Header.Get("X-Trusted") != "1" {
		t.Errorf("hops %v, second hop header %v", tr.addrs(), tr.hops[1].Header)
	}
}

// TestFetchOtherThreeHundreds: 300, 304, 305, 306 are results.
func TestFetchOtherThreeHundreds(t *testing.T) {
	for _, status := range []int{300, 304, 305, 306} {
		tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return redirect(status, "/elsewhere"), nil }}
		got, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://public.test/", DefaultOptions())
		if err != nil || got.Status != status || tr.count() != 1 {
			t.Errorf("status %d: Fetch = %v, %v after %d calls; want returned", status, got, err, tr.count())
		}
	}
}

// TestFetchBounds covers the reference's test (9), (10) and B5, B6.
func TestFetchBounds(t *testing.T) {
	t.Run("upstream-9-body-over-max", func(t *testing.T) {
		tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return ok("large"), nil }}
		opts := DefaultOptions()
		opts.MaxBytes = 2
		_, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://public.test/", opts)
		if !errors.Is(err, ErrBodyTooLarge) {
			t.Fatalf("Fetch error %v; want too large", err)
		}
	})
	t.Run("upstream-10-max-redirects-0", func(t *testing.T) {
		tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return redirect(302, "/again"), nil }}
		opts := DefaultOptions()
		opts.MaxRedirects = 0
		_, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://public.test/", opts)
		if !errors.Is(err, ErrTooManyRedirects) || tr.count() != 1 {
			t.Fatalf("Fetch error %v after %d calls; want redirects after 1", err, tr.count())
		}
	})
	t.Run("b5-chain-over-default", func(t *testing.T) {
		tr := &fakeTransport{fn: func(_ Hop, n int) (*Result, error) { return redirect(302, fmt.Sprintf("http://hop%d.test/", n+1)), nil }}
		_, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://hop0.test/", DefaultOptions())
		if !errors.Is(err, ErrTooManyRedirects) || tr.count() != 6 {
			t.Fatalf("Fetch error %v after %d calls; want redirects after 6", err, tr.count())
		}
	})
	t.Run("b5-chain-at-limit", func(t *testing.T) {
		tr := &fakeTransport{fn: func(_ Hop, n int) (*Result, error) {
			if n == 5 {
				return ok("end"), nil
			}
			return redirect(302, fmt.Sprintf("/%d", n+1)), nil
		}}
		got, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://hop0.test/", DefaultOptions())
		if err != nil || string(got.Body) != "end" || tr.count() != 6 {
			t.Fatalf("Fetch = %v, %v after %d calls; want end after 6", got, err, tr.count())
		}
	})
	t.Run("b6-no-location", func(t *testing.T) {
		tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return redirect(301, ""), nil }}
		_, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://public.test/", DefaultOptions())
		if !errors.Is(err, ErrNoLocation) {
			t.Fatalf("Fetch error %v; want redirect without location", err)
		}
	})
}

// TestFetchInvalidBounds is B14. Non-integers and NaN cannot be expressed
// in Go's integer and Duration types; the command's flag parser refuses
// them (cmd/rtsandbox fetch tests).
func TestFetchInvalidBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Options)
	}{
		{"max-bytes-0", func(o *Options) { o.MaxBytes = 0 }},
		{"max-bytes-negative", func(o *Options) { o.MaxBytes = -1 }},
		{"max-bytes-over", func(o *Options) { o.MaxBytes = 33554433 }},
		{"timeout-0", func(o *Options) { o.Timeout = 0 }},
		{"timeout-sub-millisecond", func(o *Options) { o.Timeout = time.Microsecond }},
		{"timeout-over", func(o *Options) { o.Timeout = 120001 * time.Millisecond }},
		{"timeout-negative", func(o *Options) { o.Timeout = -time.Second }},
		{"max-redirects-negative", func(o *Options) { o.MaxRedirects = -1 }},
		{"max-redirects-over", func(o *Options) { o.MaxRedirects = 11 }},
		{"header-bad-name", func(o *Options) { o.Header = http.Header{"Bad Name": {"x"}} }},
		{"header-crlf-value", func(o *Options) { o.Header = http.Header{"X-A": {"a\r\nHost: evil"}} }},
		{"zero-options", func(o *Options) { *o = Options{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultOptions()
			tc.mod(&opts)
			tr := &fakeTransport{}
			res := staticResolver(nil)
			// Bounds are checked before the URL: an invalid URL still
			// reports the bounds.
			_, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), "not a url", opts)
			if !errors.Is(err, ErrInvalidBounds) || tr.count() != 0 || res.count() != 0 {
				t.Fatalf("Fetch error %v; want invalid fetch bounds, no calls", err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		mod  func(*Options)
	}{
		{"max-bytes-1", func(o *Options) { o.MaxBytes = 1 }},
		{"max-bytes-max", func(o *Options) { o.MaxBytes = MaxMaxBytes }},
		{"timeout-1ms", func(o *Options) { o.Timeout = time.Millisecond }},
		{"timeout-max", func(o *Options) { o.Timeout = MaxTimeout }},
		{"max-redirects-0", func(o *Options) { o.MaxRedirects = 0 }},
		{"max-redirects-10", func(o *Options) { o.MaxRedirects = 10 }},
	} {
		t.Run("valid-"+tc.name, func(t *testing.T) {
			opts := DefaultOptions()
			tc.mod(&opts)
			if err := opts.validate(); err != nil {
				t.Errorf("validate() = %v; want nil", err)
			}
		})
	}
}

// TestFetchOneHopAtATime is the reference's test (15) and B12 through the seam.
func TestFetchOneHopAtATime(t *testing.T) {
	tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { return redirect(302, "http://next.test/b"), nil }}
	opts := DefaultOptions()
	opts.NoRedirects = true
	opts.Header = http.Header{"user-agent": {"host-agent"}, "accept-encoding": {"br"}}
	got, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://start.test/a", opts)
	if err != nil || got.Status != 302 || got.Header.Get("Location") != "http://next.test/b" || len(got.Body) != 0 {
		t.Fatalf("Fetch = %+v, %v; want the 302 with its location", got, err)
	}
	if tr.count() != 1 {
		t.Fatalf("%d transport calls; want 1", tr.count())
	}
	h := tr.hops[0].Header
	if h.Get("User-Agent") != "host-agent" || h.Get("Accept-Encoding") != "identity" || h.Get("Accept") != DefaultAccept {
		t.Errorf("hop header %v; want user-agent host-agent, accept-encoding identity, default accept", h)
	}
	res := staticResolver(map[string][]string{"next.test": {"127.0.0.1"}})
	_, err = (&Fetcher{Resolver: res, Transport: tr}).Fetch(context.Background(), got.Header.Get("Location"), opts)
	if !errors.Is(err, ErrNonPublic) || tr.count() != 1 {
		t.Fatalf("follow-up Fetch error %v; want non-public, no new call", err)
	}
}

// TestFetchDeadlines is the reference's test (11) and B13.
func TestFetchDeadlines(t *testing.T) {
	t.Run("resolver-never-answers", func(t *testing.T) {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		res := &fakeResolver{fn: func(string, int) ([]netip.Addr, error) { <-release; return nil, errors.New("late") }}
		opts := DefaultOptions()
		opts.Timeout = 10 * time.Millisecond
		began := time.Now()
		_, err := (&Fetcher{Resolver: res, Transport: &fakeTransport{}}).Fetch(context.Background(), "http://slow.test/", opts)
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnsafe) {
			t.Fatalf("Fetch error %v; want the timeout", err)
		}
		if d := time.Since(began); d > 2*time.Second {
			t.Errorf("Fetch took %v; want about 10ms", d)
		}
	})
	t.Run("transport-never-answers", func(t *testing.T) {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		tr := &fakeTransport{fn: func(Hop, int) (*Result, error) { <-release; return ok("late"), nil }}
		opts := DefaultOptions()
		opts.Timeout = 20 * time.Millisecond
		_, err := (&Fetcher{Resolver: staticResolver(nil), Transport: tr}).Fetch(context.Background(), "http://slow.test/", opts)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Fetch error %v; want the timeout", err)
		}
	})
	t.Run("caller-already-cancelled", func(t *testing.T) {
		cause := errors.New("caller gave up")
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		res := staticResolver(nil)
		tr := &fakeTransport{}
		_, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(ctx, "http://public.test/", DefaultOptions())
		if !errors.Is(err, cause) || res.count() != 0 || tr.count() != 0 {
			t.Fatalf("Fetch error %v, %d lookups, %d calls; want the caller's cause at once", err, res.count(), tr.count())
		}
	})
	t.Run("cancel-is-not-failover", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := staticResolver(map[string][]string{"two.test": {"8.8.8.8", "1.1.1.1"}})
		tr := &fakeTransport{fn: func(Hop, int) (*Result, error) {
			cancel()
			return nil, &net.OpError{Op: "dial", Net: "tcp4", Err: syscall.ECONNREFUSED}
		}}
		_, err := (&Fetcher{Resolver: res, Transport: tr}).Fetch(ctx, "http://two.test/", DefaultOptions())
		if !errors.Is(err, context.Canceled) || tr.count() != 1 {
			t.Fatalf("Fetch error %v after %d calls; want canceled after 1", err, tr.count())
		}
	})
}

// TestFetchResolverErrorUnchanged: DNS failures are not policy refusals.
func TestFetchResolverErrorUnchanged(t *testing.T) {
	dnsErr := &net.DNSError{Err: "no such host", Name: "nx.test", IsNotFound: true}
	res := &fakeResolver{fn: func(string, int) ([]netip.Addr, error) { return nil, dnsErr }}
	_, err := (&Fetcher{Resolver: res, Transport: &fakeTransport{}}).Fetch(context.Background(), "http://nx.test/", DefaultOptions())
	var got *net.DNSError
	if !errors.As(err, &got) || got != dnsErr || errors.Is(err, ErrUnsafe) {
		t.Fatalf("Fetch error %v; want the resolver's error unchanged", err)
	}
}

func TestResponseTooLargeErrorClass(t *testing.T) {
	var err error = &ResponseTooLargeError{Status: 200, Header: http.Header{"Content-Length": {"5000"}}}
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrUnsafe) || err.Error() != "Response exceeds bounds" {
		t.Fatalf("ResponseTooLargeError classes wrong: %v", err)
	}
}
