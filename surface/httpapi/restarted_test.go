package httpapi

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// restartNotice is what the router delivers about message id of an
// earlier process (router.NotifyRestarted).
func restartNotice(id string) router.Delivery {
	return router.Delivery{Channel: lobby, InReplyTo: id, Kind: router.KindRestarted, Chunk: rtsandbox.RestartingText}
}

// wantNotice requires the next two events of s to be the restart notice
// of message id: the reply with the fixed text, then the done event of a
// message dropped for the shutdown.
func wantNotice(t *testing.T, s *stream, id string) {
	t.Helper()
	got := []sseEvent{s.next(t), s.next(t)}
	want := []sseEvent{
		{Type: EventReply, Data: Event{Channel: lobby, MessageID: id, Chunk: rtsandbox.RestartingText}},
		{Type: EventDone, Data: Event{Channel: lobby, MessageID: id, Dropped: true, Reason: router.DropShuttingDown, Error: textStopping}},
	}
	if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".wire" || p.Last().String() == ".files" }, cmp.Ignore())); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Issue 22 item 3: the restart notice of a message an earlier process
// left unanswered is kept until a stream of its channel opens (the client
// reconnects after the restart), handed to that stream once, and not to
// a later one.
func TestRestartNoticeKeptForTheNextStream(t *testing.T) {
	f := newFixture(t, nil, nil)
	if err := f.api.Deliver(context.Background(), restartNotice("m_old")); err != nil {
		t.Fatal(err)
	}
	other := f.subscribe(t, "?channel=http:other")
	first := f.subscribe(t, "?channel="+string(lobby))
	wantNotice(t, first, "m_old")
	second := f.subscribe(t, "")
	f.api.Deliver(context.Background(), restartNotice("m_later")) // streams are open: sent at once
	wantNotice(t, second, "m_later")
	wantNotice(t, first, "m_later")
	f.api.Deliver(context.Background(), router.Delivery{Channel: "http:other", Kind: router.KindReport, Chunk: "report"})
	if e := other.next(t); e.Type != EventReply || e.Data.Chunk != "report" {
		t.Errorf("first event of another channel's stream = %+v; want the report, no notice", e)
	}
}

// A kept notice no stream took in time is logged, never posted late; the
// kept notices are bounded.
func TestRestartNoticeExpiresLogged(t *testing.T) {
	f := newFixture(t, nil, nil)
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	f.api.hub.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f.api.Deliver(context.Background(), restartNotice("m_old"))
	mu.Lock()
	now = now.Add(keptTTL)
	mu.Unlock()
	s := f.subscribe(t, "")
	f.api.Deliver(context.Background(), router.Delivery{Channel: lobby, Kind: router.KindReport, Chunk: "report"})
	if e := s.next(t); e.Type != EventReply || e.Data.Chunk != "report" {
		t.Errorf("first event after the expiry = %+v; want the report", e)
	}
	if recs := f.logs.records("restart notice not delivered: no event stream of its channel opened in time"); len(recs) != 1 || recs[0]["message"] != "m_old" {
		t.Errorf("log records = %v; want one naming m_old", recs)
	}

	g := newFixture(t, nil, nil)
	for i := range maxKept {
		g.api.Deliver(context.Background(), restartNotice("m_"+string(rune('a'+i%26))))
	}
	g.api.hub.mu.Lock()
	kept := len(g.api.hub.kept)
	g.api.hub.mu.Unlock()
	if kept != maxKept {
		t.Errorf("%d events kept; want the bound %d", kept, maxKept)
	}
}
