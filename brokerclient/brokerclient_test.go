package brokerclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve answers on a Unix socket with h and returns the socket path.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "b.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	srv.SetKeepAlivesEnabled(false)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// The request carries exactly the headers the broker allows.
func TestPostSendsOnlyAllowedHeaders(t *testing.T) {
	var got http.Header
	var host, te string
	var closeHdr bool
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got, host, closeHdr = r.Header.Clone(), r.Host, r.Close
		te = strings.Join(r.TransferEncoding, ",")
		io.WriteString(w, `{"ok":true}`)
	})
	body, err := (&brokerclient.Client{Socket: sock}).Post(context.Background(), wire.RouteModel, []byte(`{"messages":[]}`))
	if err != nil || string(body) != `{"ok":true}` {
		t.Fatalf("Post = %q, %v", body, err)
	}
	want := http.Header{
		"Content-Type":   {"application/json"},
		"Content-Length": {"15"},
		"Authorization":  {"Bearer sandbox-dummy-key"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if host != "broker" || te != "" || closeHdr {
		t.Errorf("host %q, transfer-encoding %q, close %v; want broker, none, false", host, te, closeHdr)
	}
}

func TestPostRefusalsAndLimits(t *testing.T) {
	tests := []struct {
		name string
		h    http.HandlerFunc
		want error
	}{
		{"status-429", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) }, brokerclient.ErrRefused},
		{"status-502", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }, brokerclient.ErrRefused},
		{"too-large", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("x", rtsandbox.MaxBrokerResponse+1))
		}, brokerclient.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := (&brokerclient.Client{Socket: serve(t, tt.h)}).Post(context.Background(), wire.RouteModel, []byte(`{}`))
			if !errors.Is(err, tt.want) {
				t.Errorf("Post = %v; want %v", err, tt.want)
			}
		})
	}
	var se *brokerclient.StatusError
	_, err := (&brokerclient.Client{Socket: serve(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(410) })}).Post(context.Background(), "/m", []byte(`{}`))
	if !errors.As(err, &se) || se.Status != 410 {
		t.Errorf("Post = %v; want StatusError 410", err)
	}
}

func TestPostHonoursDeadline(t *testing.T) {
	release := make(chan struct{})
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	start := time.Now()
	_, err := (&brokerclient.Client{Socket: sock, Timeout: 100 * time.Millisecond}).Post(context.Background(), wire.RouteModel, []byte(`{}`))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("Post past deadline = %v after %v; want DeadlineExceeded promptly", err, time.Since(start))
	}
}

func TestPostNoSocket(t *testing.T) {
	if _, err := (&brokerclient.Client{Socket: filepath.Join(t.TempDir(), "none.sock")}).Post(context.Background(), wire.RouteModel, []byte(`{}`)); err == nil {
		t.Error("Post to a missing socket = nil; want an error")
	}
}

// A refusal keeps the start of a 400's body (at most MaxErrorBody bytes),
// so that the worker can tell "prompt is too long"; no other status's
// body is read, and the body never reaches Error.
func TestPostKeepsOnlyA400Body(t *testing.T) {
	const tooLong = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`
	long := strings.Repeat("b", brokerclient.MaxErrorBody+10)
	tests := []struct {
		name     string
		status   int
		body     string
		wantBody string
	}{
		{"400 kept", 400, tooLong, tooLong},
		{"400 cut at the bound", 400, long, long[:brokerclient.MaxErrorBody]},
		{"429 not read", 429, tooLong, ""},
		{"502 not read", 502, tooLong, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			_, err := (&brokerclient.Client{Socket: sock}).Post(context.Background(), wire.RouteModel, []byte(`{}`))
			var se *brokerclient.StatusError
			if !errors.As(err, &se) || se.Status != tt.status || string(se.Body) != tt.wantBody {
				t.Fatalf("Post = %v; want StatusError %d with body %.40q", err, tt.status, tt.wantBody)
			}
			if strings.Contains(err.Error(), "prompt") || strings.Contains(err.Error(), "bbb") {
				t.Errorf("the body reached Error: %q", err)
			}
		})
	}
}
