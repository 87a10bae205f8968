package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

func TestPostSendsOnlyRebuiltHeaders(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	if _, err := New(nil).Post(context.Background(), Call{URL: MustParseEndpoint(srv.URL, true), Body: []byte(`{}`), Key: "k1"}); err != nil {
		t.Fatal(err)
	}
	got.Del("Content-Length")
	want := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}, "Authorization": {"Bearer k1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upstream headers (-want +got):\n%s", diff)
	}
}

// An environment proxy never sees the request (or the credential). The
// upstream's name is not loopback (net/http exempts 127.0.0.1 and
// localhost from proxies, which would make this test unable to fail); a
// dialer maps it to the test server.
func TestPostIgnoresEnvironmentProxy(t *testing.T) {
	if NewTransport().Proxy != nil {
		t.Fatal("NewTransport().Proxy is set; want nil")
	}
	var proxied atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxied.Add(1) }))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("HTTPS_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) }))
	defer srv.Close()
	tr := NewTransport()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "upstream.test:80" {
			return nil, fmt.Errorf("dial %s: not the upstream", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	if _, err := New(tr).Post(context.Background(), Call{URL: MustParseEndpoint("http://upstream.test/v1", true), Body: []byte(`{}`), Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("proxy got %d requests; want 0", n)
	}
}

func TestPostBodyLimit(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		chunked bool
		want    error
	}{
		{"exact-limit-declared", MaxResponseBytes, false, nil},
		{"exact-limit-chunked", MaxResponseBytes, true, nil},
		{"over-limit-declared", MaxResponseBytes + 1, false, ErrTooLarge},
		{"over-limit-chunked", MaxResponseBytes + 1, true, ErrTooLarge},
		{"empty", 0, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Repeat("x", tt.size)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tt.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				}
				io.WriteString(w, body)
				if tt.chunked {
					w.(http.Flusher).Flush()
				}
			}))
			defer srv.Close()
			got, err := New(nil).Post(context.Background(), Call{URL: MustParseEndpoint(srv.URL, true)})
			if !errors.Is(err, tt.want) || (tt.want == nil && len(got) != tt.size) {
				t.Errorf("Post = %d bytes, %v; want %d bytes, %v", len(got), err, tt.size, tt.want)
			}
		})
	}
}

func TestPostFailureClasses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect)
		case "/status":
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "secret-in-body")
		default:
			io.WriteString(w, `{}`)
		}
	}))
	defer srv.Close()
	c := New(nil)
	ctx := context.Background()
	if _, err := c.Post(ctx, Call{URL: MustParseEndpoint(srv.URL+"/redirect", true)}); !errors.Is(err, ErrRedirect) {
		t.Errorf("redirect = %v; want ErrRedirect", err)
	}
	_, err := c.Post(ctx, Call{URL: MustParseEndpoint(srv.URL+"/status", true)})
	if !errors.Is(err, ErrStatus) || strings.Contains(err.Error(), "secret-in-body") || strings.Contains(err.Error(), srv.URL) {
		t.Errorf("status = %v; want ErrStatus without body or URL", err)
	}
	if _, err := c.Post(ctx, Call{URL: MustParseEndpoint(srv.URL+"/ok", true), Status: http.StatusCreated}); !errors.Is(err, ErrStatus) {
		t.Errorf("200 when 201 required = %v; want ErrStatus", err)
	}
	_, err = c.Post(ctx, Call{URL: MustParseEndpoint("http://127.0.0.1:1/x", true)})
	if !errors.Is(err, ErrNetwork) || !errors.Is(err, rtsandbox.ErrUpstream) || strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("refused connection = %v; want a content-free ErrNetwork", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Post(cctx, Call{URL: MustParseEndpoint(srv.URL, true)}); !errors.Is(err, ErrCanceled) {
		t.Errorf("canceled = %v; want ErrCanceled", err)
	}
}

// Get: headers rebuilt (no content-type, the key in the header asked
// for), no redirect followed, the body bounded by MaxBytes, statuses
// mapped to the failure classes, one attempt only.
func TestGet(t *testing.T) {
	var hits, targetHits atomic.Int32
	var got http.Header
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { targetHits.Add(1) }))
	defer target.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/ok":
			got = r.Header.Clone()
			io.WriteString(w, `{"q":"`+r.URL.Query().Get("q")+`"}`)
		case "/redirect":
			http.Redirect(w, r, target.URL, http.StatusFound)
		case "/no-location":
			w.WriteHeader(http.StatusMultipleChoices)
		case "/busy":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/large":
			io.WriteString(w, strings.Repeat("x", 101))
		case "/exact":
			io.WriteString(w, strings.Repeat("x", 100))
		case "/large-declared":
			w.Header().Set("Content-Length", "101")
			io.WriteString(w, strings.Repeat("x", 101))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := New(nil)
	ctx := context.Background()
	ep := func(path string) Endpoint { return MustParseEndpoint(srv.URL+path, true) }
	body, err := c.Get(ctx, Call{URL: ep("/ok?q=a"), Key: "k2", KeyHeader: "X-Subscription-Token"})
	if err != nil || string(body) != `{"q":"a"}` {
		t.Fatalf("Get(/ok) = %q, %v", body, err)
	}
	got.Del("Accept-Encoding") // net/http's own, absent with DisableCompression
	want := http.Header{"Accept": {"application/json"}, "X-Subscription-Token": {"k2"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get headers (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name, path string
		max        int
		want       error
		hits       int32
	}{
		{"RedirectNotFollowed", "/redirect", 0, ErrRedirect, 1},
		{"ThreeXXWithoutLocation", "/no-location", 0, ErrRedirect, 1},
		{"StatusOneAttempt", "/busy", 0, ErrStatus, 1},
		{"BodyOverMaxBytes", "/large", 100, ErrTooLarge, 1},
		{"DeclaredOverMaxBytes", "/large-declared", 100, ErrTooLarge, 1},
		{"NotFound", "/missing", 0, ErrStatus, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			body, err := c.Get(ctx, Call{URL: ep(tc.path), MaxBytes: tc.max})
			if !errors.Is(err, tc.want) || !errors.Is(err, rtsandbox.ErrUpstream) || body != nil {
				t.Errorf("Get(%s) = %q, %v; want %v", tc.path, body, err, tc.want)
			}
			if hits.Load() != tc.hits {
				t.Errorf("Get(%s) made %d attempts; want %d", tc.path, hits.Load(), tc.hits)
			}
		})
	}
	if body, err := c.Get(ctx, Call{URL: ep("/exact"), MaxBytes: 100}); err != nil || len(body) != 100 {
		t.Errorf("Get(100 bytes, MaxBytes 100) = %d bytes, %v", len(body), err)
	}
	if targetHits.Load() != 0 {
		t.Errorf("the redirect target was contacted %d times", targetHits.Load())
	}
	if _, err := c.Get(ctx, Call{}); !errors.Is(err, ErrNetwork) {
		t.Errorf("Get(zero Endpoint) = %v; want ErrNetwork", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Get(cctx, Call{URL: ep("/ok")}); !errors.Is(err, ErrCanceled) {
		t.Errorf("Get(canceled) = %v; want ErrCanceled", err)
	}
}
