package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// dropCounter records what Options.OnDrop saw, as "<channel> <reason>".
type dropCounter struct {
	mu    sync.Mutex
	drops []string
}

func (d *dropCounter) option(o *Options) {
	o.OnDrop = func(ch rtsandbox.ChannelKey, reason string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.drops = append(d.drops, string(ch)+" "+reason)
	}
}

func (d *dropCounter) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.drops)
}

// dropsOf is what a dropCounter sees for one drop, nil for none.
func dropsOf(ch rtsandbox.ChannelKey, reason string) []string {
	if reason == "" {
		return nil
	}
	return []string{string(ch) + " " + reason}
}

func TestReason(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"other-error", errors.New("docker down"), ""},
		{"drop", &DropError{Reason: DropDirect}, DropDirect},
		{"wrapped-drop", fmt.Errorf("lane: %w", &DropError{Reason: DropBotAuthor}), DropBotAuthor},
		{"queue-full", ErrQueueFull, DropQueueFull},
		{"stopping", ErrStopping, DropShuttingDown},
		{"refusal-drop", &DropError{Reason: DropQueueFull, Err: ErrQueueFull}, DropQueueFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Reason(tt.err); got != tt.want {
				t.Errorf("Reason(%v) = %q; want %q", tt.err, got, tt.want)
			}
		})
	}
	refusal := &DropError{Reason: DropQueueFull, Err: ErrQueueFull}
	if !errors.Is(refusal, ErrDropped) || !errors.Is(refusal, ErrQueueFull) {
		t.Errorf("a queue-full drop must match ErrDropped and ErrQueueFull")
	}
}

// Admits is a probe and records nothing; Submit decides once and records
// a drop once, returning it at once.
func TestAdmitsIsAProbeSubmitDecides(t *testing.T) {
	drops := &dropCounter{}
	h := newHarness(t, newMemChannels(guests), drops.option)
	unresolved := mention(guests, "mallory", "M", "x")
	if h.r.Admits(unresolved) {
		t.Errorf("Admits(unresolved) = true")
	}
	if got := drops.seen(); len(got) != 0 || len(h.log.records()) != 0 {
		t.Errorf("Admits recorded %q, logs %v; want nothing", got, h.log.messages())
	}
	if done, err := h.r.Submit(unresolved); done != nil || Reason(err) != DropUnknownSpeaker {
		t.Errorf("Submit(unresolved) = %v, %v; want no channel and %q", done, err, DropUnknownSpeaker)
	}
	if diff := cmp.Diff(dropsOf(guests, DropUnknownSpeaker), drops.seen()); diff != "" {
		t.Errorf("OnDrop (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(dropLog, h.log.messages()); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
	if n := len(h.rt.Calls()); n != 0 {
		t.Errorf("a dropped message ran %d turns", n)
	}
}

// A surface's own drop is logged and counted like the router's; a reason
// outside the set is counted as not_admitted, so label values stay fixed.
func TestReportDrop(t *testing.T) {
	drops := &dropCounter{}
	h := newHarness(t, newMemChannels(guests), drops.option)
	h.r.ReportDrop("http:lobby", DropQueueFull)
	h.r.ReportDrop("http:lobby", "made-up")
	want := []string{"http:lobby queue_full", "http:lobby not_admitted"}
	if diff := cmp.Diff(want, drops.seen()); diff != "" {
		t.Errorf("OnDrop (-want +got):\n%s", diff)
	}
	for _, l := range h.log.records() {
		if l.Msg != "message dropped" || l.Attrs["surface"] != "http" || l.Attrs["channel"] != "http:lobby" {
			t.Errorf("log = %+v; want message dropped in http:lobby", l)
		}
	}
}

// A queue-full drop reaches OnDrop, and a panicking hook is contained.
func TestOnDropQueueFullAndPanic(t *testing.T) {
	var calls int
	h := newHarness(t, newMemChannels(guests), func(o *Options) {
		o.QueueLimit = 1
		o.OnDrop = func(rtsandbox.ChannelKey, string) { calls++; panic("metrics broke") }
	})
	gate := make(chan struct{})
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		<-gate
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	first := h.submit(mention(guests, "alice", "Alice", "1"))
	waitQueued(t, h.r, 1)
	err := h.handle(t, mention(guests, "alice", "Alice", "2"))
	if Reason(err) != DropQueueFull || !errors.Is(err, ErrQueueFull) {
		t.Errorf("Handle beyond the bound = %v; want a queue_full drop", err)
	}
	close(gate)
	if err := <-first; err != nil {
		t.Errorf("first = %v", err)
	}
	if calls != 1 {
		t.Errorf("OnDrop called %d times; want 1", calls)
	}
	if diff := cmp.Diff([]string{"fake:guests drop hook"}, panics(h)); diff != "" {
		t.Errorf("recovered panics (-want +got):\n%s", diff)
	}
}

func TestQueueDepth(t *testing.T) {
	h := newHarness(t, newMemChannels(guests, "fake:other"))
	gate := make(chan struct{})
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		<-gate
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	var done []<-chan error
	for _, ch := range []rtsandbox.ChannelKey{guests, guests, "fake:other"} {
		done = append(done, h.submit(mention(ch, "alice", "Alice", "x")))
	}
	waitQueued(t, h.r, 3)
	if got := h.r.QueueDepth(); got != 3 {
		t.Errorf("QueueDepth = %d; want 3 (two running, one waiting)", got)
	}
	close(gate)
	for _, d := range done {
		<-d
	}
	waitQueued(t, h.r, 0)
}

// waitQueued waits until QueueDepth is n.
func waitQueued(t *testing.T, r *Router, n int) {
	t.Helper()
	for range 500 {
		if r.QueueDepth() == n {
			return
		}
		runtimeGosched()
	}
	t.Fatalf("QueueDepth = %d; want %d", r.QueueDepth(), n)
}
