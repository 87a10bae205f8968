package main

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"k8s.io/klog/v2"
)

// routeKlog sends what client-go logs (through klog, process-wide) into
// serve's log as records of component client-go: one log of one format
// for the operator, instead of klog's own lines on stderr beside serve's
// JSON. It returns the undo, for tests; serve keeps it for its process.
func routeKlog(log *slog.Logger) (undo func()) {
	klog.SetSlogLogger(slog.New(clientGoHandler{Handler: log.With("component", "client-go").Handler()}))
	return klog.ClearLogger
}

// unhandledLogger is the logger name client-go gives the errors it has no
// caller to return to (k8s.io/apimachinery's runtime.HandleError).
const unhandledLogger = "UnhandledError"

// clientGoHandler lowers client-go's unhandled errors, and its errors of
// connections the engine closed, to debug records.
// They are the stream copies and pings of an attach the engine itself
// cut at a turn's end mark ("use of closed network connection", on every
// early reply), or the retries of a watch the engine reopens: every
// failure that matters reaches the engine as a returned error, which
// serve logs as its own. At error level they would page an operator for
// every sealed turn.
type clientGoHandler struct {
	slog.Handler
	unhandled bool // the logger is client-go's unhandled-error one
}

func (h clientGoHandler) Handle(ctx context.Context, r slog.Record) error {
	unhandled := h.unhandled
	r.Attrs(func(a slog.Attr) bool {
		unhandled = unhandled || isUnhandled(a) || closedByUs(a)
		return !unhandled
	})
	if unhandled && r.Level > slog.LevelDebug {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h clientGoHandler) WithAttrs(as []slog.Attr) slog.Handler {
	u := h.unhandled
	for _, a := range as {
		u = u || isUnhandled(a)
	}
	return clientGoHandler{Handler: h.Handler.WithAttrs(as), unhandled: u}
}

func (h clientGoHandler) WithGroup(name string) slog.Handler {
	return clientGoHandler{Handler: h.Handler.WithGroup(name), unhandled: h.unhandled}
}

func isUnhandled(a slog.Attr) bool { return a.Key == "logger" && a.Value.String() == unhandledLogger }

// closedByUs reports an error of a connection the engine closed itself
// (net.ErrClosed): the WebSocket executor's pings outlive the attach the
// engine cut, and fail once each.
func closedByUs(a slog.Attr) bool {
	err, ok := a.Value.Any().(error)
	return a.Key == "err" && ok && errors.Is(err, net.ErrClosed)
}
