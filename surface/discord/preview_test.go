package discord_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakediscord"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/discord"
)

// fakeClock is a settable clock for the preview cadence.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = time.Unix(1_700_000_000, 0).Add(d)
}

// restCall is a REST call as the preview tests compare it.
type restCall struct {
	Method, Path, Content string
}

func restCalls(t *testing.T, calls []fakediscord.Call) []restCall {
	t.Helper()
	out := []restCall{}
	for _, c := range calls {
		var body struct {
			Content string `json:"content"`
		}
		if len(c.Body) > 0 {
			if err := c.Decode(&body); err != nil {
				t.Fatalf("body %s: %v", c.Body, err)
			}
		}
		out = append(out, restCall{c.Method, c.Path, body.Content})
	}
	return out
}

// TestPreviewEditCadence: the first preview posts one message, later ones
// edit it at most once per PreviewInterval (sooner ones are skipped), a
// long preview is cut to 2,000 units with an ellipsis, and the reply is
// posted as a new message, after which the preview is deleted. A surface
// without previews ignores them.
func TestPreviewEditCadence(t *testing.T) {
	long := strings.Repeat("😀", 1500) // 3,000 units
	cut := strings.Repeat("😀", 999) + "…"
	steps := []struct {
		at   time.Duration
		kind router.DeliveryKind
		text string
	}{
		{0, router.KindPreview, "Hel"},
		{500 * time.Millisecond, router.KindPreview, "Hello"},
		{1600 * time.Millisecond, router.KindPreview, "Hello world"},
		{2000 * time.Millisecond, router.KindPreview, long},
		{3200 * time.Millisecond, router.KindPreview, long},
		{3300 * time.Millisecond, router.KindReply, "Final."},
		{3400 * time.Millisecond, router.KindReply, "Second chunk."},
	}
	tests := []struct {
		name    string
		preview bool
		want    func(previewID string) []restCall
	}{
		{"preview-on", true, func(id string) []restCall {
			msg := messagesPath(enabledID) + "/" + id
			return []restCall{
				{"POST", messagesPath(enabledID), "Hel"},
				{"PATCH", msg, "Hello world"},
				{"PATCH", msg, cut},
				{"POST", messagesPath(enabledID), "Final."},
				{"DELETE", msg, ""},
				{"POST", messagesPath(enabledID), "Second chunk."},
			}
		}},
		{"preview-off", false, func(string) []restCall {
			return []restCall{
				{"POST", messagesPath(enabledID), "Final."},
				{"POST", messagesPath(enabledID), "Second chunk."},
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{}
			h := newHarnessWith(t, nil, func(o *discord.Options) { o.Preview, o.Now = tt.preview, clock.now })
			if h.s.Previews() != tt.preview {
				t.Fatalf("Previews() = %v, want %v", h.s.Previews(), tt.preview)
			}
			for _, st := range steps {
				clock.set(st.at)
				d := router.Delivery{Channel: enabled, InReplyTo: "m1", Kind: st.kind, Chunk: st.text}
				if err := h.s.Deliver(context.Background(), d); err != nil {
					t.Fatalf("Deliver(%s at %v): %v", st.kind, st.at, err)
				}
			}
			got := restCalls(t, h.after(h.fake.Calls()))
			previewID := ""
			if len(got) > 0 && got[0].Content == "Hel" {
				previewID = previewMessageID(t, h)
			}
			if diff := cmp.Diff(tt.want(previewID), got); diff != "" {
				t.Errorf("REST calls (-want +got):\n%s", diff)
			}
			if previewID != "" {
				if _, ok := h.fake.Message(previewID); ok {
					t.Error("the preview message is still there after the reply")
				}
			}
			if n := rtsandbox.UTF16Len(cut); n != 1999 { // an emoji is two units: one more would be 2,001
				t.Fatalf("the cut preview has %d units", n)
			}
		})
	}
}

// previewMessageID is the id the fake gave the first posted message.
func previewMessageID(t *testing.T, h *harness) string {
	t.Helper()
	for _, c := range h.after(h.fake.Calls()) {
		if c.Method == "PATCH" || c.Method == "DELETE" {
			return c.Path[strings.LastIndexByte(c.Path, '/')+1:]
		}
	}
	t.Fatal("no edit or delete names the preview")
	return ""
}

// TestPreviewThroughRouter: with previews on, a turn whose model answer
// streams shows a preview that mentions nobody, then the worker's reply,
// and the preview goes away.
func TestPreviewThroughRouter(t *testing.T) {
	h := newHarnessWith(t, nil, func(o *discord.Options) { o.Preview = true })
	h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		if c.OnText == nil {
			t.Error("the turn got no text observer")
			return rtsandbox.Reply{OK: true, Text: "no preview"}, nil
		}
		c.OnText(1, "Drafting <@"+ownerID+">")
		h.waitFor(t, "the preview", func(c []fakediscord.Call) bool { return find(c, "POST", messagesPath(enabledID)) >= 0 })
		return rtsandbox.Reply{OK: true, Text: "The answer."}, nil
	}
	h.post(t, guildMessage(enabledID, alice, []string{memberRole}, "hi", true))
	// The deletion, wherever it falls: the typing indicator may post
	// after it.
	calls := h.waitFor(t, "the preview's deletion", func(c []fakediscord.Call) bool {
		return slices.ContainsFunc(c, func(c fakediscord.Call) bool { return c.Method == "DELETE" })
	})
	var got []restCall
	for _, c := range restCalls(t, calls) {
		if c.Path != typingPath(enabledID) && c.Method != "GET" {
			got = append(got, c)
		}
	}
	var first struct {
		AllowedMentions struct {
			Parse []string `json:"parse"`
		} `json:"allowed_mentions"`
	}
	if err := calls[find(calls, "POST", messagesPath(enabledID))].Decode(&first); err != nil {
		t.Fatal(err)
	}
	if len(first.AllowedMentions.Parse) != 0 {
		t.Errorf("the preview may ping %v, want nobody", first.AllowedMentions.Parse)
	}
	if len(got) != 3 || got[0].Content != "Drafting <@"+ownerID+">" || got[1].Content != "The answer." || got[2].Method != "DELETE" {
		t.Errorf("calls = %+v, want the preview, the reply, the preview's deletion", got)
	}
}
