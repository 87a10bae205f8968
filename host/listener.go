package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
)

// listener is one HTTP server the host runs (the chat API, the metrics):
// listening starts in listen, serving in a goroutine, and shutdown lets
// requests in flight finish within StopTimeout.
type listener struct {
	name   string // for log records: "http chat API", "metrics"
	log    *slog.Logger
	srv    *http.Server
	served chan struct{} // closed when srv.Serve returned
}

// listen binds addr (an error names key, the config key of the address)
// and serves srv on it. A server that stops on its own is passed to
// stopped (nil: logged as an error).
func listen(name, key, addr string, srv *http.Server, log *slog.Logger, stopped func(error)) (*listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	l := &listener{name: name, log: log, srv: srv, served: make(chan struct{})}
	go func() {
		defer close(l.served)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			if stopped != nil {
				stopped(fmt.Errorf("%s: %w", name, err))
				return
			}
			log.Error(name+" stopped", "err", err)
		}
	}()
	log.Info(name+" listening", "addr", ln.Addr().String())
	return l, nil
}

// shutdown stops accepting and waits for requests in flight, within
// StopTimeout; then it closes what is left. A nil listener does nothing.
func (l *listener) shutdown() {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := l.srv.Shutdown(ctx); err != nil {
		l.log.Warn(l.name+" did not shut down", "err", err)
		l.srv.Close()
	}
	<-l.served
}
