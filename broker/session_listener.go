package broker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// The session listener (docs/session.md, "Session broker"): HTTP/1.1 on a Unix
// socket, 0600 right after listen, at most SessionConfig.MaxConnections
// (rtsandbox.SessionMaxConns by default) connections (more are closed on
// accept, never queued), a 10 s header
// deadline, Connection: close on every answer, no total request timeout
// and no server write timeout. What bounds a request instead is the
// per-request silence limit (SessionConfig.Silence, 120 s): reading the
// body, each chunk must come within it (the read deadline is re-armed per
// chunk and cleared at the body's end; a GET has none), and each write of
// the answer must complete within it (the write deadline is re-armed
// before the head and every chunk). A handler's own think time, such as
// the 45 s long poll or a slow upstream before its first byte, is not
// limited by the listener: the bound turn's deadline and the relay's own
// upstream silence limit bound those. When the silence limit passes while
// the body is read, the connection is closed in both directions.

// MaxSocketPath bounds a session socket path in bytes (docs/session.md, "Session broker";
// sun_path holds 108).
const MaxSocketPath = 100

// Listen serves s on a Unix socket at path (which must not exist; the
// runtime removes a stale one) until Close. A path over MaxSocketPath
// bytes is rtsandbox.ErrSocketPath. A failed chmod closes the socket and fails:
// never best effort.
func (s *Session) Listen(path string) error {
	if len(path) > MaxSocketPath {
		return rtsandbox.ErrSocketPath
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.isClosed || s.server != nil {
		return fmt.Errorf("%w: session broker closed or listening", rtsandbox.ErrInvalid)
	}
	raw, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("session broker listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		raw.Close()
		os.Remove(path)
		return fmt.Errorf("session broker socket chmod: %w", err)
	}
	srv := &Server{path: path, ln: newCapListener(raw, s.cfg.MaxConnections), done: make(chan error, 1)}
	srv.srv = &http.Server{
		Handler:                      s.silenced(recoverer(s)),
		ReadHeaderTimeout:            s.cfg.HeaderTimeout,
		IdleTimeout:                  time.Second,
		MaxHeaderBytes:               64 << 10,
		DisableGeneralOptionsHandler: true,
		ConnContext:                  withConn,
		ErrorLog:                     slog.NewLogLogger(s.b.log.Handler(), slog.LevelDebug),
	}
	srv.srv.SetKeepAlivesEnabled(false)
	go func() { srv.done <- srv.srv.Serve(srv.ln) }()
	s.server = srv
	return nil
}

// Path returns the socket path, "" before Listen.
func (s *Session) Path() string {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.server == nil {
		return ""
	}
	return s.server.Path()
}

// silenced applies the per-request silence limit described above.
func (s *Session) silenced(h http.Handler) http.Handler {
	d := s.cfg.Silence
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Body != nil && r.Body != http.NoBody {
			conn, _ := r.Context().Value(connKey{}).(net.Conn)
			b := &silentBody{ReadCloser: r.Body, rc: rc, d: d, conn: conn}
			b.arm()
			r.Body = b
		}
		h.ServeHTTP(&silentWriter{ResponseWriter: w, rc: rc, d: d}, r)
	})
}

// silentBody re-arms the read deadline per chunk, clears it at the end of
// the body and closes the connection when it passes. A deadline a handler
// set itself (readResult cuts a result body off when its turn ends) is
// not the silence limit: its error passes as it is.
type silentBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	d     time.Duration
	conn  net.Conn
	until time.Time
}

func (b *silentBody) arm() {
	b.until = time.Now().Add(b.d)
	_ = b.rc.SetReadDeadline(b.until)
}

func (b *silentBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(b.until):
		if b.conn != nil {
			b.conn.Close()
		}
		return n, errSilenceBody
	case n > 0 && err == nil:
		b.arm()
	}
	return n, err
}

// silentWriter re-arms the write deadline before the head and each chunk.
type silentWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *silentWriter) WriteHeader(code int) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	w.ResponseWriter.WriteHeader(code)
}

func (w *silentWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *silentWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
