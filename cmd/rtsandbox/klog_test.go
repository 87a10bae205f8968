package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// What client-go logs through klog reaches serve's log as its JSON
// records, of component client-go, at klog's severity, but for its
// unhandled errors (the copies of an attach the engine cut at an early
// reply) and its errors on a connection the engine closed (the pings of
// that attach), which are debug records; after the undo, serve's log
// hears no more of it.
func TestKlogIntoServeLog(t *testing.T) {
	var buf, debug bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil)).With("app", "rtsandbox")
	undo := routeKlog(log)
	klog.InfoS("watch restarted", "resource", "pods")
	klog.ErrorS(errors.New("connection refused"), "list failed")
	utilruntime.HandleError(errors.New("use of closed network connection"))
	klog.ErrorS(fmt.Errorf("set tcp 127.0.0.1:45506: %w", net.ErrClosed), "Websocket Ping failed")
	undo()
	undo = routeKlog(slog.New(slog.NewJSONHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug})))
	utilruntime.HandleError(errors.New("use of closed network connection"))
	undo()
	if !bytes.Contains(debug.Bytes(), []byte(`"level":"DEBUG"`)) || !bytes.Contains(debug.Bytes(), []byte("use of closed network connection")) {
		t.Errorf("an unhandled error in a debug log = %s; want a debug record", debug.Bytes())
	}
	klog.InfoS("after the undo")
	klog.Flush()

	type record struct {
		Level, Msg, App, Component, Resource, Err string
	}
	var got []record
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var r record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("a line that is not serve's JSON: %q: %v", line, err)
		}
		got = append(got, r)
	}
	want := []record{
		{Level: "INFO", Msg: "watch restarted", App: "rtsandbox", Component: "client-go", Resource: "pods"},
		{Level: "ERROR", Msg: "list failed", App: "rtsandbox", Component: "client-go", Err: "connection refused"},
	}
	if len(got) != len(want) {
		t.Fatalf("records = %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d = %+v; want %+v", i, got[i], want[i])
		}
	}
}
