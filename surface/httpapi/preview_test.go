package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// TestDeltaEvents: with Options.Preview, a message whose answer streams
// gets delta events (each the text its preview gained, the turn's answers
// joined by a blank line) before its reply, which is the worker's; without
// it, none. Through the real handler and the real router. The runtime
// waits for each delta event before it goes on, so the previews do not
// depend on timing: the second and third pieces come within the interval
// after the first preview, and go out as one.
func TestDeltaEvents(t *testing.T) {
	tests := []struct {
		name    string
		preview bool
		want    []string
	}{
		{"preview-on", true, []string{"delta Hel", "delta lo\n\nNext", "reply The worker's answer.", "done "}},
		{"preview-off", false, []string{"reply The worker's answer.", "done "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan struct{}, 2) // a delta event reached the subscriber
			await := func() {
				select {
				case <-seen:
				case <-time.After(10 * time.Second):
				}
			}
			run := func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
				if c.OnText != nil {
					c.OnText(1, "Hel")
					await()
					c.OnText(1, "lo")
					c.OnText(2, "Next")
					await()
				}
				return rtsandbox.Reply{OK: true, Text: "The worker's answer."}, nil
			}
			f := newFixture(t, &fakeRuntime{Turn: run}, func(o *Options) { o.Preview = tt.preview })
			if f.api.Previews() != tt.preview {
				t.Fatalf("Previews() = %v, want %v", f.api.Previews(), tt.preview)
			}
			events := f.subscribe(t, "")
			code, body := f.post(t, "Hello", "")
			if code != http.StatusAccepted {
				t.Fatalf("POST = %d %s; want 202", code, body)
			}
			id := decode[acceptedResponse](t, body).ID
			var got []string
			for {
				e := events.next(t)
				if e.Type == EventTyping {
					continue
				}
				if e.Data.MessageID != id || e.Data.Channel != lobby {
					t.Errorf("event %+v not attributed to %s in %s", e, id, lobby)
				}
				got = append(got, e.Type+" "+e.Data.Chunk)
				if e.Type == EventDelta {
					seen <- struct{}{}
				}
				if e.Type == EventDone {
					break
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDeltaOnlyExtends: a preview that does not extend what was sent, or
// names a message the API does not hold, sends nothing.
func TestDeltaOnlyExtends(t *testing.T) {
	f := newFixture(t, nil, func(o *Options) { o.Preview = true })
	p, err := f.api.hold(router.Message{Channel: lobby})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		f.api.release(p)
		f.api.wg.Done() // hold counted it for Close
	}()
	steps := []struct {
		d    router.Delivery
		want string
	}{
		{router.Delivery{Channel: lobby, InReplyTo: p.id, Kind: router.KindPreview, Chunk: "ab"}, "ab"},
		{router.Delivery{Channel: lobby, InReplyTo: p.id, Kind: router.KindPreview, Chunk: "ab"}, ""},
		{router.Delivery{Channel: lobby, InReplyTo: p.id, Kind: router.KindPreview, Chunk: "abcd"}, "cd"},
		{router.Delivery{Channel: "http:other", InReplyTo: p.id, Kind: router.KindPreview, Chunk: "abcdef"}, ""},
		{router.Delivery{Channel: lobby, InReplyTo: "m_unknown", Kind: router.KindPreview, Chunk: "abcdef"}, ""},
	}
	for i, st := range steps {
		if got := f.api.delta(st.d); got != st.want {
			t.Errorf("step %d: delta = %q, want %q", i, got, st.want)
		}
	}
}
