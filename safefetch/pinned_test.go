package safefetch

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
)

// rawServer is a loopback HTTP/1.1 server that writes canned responses
// byte for byte (reason phrases, repeated headers, lying lengths). respond
// gets the request and returns the raw response; "" closes the connection.
type rawServer struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	reqs     []*http.Request
	wg       sync.WaitGroup
}

func newRawServer(t *testing.T, respond func(r *http.Request) string) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				r, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				s.mu.Lock()
				s.reqs = append(s.reqs, r)
				s.mu.Unlock()
				io.WriteString(c, respond(r))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *rawServer) port() string { return strconv.Itoa(s.ln.Addr().(*net.TCPAddr).Port) }

func (s *rawServer) lastRequest() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		return nil
	}
	return s.reqs[len(s.reqs)-1]
}

// mapDial is a Pinned.Dial seam: it records each pinned address and
// connects to the loopback address the test maps it to. Unmapped
// addresses are refused with ECONNREFUSED.
type mapDial struct {
	mu    sync.Mutex
	m     map[string]string
	dials []string
}

func (d *mapDial) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, address)
	to, ok := d.m[address]
	d.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", to)
}

func (d *mapDial) got() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.dials, ",")
}

func hopFor(t *testing.T, raw, addr string, maxBytes int64, h http.Header) Hop {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return Hop{URL: u, Addr: netip.MustParseAddr(addr), MaxBytes: maxBytes, Header: requestHeader(h)}
}

func response(status string, headers []string, body string) string {
	return "HTTP/1.1 " + status + "\r\n" + strings.Join(append(headers, "Connection: close"), "\r\n") + "\r\n\r\n" + body
}

func gz(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

func br(s string) string {
	var b bytes.Buffer
	w := brotli.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

func zl(s string) string {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

func rawDeflate(s string) string {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.DefaultCompression)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

func withLength(headers []string, body string) []string {
	return append(headers, "Content-Length: "+strconv.Itoa(len(body)))
}

// TestPinnedControlRefusesLoopback: the production dialer's Control hook
// refuses a non-public connected address even when a caller hands
// RoundTrip one directly, and nothing reaches the listener.
func TestPinnedControlRefusesLoopback(t *testing.T) {
	srv := newRawServer(t, func(*http.Request) string { return response("200 OK", nil, "") })
	_, err := (&Pinned{}).RoundTrip(context.Background(), hopFor(t, "http://never-resolve.invalid:"+srv.port()+"/", "127.0.0.1", 100, nil))
	if !errors.Is(err, ErrNonPublic) {
		t.Fatalf("RoundTrip to 127.0.0.1 error %v; want non-public", err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := srv.accepted.Load(); n != 0 {
		t.Fatalf("listener accepted %d connections; want 0", n)
	}
}

func TestControlPinned(t *testing.T) {
	want := netip.MustParseAddr("8.8.8.8")
	for _, tc := range []struct {
		name, address string
		ok            bool
	}{
		{"match", "8.8.8.8:80", true},
		{"mapped-match", "[::ffff:8.8.8.8]:80", true},
		{"other-public", "1.1.1.1:80", false},
		{"loopback", "127.0.0.1:80", false},
		{"zoned", "[fe80::1%eth0]:80", false},
		{"garbage", "not-an-address", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := controlPinned(want)("tcp4", tc.address, nil)
			if (err == nil) != tc.ok {
				t.Errorf("control(%q) = %v; want ok=%v", tc.address, err, tc.ok)
			}
		})
	}
	if err := controlPinned(netip.MustParseAddr("127.0.0.1"))("tcp4", "127.0.0.1:80", nil); !errors.Is(err, ErrNonPublic) {
		t.Errorf("control for a pinned loopback = %v; want non-public", err)
	}
}

// TestPinnedWithoutDNS is the reference's test (12): the transport connects to the given
// address and never resolves the name (.invalid cannot resolve).
func TestPinnedWithoutDNS(t *testing.T) {
	srv := newRawServer(t, func(*http.Request) string { return response("200 OK", withLength(nil, "pinned"), "pinned") })
	d := &mapDial{m: map[string]string{"8.8.8.8:" + srv.port(): "127.0.0.1:" + srv.port()}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got, err := (&Pinned{Dial: d.dial}).RoundTrip(ctx, hopFor(t, "http://never-resolve.invalid:"+srv.port()+"/", "8.8.8.8", 100, nil))
	if err != nil || string(got.Body) != "pinned" {
		t.Fatalf("RoundTrip = %v, %v; want pinned", got, err)
	}
	if r := srv.lastRequest(); r.Host != "never-resolve.invalid:"+srv.port() {
		t.Errorf("Host %q; want the URL's host and port", r.Host)
	}
}

// TestFetchNativeFailover is the reference's test (13) and B10: failover over real
// sockets keeps Host and does not re-resolve.
func TestFetchNativeFailover(t *testing.T) {
	srv := newRawServer(t, func(r *http.Request) string { return response("200 OK", withLength(nil, r.Host), r.Host) })
	p := srv.port()
	for _, tc := range []struct {
		name  string
		first func(ctx context.Context, network, address string) (net.Conn, error)
	}{
		{"refused-127-0-0-2", func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "tcp4", "127.0.0.2:"+p) // nothing listens there
		}},
		{"net-unreachable", func(context.Context, string, string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: "tcp4", Err: syscall.ENETUNREACH}
		}},
		{"connect-deadline", func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done() // a black hole: only the 3 s connect deadline ends it
			return nil, ctx.Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "connect-deadline" && testing.Short() {
				ciStrict(t, "connect-deadline takes 3 s")
			}
			var mu sync.Mutex
			var dials []string
			dial := func(ctx context.Context, network, address string) (net.Conn, error) {
				mu.Lock()
				dials = append(dials, address)
				mu.Unlock()
				if strings.HasPrefix(address, "8.8.8.8:") {
					return tc.first(ctx, network, address)
				}
				var nd net.Dialer
				return nd.DialContext(ctx, "tcp4", "127.0.0.1:"+p)
			}
			res := staticResolver(map[string][]string{"never-resolve.invalid": {"8.8.8.8", "1.1.1.1"}})
			opts := DefaultOptions()
			opts.Timeout = 8 * time.Second
			got, err := (&Fetcher{Resolver: res, Transport: &Pinned{Dial: dial}}).Fetch(context.Background(), "http://never-resolve.invalid:"+p+"/", opts)
			if err != nil || string(got.Body) != "never-resolve.invalid:"+p {
				t.Fatalf("Fetch = %v, %v; want the echoed Host", got, err)
			}
			if res.count() != 1 || strings.Join(dials, ",") != "8.8.8.8:"+p+",1.1.1.1:"+p {
				t.Errorf("lookups %d, dials %v; want 1, [8.8.8.8 1.1.1.1]", res.count(), dials)
			}
		})
	}
}

// TestPinnedBodies is the reference's test (14), (17) and B8, B9.
func TestPinnedBodies(t *testing.T) {
	bomb := strings.Repeat("x", 10000)
	routes := map[string]string{
		"/teapot":         response("418 Short and Stout", []string{"Content-Length: 2"}, "hi"),
		"/chunked":        response("200 OK", []string{"Transfer-Encoding: chunked"}, "5\r\nhello\r\n0\r\n\r\n"),
		"/chunked-big":    response("200 OK", []string{"Transfer-Encoding: chunked"}, fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 5000, strings.Repeat("y", 5000))),
		"/unbounded":      response("200 OK", nil, strings.Repeat("z", 5000)),
		"/zipped":         response("200 OK", withLength([]string{"Content-Encoding: gzip"}, gz("compressed page")), gz("compressed page")),
		"/gzip-bomb":      response("200 OK", withLength([]string{"Content-Encoding: gzip"}, gz(bomb)), gz(bomb)),
		"/br":             response("200 OK", withLength([]string{"Content-Encoding: br"}, br("compressed page")), br("compressed page")),
		"/br-bomb":        response("200 OK", []string{"Content-Encoding: br"}, br(bomb)),
		"/deflate":        response("200 OK", []string{"Content-Encoding: DEFLATE"}, zl("compressed page")),
		"/deflate-bomb":   response("200 OK", []string{"Content-Encoding: deflate"}, zl(bomb)),
		"/raw-deflate":    response("200 OK", []string{"Content-Encoding: deflate"}, rawDeflate("compressed page")),
		"/declared":       response("200 OK", []string{"Content-Length: 5000", "X-Why: declared"}, ""),
		"/zstd":           response("200 OK", []string{"Content-Encoding: zstd"}, "x"),
		"/stacked":        response("200 OK", []string{"Content-Encoding: gzip, br"}, "x"),
		"/stacked-lines":  response("200 OK", []string{"Content-Encoding: gzip", "Content-Encoding: br"}, "x"),
		"/x-gzip":         response("200 OK", []string{"Content-Encoding: x-gzip"}, "x"),
		"/compress":       response("200 OK", []string{"Content-Encoding: compress"}, "x"),
		"/identity":       response("200 OK", []string{"Content-Encoding: identity", "Content-Length: 2"}, "id"),
		"/empty-gzip":     response("204 No Content", []string{"Content-Encoding: gzip"}, ""),
		"/multi":          response("200 OK", []string{"X-Multi: a", "X-Multi: b", "Content-Length: 0"}, ""),
		"/redirect-huge":  response("302 Found", []string{"Location: /next", "Content-Length: 999999"}, "never read"),
		"/huge-header":    response("200 OK", []string{"X-Big: " + strings.Repeat("h", 100<<10)}, ""),
		"/declared-small": response("200 OK", []string{"Content-Length: 1000"}, strings.Repeat("s", 1000)),
		"/interim":        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + response("200 OK", []string{"Content-Length: 5"}, "final"),
	}
	srv := newRawServer(t, func(r *http.Request) string { return routes[r.URL.Path] })
	d := &mapDial{m: map[string]string{"8.8.8.8:" + srv.port(): "127.0.0.1:" + srv.port()}}
	get := func(path string, max int64) (*Result, error) {
		return (&Pinned{Dial: d.dial}).RoundTrip(context.Background(), hopFor(t, "http://page.test:"+srv.port()+path, "8.8.8.8", max, nil))
	}
	type want struct {
		body, length string
		status       int
		err          error
	}
	for _, tc := range []struct {
		path string
		max  int64
		want want
	}{
		{"/teapot", 1000, want{body: "hi", length: "2", status: 418}},
		{"/chunked", 1000, want{body: "hello", status: 200}},
		{"/chunked-big", 1000, want{err: ErrWireTooLarge}},
		{"/unbounded", 1000, want{err: ErrWireTooLarge}},
		{"/zipped", 1000, want{body: "compressed page", status: 200}},
		{"/zipped", 200, want{body: "compressed page", status: 200}},
		{"/gzip-bomb", 200, want{err: ErrBodyTooLarge}},
		{"/br", 200, want{body: "compressed page", status: 200}},
		{"/br-bomb", 200, want{err: ErrBodyTooLarge}},
		{"/deflate", 200, want{body: "compressed page", status: 200}},
		{"/deflate-bomb", 200, want{err: ErrBodyTooLarge}},
		{"/zstd", 1000, want{err: ErrEncoding}},
		{"/stacked", 1000, want{err: ErrEncoding}},
		{"/stacked-lines", 1000, want{err: ErrEncoding}},
		{"/x-gzip", 1000, want{err: ErrEncoding}},
		{"/compress", 1000, want{err: ErrEncoding}},
		{"/identity", 1000, want{body: "id", length: "2", status: 200}},
		{"/empty-gzip", 1000, want{body: "", status: 204}},
		{"/redirect-huge", 10, want{body: "", length: "999999", status: 302}},
		{"/huge-header", MaxMaxBytes, want{err: ErrWireTooLarge}},
		{"/declared-small", 1000, want{body: strings.Repeat("s", 1000), length: "1000", status: 200}},
		{"/interim", 1000, want{body: "final", length: "5", status: 200}},
	} {
		t.Run(fmt.Sprintf("%s-%d", strings.TrimPrefix(tc.path, "/"), tc.max), func(t *testing.T) {
			got, err := get(tc.path, tc.max)
			if tc.want.err != nil {
				if !errors.Is(err, tc.want.err) {
					t.Fatalf("GET %s = %v, %v; want %v", tc.path, got, err, tc.want.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET %s error %v", tc.path, err)
			}
			if string(got.Body) != tc.want.body || got.Status != tc.want.status || got.Header.Get("Content-Length") != tc.want.length {
				t.Errorf("GET %s = status %d, body %q, length %q; want %d, %q, %q", tc.path, got.Status, got.Body, got.Header.Get("Content-Length"), tc.want.status, tc.want.body, tc.want.length)
			}
			if got.Header.Get("Content-Encoding") != "" {
				t.Errorf("GET %s kept Content-Encoding", tc.path)
			}
		})
	}
	t.Run("teapot-reason", func(t *testing.T) {
		got, err := get("/teapot", 1000)
		if err != nil || got.StatusText != "Short and Stout" {
			t.Fatalf("statusText = %v, %v; want Short and Stout", got, err)
		}
	})
	t.Run("declared-carries-status-and-headers", func(t *testing.T) {
		_, err := get("/declared", 1000)
		var tl *ResponseTooLargeError
		if !errors.As(err, &tl) || tl.Status != 200 || tl.Header.Get("Content-Length") != "5000" || tl.Header.Get("X-Why") != "declared" {
			t.Fatalf("error %#v; want ResponseTooLargeError with 200 and content-length 5000", err)
		}
	})
	t.Run("raw-deflate-fails-in-decoder", func(t *testing.T) {
		_, err := get("/raw-deflate", 1000)
		if err == nil || errors.Is(err, ErrUnsafe) {
			t.Fatalf("error %v; want the decoder's error", err)
		}
	})
	t.Run("multi-joined", func(t *testing.T) {
		got, err := get("/multi", 1000)
		if err != nil || got.Header.Get("X-Multi") != "a, b" {
			t.Fatalf("X-Multi = %v, %v; want \"a, b\"", got, err)
		}
	})
}

// TestFetchWireHeaders is B12: trusted headers are sent, Accept-Encoding on
// the wire is identity, and no environment proxy is used.
func TestFetchWireHeaders(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	srv := newRawServer(t, func(*http.Request) string { return response("200 OK", withLength(nil, "ok"), "ok") })
	d := &mapDial{m: map[string]string{"8.8.8.8:" + srv.port(): "127.0.0.1:" + srv.port()}}
	opts := DefaultOptions()
	opts.Header = http.Header{"User-Agent": {"host-agent"}, "Accept-Encoding": {"br"}, "X-Host-Token": {"trusted"}}
	got, err := (&Fetcher{Resolver: staticResolver(nil), Transport: &Pinned{Dial: d.dial}}).Fetch(context.Background(), "http://page.test:"+srv.port()+"/p?q=1", opts)
	if err != nil || string(got.Body) != "ok" {
		t.Fatalf("Fetch = %v, %v", got, err)
	}
	r := srv.lastRequest()
	for k, want := range map[string]string{
		"User-Agent":      "host-agent",
		"Accept-Encoding": "identity",
		"Accept":          DefaultAccept,
		"X-Host-Token":    "trusted",
		"Connection":      "close",
		"Cookie":          "",
	} {
		if g := r.Header.Get(k); g != want {
			t.Errorf("request %s = %q; want %q", k, g, want)
		}
	}
	if r.Method != "GET" || r.RequestURI != "/p?q=1" || r.Host != "page.test:"+srv.port() || r.ProtoMinor != 1 {
		t.Errorf("request line %s %s %s Host %s", r.Method, r.RequestURI, r.Proto, r.Host)
	}
}

// TestFetchRedirectRealServer runs B1 and B3 against a real server.
func TestFetchRedirectRealServer(t *testing.T) {
	srv := newRawServer(t, func(r *http.Request) string {
		switch r.URL.Path {
		case "/start":
			return response("302 Found", []string{"Location: /private", "Content-Length: 0"}, "")
		case "/to-imds":
			return response("307 Temporary Redirect", []string{"Location: http://169.254.169.254/latest/meta-data/", "Content-Length: 0"}, "")
		}
		return response("200 OK", withLength(nil, "secret"), "secret")
	})
	p := srv.port()
	t.Run("b1-rebinding", func(t *testing.T) {
		d := &mapDial{m: map[string]string{"8.8.8.8:" + p: "127.0.0.1:" + p, "10.0.0.1:" + p: "127.0.0.1:" + p}}
		res := &fakeResolver{fn: func(_ string, n int) ([]netip.Addr, error) {
			if n == 0 {
				return addrs("8.8.8.8"), nil
			}
			return addrs("10.0.0.1"), nil
		}}
		_, err := (&Fetcher{Resolver: res, Transport: &Pinned{Dial: d.dial}}).Fetch(context.Background(), "http://service-rbnd.test:"+p+"/start", DefaultOptions())
		if !errors.Is(err, ErrNonPublic) || d.got() != "8.8.8.8:"+p {
			t.Fatalf("Fetch error %v, dials %s; want non-public after one dial", err, d.got())
		}
	})
	t.Run("b3-redirect-to-imds", func(t *testing.T) {
		d := &mapDial{m: map[string]string{"8.8.8.8:" + p: "127.0.0.1:" + p}}
		_, err := (&Fetcher{Resolver: staticResolver(nil), Transport: &Pinned{Dial: d.dial}}).Fetch(context.Background(), "http://public.test:"+p+"/to-imds", DefaultOptions())
		if !errors.Is(err, ErrNonPublic) || d.got() != "8.8.8.8:"+p {
			t.Fatalf("Fetch error %v, dials %s; want non-public after one dial", err, d.got())
		}
	})
}

// TestFetchTLSVerifiesName: the connection is pinned to the vetted address
// while SNI and certificate verification use the URL's name; a certificate
// for another name fails without failover.
func TestFetchTLSVerifiesName(t *testing.T) {
	var sni atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni.Store(r.TLS.ServerName)
		io.WriteString(w, "tls "+r.Host)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the wrong-name handshake is expected to fail
	srv.StartTLS()
	defer srv.Close()
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	d := &mapDial{m: map[string]string{"8.8.8.8:" + port: srv.Listener.Addr().String(), "1.1.1.1:" + port: srv.Listener.Addr().String()}}
	f := &Fetcher{
		Resolver:  staticResolver(map[string][]string{"example.com": {"8.8.8.8"}, "wrong.test": {"8.8.8.8", "1.1.1.1"}}),
		Transport: &Pinned{Dial: d.dial, TLSConfig: &tls.Config{RootCAs: roots}},
	}
	got, err := f.Fetch(context.Background(), "https://example.com:"+port+"/", DefaultOptions())
	if err != nil || string(got.Body) != "tls example.com:"+port || sni.Load() != "example.com" {
		t.Fatalf("Fetch = %v, %v, SNI %v; want served for example.com", got, err, sni.Load())
	}
	d.dials = nil
	_, err = f.Fetch(context.Background(), "https://wrong.test:"+port+"/", DefaultOptions())
	var certErr *tls.CertificateVerificationError
	if !errors.As(err, &certErr) || d.got() != "8.8.8.8:"+port {
		t.Fatalf("Fetch(wrong.test) error %v, dials %s; want a verification error after one dial", err, d.got())
	}
	// The system roots do not trust the test certificate.
	d.dials = nil
	_, err = (&Fetcher{Resolver: f.Resolver, Transport: &Pinned{Dial: d.dial}}).Fetch(context.Background(), "https://example.com:"+port+"/", DefaultOptions())
	if !errors.As(err, &certErr) {
		t.Fatalf("Fetch with system roots error %v; want a verification error", err)
	}
}

// TestFetchBodyDeadline: a server that stalls mid-body hits the whole-fetch
// deadline.
func TestFetchBodyDeadline(t *testing.T) {
	release := make(chan struct{})
	srv := newRawServer(t, func(*http.Request) string {
		<-release
		return ""
	})
	defer close(release)
	d := &mapDial{m: map[string]string{"8.8.8.8:" + srv.port(): "127.0.0.1:" + srv.port()}}
	opts := DefaultOptions()
	opts.Timeout = 200 * time.Millisecond
	began := time.Now()
	_, err := (&Fetcher{Resolver: staticResolver(nil), Transport: &Pinned{Dial: d.dial}}).Fetch(context.Background(), "http://slow.test:"+srv.port()+"/", opts)
	if !errors.Is(err, ErrTimeout) || time.Since(began) > 3*time.Second {
		t.Fatalf("Fetch error %v after %v; want the timeout", err, time.Since(began))
	}
}
