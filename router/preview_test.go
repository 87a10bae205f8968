package router

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// timedDelivery is a delivery and when it was made, since the message.
type timedDelivery struct {
	At    time.Duration
	Kind  DeliveryKind
	Reply string
	Chunk string
}

// streamingRun reports text at the given offsets and then replies.
func streamingRun(steps []textStep, final string) func(context.Context, turnCall) (rtsandbox.Reply, error) {
	return func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		for _, s := range steps {
			time.Sleep(s.after)
			if c.OnText != nil {
				c.OnText(s.answer, s.delta)
			}
		}
		return rtsandbox.Reply{OK: true, Text: final}, nil
	}
}

type textStep struct {
	after  time.Duration
	answer int
	delta  string
}

// TestPreviewThrottle: a surface that takes previews gets the text so far
// at once, then at most once per PreviewInterval, the answers joined by a
// blank line, never after the reply, which is the worker's; a surface
// that does not gets the reply only.
func TestPreviewThrottle(t *testing.T) {
	steps := []textStep{
		{0, 1, "Hel"},
		{100 * time.Millisecond, 1, "lo"},
		{time.Second, 1, " world"},
		{2 * time.Second, 2, "Next"},
		{200 * time.Millisecond, 2, " part"},
		{10 * time.Millisecond, 2, " (never shown)"},
	}
	ms := time.Millisecond
	tests := []struct {
		name     string
		previews bool
		want     []timedDelivery
	}{
		{"previews-on", true, []timedDelivery{
			{0, KindPreview, "m1", "Hel"},
			{1500 * ms, KindPreview, "m1", "Hello world"},
			{3100 * ms, KindPreview, "m1", "Hello world\n\nNext"},
			{3310 * ms, KindReply, "m1", "Final answer."},
		}},
		{"previews-off", false, []timedDelivery{
			{3310 * ms, KindReply, "m1", "Final answer."},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, newMemChannels(guests))
				h.surface.previews = tt.previews
				var mu sync.Mutex
				var got []timedDelivery
				start := time.Now()
				h.surface.onDeliver = func(d Delivery) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, timedDelivery{time.Since(start), d.Kind, d.InReplyTo, d.Chunk})
				}
				h.rt.Turn = streamingRun(steps, "Final answer.")
				m := mention(guests, "alice", "Alice", "hi")
				m.ID = "m1"
				if err := <-h.submit(m); err != nil {
					t.Fatalf("Submit = %v", err)
				}
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("deliveries (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestPreviewBounded: the preview text keeps the first MaxPreviewBytes,
// cut at a rune boundary, however much streams.
func TestPreviewBounded(t *testing.T) {
	p := &preview{wake: make(chan struct{}, 1)}
	piece := strings.Repeat("é", 999) + "x" // 1,999 bytes: cuts fall inside runes
	for range 2 * MaxPreviewBytes / len(piece) {
		p.add(1, piece)
	}
	text, ok := p.take()
	if !ok || len(text) > MaxPreviewBytes || len(text) < MaxPreviewBytes-3 || !strings.HasPrefix(text, piece) {
		t.Fatalf("preview is %d bytes (ok %v), want the first %d at most", len(text), ok, MaxPreviewBytes)
	}
	if !strings.HasSuffix(text, "é") && !strings.HasSuffix(text, "x") {
		t.Errorf("preview ends in a cut rune: %q", text[len(text)-4:])
	}
	if _, again := p.take(); again {
		t.Error("an unchanged preview was taken twice")
	}
}

// TestPreviewInFlightFinishes: a preview still being delivered when the
// turn ends is not cancelled (the surface must learn it posted it, to take
// it down); the reply waits for it and comes after.
func TestPreviewInFlightFinishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, newMemChannels(guests))
		h.surface.previews = true
		var mu sync.Mutex
		var got []string
		h.surface.onDeliver = func(d Delivery) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(d.Kind)+" "+d.Chunk)
		}
		h.surface.onSend = func(ctx context.Context, _ rtsandbox.ChannelKey, chunk string) error {
			if chunk != "draft" {
				return nil
			}
			select {
			case <-time.After(time.Second): // a slow post
				return nil
			case <-ctx.Done():
				mu.Lock()
				defer mu.Unlock()
				got = append(got, "preview cancelled")
				return ctx.Err()
			}
		}
		h.rt.Turn = streamingRun([]textStep{{0, 1, "draft"}, {10 * time.Millisecond, 1, " more"}}, "Final.")
		if err := <-h.submit(mention(guests, "alice", "Alice", "hi")); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{"preview draft", "reply Final."}, got); diff != "" {
			t.Errorf("deliveries (-want +got):\n%s", diff)
		}
	})
}
