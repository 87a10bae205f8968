package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Listener limits, as the reference's node:http server had them.
const (
	MaxConns        = 16               // the 17th connection is closed at once
	HeaderTimeout   = 10 * time.Second // a request must begin within this
	RequestDeadline = 60 * time.Second // a request running longer is cut off
)

// Server serves one handler on a Unix socket: mode 0600 right after
// listen, at most MaxConns connections (more are closed, not queued), one
// request per connection, and the header and request deadlines.
type Server struct {
	path string
	addr net.Addr // the network listener's; nil for a socket
	ln   *capListener
	srv  *http.Server
	done chan error

	closeOnce sync.Once
	closeErr  error
}

// ListenOptions tunes a Server. Zero values take the defaults above; tests
// shorten the deadlines.
type ListenOptions struct {
	Logger          *slog.Logger // the http.Server's own errors; nil discards
	HeaderTimeout   time.Duration
	RequestDeadline time.Duration
}

func (o *ListenOptions) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HeaderTimeout == 0 {
		o.HeaderTimeout = HeaderTimeout
	}
	if o.RequestDeadline == 0 {
		o.RequestDeadline = RequestDeadline
	}
}

// Listen creates the socket at path, restricts it to 0600 (a failure closes
// it and fails: never best effort) and serves h until Close. The directory
// holding path should itself be private; the runtime makes it 0700.
func Listen(path string, h http.Handler, opts ListenOptions) (*Server, error) {
	opts.defaults()
	raw, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("broker listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		raw.Close()
		return nil, fmt.Errorf("broker socket chmod: %w", err)
	}
	s := &Server{path: path, ln: newCapListener(raw, MaxConns), done: make(chan error, 1)}
	s.srv = newHTTPServer(h, opts)
	go func() { s.done <- s.srv.Serve(s.ln) }()
	return s, nil
}

// newHTTPServer is the one http.Server of every broker listener, the Unix
// socket's and the network's: one request per connection, the header and
// request deadlines, bounded headers, recovery and no OPTIONS of its own.
func newHTTPServer(h http.Handler, opts ListenOptions) *http.Server {
	srv := &http.Server{
		Handler:           grownStack(deadline(recoverer(h), opts.RequestDeadline)),
		ReadHeaderTimeout: opts.HeaderTimeout,
		IdleTimeout:       time.Second,
		// A guest that stops reading an answer cannot hold its connection
		// past the request deadline.
		WriteTimeout:   opts.RequestDeadline,
		MaxHeaderBytes: 64 << 10,
		// "OPTIONS *" would otherwise be answered by net/http itself,
		// outside the pipeline and the audit log.
		DisableGeneralOptionsHandler: true,
		ConnContext:                  withConn,
		ErrorLog:                     slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	srv.SetKeepAlivesEnabled(false)
	return srv
}

// Path returns the socket path.
func (s *Server) Path() string { return s.path }

// Close force-closes every connection, stops serving, waits for the serve
// loop to end and removes the socket file. Later calls return the first
// call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	err := s.srv.Close()
	if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	s.ln.closeAll()
	if s.path == "" { // a network listener: no socket file
		return err
	}
	if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

type connKey struct{}

func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// deadline cuts off a request that runs longer than d: its connection is
// closed first, so no response can follow, and then its context ends.
func deadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		conn, _ := r.Context().Value(connKey{}).(net.Conn)
		timer := time.AfterFunc(d, func() {
			if conn != nil {
				conn.Close()
			}
			cancel(errRequestDeadline)
		})
		defer timer.Stop()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

var errRequestDeadline = errors.New("broker request deadline passed")

// grownStack runs h on a stack grown once, to 32 KiB, before h starts.
// Every request comes on a connection of its own (Connection: close), so
// on a new goroutine whose stack starts at 2 KiB, and a model call's
// handler (the request's JSON, the upstream call, the usage events' JSON)
// goes deep enough to need 32 KiB: four growths, each copying the stack
// and adjusting every frame of a deep call chain, about 35 µs of CPU per
// call before the first byte (BenchmarkStreamedAnswer's profile). Growing
// it here, while the stack is three frames deep, costs one cheap copy.
func grownStack(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		growStack(0)
		h.ServeHTTP(w, r)
	})
}

// growStack needs a frame of 24 KiB, so the runtime grows the stack to
// the next size that holds it and what is below: 32 KiB.
//
//go:noinline
func growStack(i int) byte {
	var frame [24 << 10]byte
	frame[i] = 1
	return frame[len(frame)-1-i]
}

// recoverer answers 400 "bad request" if the handler panics before it
// wrote anything, as the reference listener's own fallback did.
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &wroteWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				if !rw.wrote {
					writeOutcome(w, refuse(refBadRequest))
				}
			}
		}()
		h.ServeHTTP(rw, r)
	})
}

type wroteWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *wroteWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *wroteWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer, for
// the flush after each streamed piece and its write deadline.
func (w *wroteWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// capListener closes connections beyond max at once instead of queueing
// them (netutil.LimitListener blocks, which would let a guest hold the
// accept queue).
type capListener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[*capConn]struct{}
}

func newCapListener(ln net.Listener, max int) *capListener {
	return &capListener{Listener: ln, max: max, conns: make(map[*capConn]struct{})}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if cc := l.track(c); cc != nil {
			return cc, nil
		}
		c.Close()
	}
}

func (l *capListener) track(c net.Conn) *capConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		return nil
	}
	cc := &capConn{Conn: c, l: l}
	l.conns[cc] = struct{}{}
	return cc
}

func (l *capListener) forget(c *capConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
}

// closeAll destroys every tracked connection (http.Server.Close already
// closes those it knows; this also covers ones accepted but not yet
// handed to it).
func (l *capListener) closeAll() {
	l.mu.Lock()
	conns := make([]*capConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	c.once.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}
