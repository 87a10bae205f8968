package main

import (
	"log/slog"

	"k8s.io/klog/v2"
)

// routeKlog sends what client-go logs (through klog, process-wide) into
// serve's log as records of component client-go: one log of one format
// for the operator, instead of klog's own lines on stderr beside serve's
// JSON. It returns the undo, for tests; serve keeps it for its process.
func routeKlog(log *slog.Logger) (undo func()) {
	klog.SetSlogLogger(log.With("component", "client-go"))
	return klog.ClearLogger
}
