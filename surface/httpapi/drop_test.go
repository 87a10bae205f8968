package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Every message the router drops at once answers 200 with its reason, in
// both modes; the router logs it (no content) and reports it to OnDrop.
func TestDropReasonsAtOnce(t *testing.T) {
	tests := []struct {
		name, body, channel, reason string
	}{
		{"not-addressed", `{"channel":"http:lobby","author":{"id":"alice"},"text":"secret-text"}`, "http:lobby", router.DropNotAddressed},
		{"not-sandboxed", `{"channel":"http:elsewhere","author":{"id":"alice"},"text":"secret-text","mentions_bot":true}`, "http:elsewhere", router.DropNotSandboxed},
		{"unknown-speaker", `{"channel":"http:lobby","author":{"id":"mallory"},"text":"secret-text","replies_to_bot":true}`, "http:lobby", router.DropUnknownSpeaker},
		{"direct", `{"channel":"http:lobby","author":{"id":"alice"},"text":"secret-text","mentions_bot":true,"is_direct":true}`, "http:lobby", router.DropDirect},
		{"bot-author", `{"channel":"http:lobby","author":{"id":"alice","bot":true},"text":"secret-text","mentions_bot":true}`, "http:lobby", router.DropBotAuthor},
	}
	for _, tt := range tests {
		for _, wait := range []bool{false, true} {
			name := tt.name
			if wait {
				name += "-wait"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, nil, nil)
				body := tt.body
				if wait {
					body = strings.TrimSuffix(body, "}") + `,"wait":true}`
				}
				code, got := f.do(t, http.MethodPost, "/api/v1/messages", guestToken, body)
				want := `{"channel":"` + tt.channel + `","dropped":true,"reason":"` + tt.reason + `"}` + "\n"
				if code != http.StatusOK || got != want {
					t.Errorf("POST = %d %s; want 200 %s", code, got, want)
				}
				if diff := cmp.Diff([]string{tt.channel + " " + tt.reason}, f.dropped()); diff != "" {
					t.Errorf("OnDrop (-want +got):\n%s", diff)
				}
				assertDropLogged(t, f, tt.channel, tt.reason)
				if calls := f.rt.Calls(); len(calls) != 0 {
					t.Errorf("a dropped message reached the runtime: %v", calls)
				}
			})
		}
	}
}

// assertDropLogged wants exactly one "message dropped" record, for channel
// and reason, with the surface and without the message's text.
func assertDropLogged(t *testing.T, f *fixture, channel, reason string) {
	t.Helper()
	recs := f.logs.records("message dropped")
	if len(recs) != 1 {
		t.Fatalf("message dropped records = %v; want one", recs)
	}
	want := map[string]string{"msg": "message dropped", "channel": channel, "surface": "http", "reason": reason}
	if reason == router.DropNotAddressed {
		want["level"] = "DEBUG" // chatter not meant for the bot
	} else {
		want["level"] = "INFO"
	}
	if diff := cmp.Diff(want, recs[0]); diff != "" {
		t.Errorf("drop record (-want +got):\n%s", diff)
	}
}

// A message beyond the channel's bound is refused with 429 and its reason,
// and the API's own drop reaches OnDrop through the router.
func TestDropQueueFull(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(context.Context, turnCall) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}}
	f := newFixture(t, rt, nil, queueLimit(1))
	defer close(release)
	if code, body := f.post(t, "first", ""); code != http.StatusAccepted {
		t.Fatalf("first POST = %d %s", code, body)
	}
	code, body := f.post(t, "second", "")
	want := errorBody{Error: textChannelFull, Reason: router.DropQueueFull}
	if code != http.StatusTooManyRequests || decode[errorBody](t, body) != want {
		t.Errorf("POST beyond the bound = %d %s; want 429 %+v", code, body, want)
	}
	if diff := cmp.Diff([]string{"http:lobby queue_full"}, f.dropped()); diff != "" {
		t.Errorf("OnDrop (-want +got):\n%s", diff)
	}
	assertDropLogged(t, f, "http:lobby", router.DropQueueFull)
}

// Shutting down: a new message is refused at once with 503 and its
// reason; a held one ends with the reason in its wait answer and its done
// event.
func TestDropShuttingDown(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(context.Context, turnCall) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: "first"}, nil
	}}
	f := newFixture(t, rt, nil)
	events := f.subscribe(t, "")
	first := make(chan int, 1)
	go func() { code, _ := f.post(t, "first", `,"wait":true`); first <- code }()
	waitFor(t, func() bool { return len(rt.Calls()) == 1 })
	held := make(chan string, 1)
	go func() { _, body := f.post(t, "held", `,"wait":true`); held <- body }()
	waitFor(t, func() bool { return f.api.held(lobby) == 2 && f.router.QueueSize(lobby) == 2 }) // held, then queued
	f.api.Stop()
	f.router.Drain()
	want := errorBody{Error: textStopping, Reason: router.DropShuttingDown}
	if got := decode[errorBody](t, <-held); got != want {
		t.Errorf("held message after Stop = %+v; want %+v", got, want)
	}
	if code, body := f.post(t, "late", ""); code != http.StatusServiceUnavailable || decode[errorBody](t, body) != want {
		t.Errorf("POST after Stop = %d %s; want 503 %+v", code, body, want)
	}
	done := doneEvents(t, events, 1)
	if d := done[0].Data; !d.Dropped || d.Reason != router.DropShuttingDown || d.Error != textStopping {
		t.Errorf("done event of the held message = %+v; want dropped for shutting_down", d)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("running message = %d; want 200", code)
	}
	want2 := []string{"http:lobby shutting_down", "http:lobby shutting_down"}
	if diff := cmp.Diff(want2, f.dropped()); diff != "" {
		t.Errorf("OnDrop (-want +got):\n%s", diff)
	}
}

// A message queued while its channel is switched off behind its back (the
// store changed; an owner's off over HTTP would queue behind the message)
// is dropped later: its wait answer and done event name not_sandboxed.
func TestDropLaterNotSandboxed(t *testing.T) {
	release := make(chan struct{})
	rt := &fakeRuntime{Turn: func(context.Context, turnCall) (rtsandbox.Reply, error) {
		<-release
		return rtsandbox.Reply{OK: true, Text: "first"}, nil
	}}
	f := newFixture(t, rt, nil)
	events := f.subscribe(t, "")
	first := make(chan int, 1)
	go func() { code, _ := f.post(t, "first", `,"wait":true`); first <- code }()
	waitFor(t, func() bool { return len(rt.Calls()) == 1 })
	held := make(chan waitResponse, 1)
	go func() { _, body := f.post(t, "held", `,"wait":true`); held <- decode[waitResponse](t, body) }()
	waitFor(t, func() bool { return f.api.held(lobby) == 2 && f.router.QueueSize(lobby) == 2 }) // held, then queued
	if err := f.channels.Disable(lobby); err != nil {
		t.Fatal(err)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("running message = %d; want 200", code)
	}
	got := <-held
	want := waitResponse{ID: got.ID, Channel: "http:lobby", Dropped: true, Reason: router.DropNotSandboxed, Replies: []reply{}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("held message's wait answer (-want +got):\n%s", diff)
	}
	done := doneEvents(t, events, 2)
	if done[0].Data.MessageID == got.ID { // done events of two messages may interleave
		done[0], done[1] = done[1], done[0]
	}
	if d := done[1].Data; d.MessageID != got.ID || !d.Dropped || d.Reason != router.DropNotSandboxed || d.Error != "" {
		t.Errorf("done event = %+v; want dropped for not_sandboxed", d)
	}
	if diff := cmp.Diff([]string{"http:lobby not_sandboxed"}, f.dropped()); diff != "" {
		t.Errorf("OnDrop (-want +got):\n%s", diff)
	}
}

// doneEvents reads events until n done events came and returns those.
func doneEvents(t *testing.T, s *stream, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	for len(out) < n {
		if e := s.next(t); e.Type == EventDone {
			out = append(out, e)
		}
	}
	return out
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
