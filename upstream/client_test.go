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
	if _, err := New(nil).Post(context.Background(), Call{URL: srv.URL, Body: []byte(`{}`), Key: "k1"}); err != nil {
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
	if _, err := New(tr).Post(context.Background(), Call{URL: "http://upstream.test/v1", Body: []byte(`{}`), Key: "k"}); err != nil {
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
			got, err := New(nil).Post(context.Background(), Call{URL: srv.URL})
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
	if _, err := c.Post(ctx, Call{URL: srv.URL + "/redirect"}); !errors.Is(err, ErrRedirect) {
		t.Errorf("redirect = %v; want ErrRedirect", err)
	}
	_, err := c.Post(ctx, Call{URL: srv.URL + "/status"})
	if !errors.Is(err, ErrStatus) || strings.Contains(err.Error(), "secret-in-body") || strings.Contains(err.Error(), srv.URL) {
		t.Errorf("status = %v; want ErrStatus without body or URL", err)
	}
	if _, err := c.Post(ctx, Call{URL: srv.URL + "/ok", Status: http.StatusCreated}); !errors.Is(err, ErrStatus) {
		t.Errorf("200 when 201 required = %v; want ErrStatus", err)
	}
	_, err = c.Post(ctx, Call{URL: "http://127.0.0.1:1/x"})
	if !errors.Is(err, ErrNetwork) || !errors.Is(err, rtsandbox.ErrUpstream) || strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("refused connection = %v; want a content-free ErrNetwork", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Post(cctx, Call{URL: srv.URL}); !errors.Is(err, ErrCanceled) {
		t.Errorf("canceled = %v; want ErrCanceled", err)
	}
}
