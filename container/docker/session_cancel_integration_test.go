package docker

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

// holdingProxy forwards Engine API requests to the daemon and holds the
// daemon's answer to the first POST whose path ends in suffix: held is
// closed once the daemon has answered it (the work is done), and the
// answer goes on to the client only when release is closed. A client that
// gives up meanwhile sees what the Docker client sees when its context
// ends during a request the daemon still completes.
type holdingProxy struct {
	path          string
	suffix        string
	held, release chan struct{}
	once, freed   sync.Once
	srv           *http.Server
	tr            *http.Transport
}

// startHoldingProxy listens on a fresh socket; the test's end releases
// the held answer and closes the proxy.
func startHoldingProxy(t *testing.T, suffix string) *holdingProxy {
	t.Helper()
	network, address, err := dockertest.Daemon()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rts")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{
		path: filepath.Join(dir, "engine.sock"), suffix: suffix,
		held: make(chan struct{}), release: make(chan struct{}),
		tr: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		}},
	}
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.srv = &http.Server{Handler: &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker" },
		Transport: p,
		ErrorLog:  log.New(io.Discard, "", 0), // the client that gave up is gone
	}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = p.srv.Serve(ln)
	}()
	t.Cleanup(func() {
		p.free()
		_ = p.srv.Close()
		<-served
		p.tr.CloseIdleConnections()
		os.RemoveAll(dir)
	})
	return p
}

// RoundTrip forwards r and holds the answer the proxy waits for.
func (p *holdingProxy) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := p.tr.RoundTrip(r)
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, p.suffix) {
		p.once.Do(func() {
			close(p.held)
			<-p.release
		})
	}
	return res, err
}

// free lets the held answer through.
func (p *holdingProxy) free() { p.freed.Do(func() { close(p.release) }) }

// TestIntegrationSessionEnsureRunningCancelled: on a real daemon, a ctx
// that ends while the engine creates or starts the session container
// leaves no container behind. The proxy holds the daemon's answer, so the
// daemon has made (or started) the container when the caller gives up;
// EnsureRunning waits for the answer, removes the container by its exact
// name and reports ErrAborted. Before the fix the create was left in state
// "created" (TestSessionServeStopDuringStart under load) and the start
// left a running container.
func TestIntegrationSessionEnsureRunningCancelled(t *testing.T) {
	needDocker(t)
	for _, tt := range []struct{ name, suffix string }{
		{"during create", "/containers/create"},
		{"during start", "/start"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startHoldingProxy(t, tt.suffix)
			d := newSessionDriver(dockertest.ClientVia(t, p.path))
			spec := sessionSpec(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- d.EnsureRunning(ctx, spec) }()
			select {
			case <-p.held:
			case err := <-errc:
				t.Fatalf("EnsureRunning = %v before the engine answered", err)
			}
			cancel()
			p.free()
			var err error
			select {
			case err = <-errc:
			case <-time.After(60 * time.Second):
				t.Fatal("EnsureRunning did not return")
			}
			if !errors.Is(err, rtcontainer.ErrAborted) || !errors.Is(err, context.Canceled) {
				t.Errorf("EnsureRunning = %v; want ErrAborted with the cause", err)
			}
			st, err := newSessionDriver(integ.cli).Status(context.Background(), spec.Name)
			if err != nil || st.State != rtcontainer.StateMissing {
				t.Errorf("container after the cancelled EnsureRunning: %+v, %v; want none", st, err)
			}
		})
	}
}
