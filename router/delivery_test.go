package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/chunk"
)

// reply returns a runtime that answers every turn with text.
func reply(text string) func(context.Context, turnCall) (rtsandbox.Reply, error) {
	return func(context.Context, turnCall) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: text}, nil
	}
}

// checkPosted asserts what a reply of in was posted as: at most chunk.MaxChunks
// chunks within chunk.ChunkLimit, at most three times the reply's units in all,
// and the cut notice at the end exactly when want says so.
func checkPosted(t *testing.T, in string, sent []string, wantCut bool) {
	t.Helper()
	if len(sent) == 0 || len(sent) > chunk.MaxChunks {
		t.Fatalf("posted %d chunks; want 1 to %d", len(sent), chunk.MaxChunks)
	}
	total := 0
	for i, c := range sent {
		n := rtsandbox.UTF16Len(c)
		if n > chunk.ChunkLimit {
			t.Errorf("chunk %d has %d UTF-16 units; limit %d", i, n, chunk.ChunkLimit)
		}
		total += n
	}
	if n := rtsandbox.UTF16Len(in); total > 3*n {
		t.Errorf("posted %d units in %d chunks for a reply of %d", total, len(sent), n)
	}
	last := sent[len(sent)-1]
	if cut := strings.HasSuffix(last, "\n\n"+rtsandbox.ReplyCutNotice); cut != wantCut {
		t.Errorf("last chunk ends with the cut notice: %v; want %v (…%q)", cut, wantCut, last[max(0, len(last)-80):])
	}
	if wantCut && len(sent) != chunk.MaxChunks {
		t.Errorf("a cut reply took %d chunks; want all %d", len(sent), chunk.MaxChunks)
	}
}

// The red-team finding: a 6,000-unit reply whose code block opens with a
// 1,990-unit fence line was posted as 2,000 messages (3,998,000 units),
// because every piece repeated the opening line and had room for two
// characters. The opening line now opens the first piece only.
func TestReplyAmplificationLongFenceLine(t *testing.T) {
	open := "```" + strings.Repeat("a", 1987) // 1,990 units
	body := func(units int) string {
		var b strings.Builder
		b.WriteString(open + "\n")
		for rest := units - len(open) - 1 - 3; rest > 0; {
			n := min(60, rest) // a line of x and its newline
			b.WriteString(strings.Repeat("x", n-1) + "\n")
			rest -= n
		}
		b.WriteString("```")
		return b.String()
	}
	tests := []struct {
		name  string
		units int
		cut   bool
	}{
		{"6000-units", 6000, false},
		{"60000-units-cut", 60000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := body(tt.units)
			if n := rtsandbox.UTF16Len(in); n != tt.units {
				t.Fatalf("fixture has %d units; want %d", n, tt.units)
			}
			h := newHarness(t, newMemChannels(guests))
			h.rt.Turn = reply(in)
			if err := h.handle(t, mention(guests, "alice", "Alice", "x")); err != nil {
				t.Fatal(err)
			}
			sent := h.surface.Sent()
			checkPosted(t, in, sent, tt.cut)
			if !tt.cut {
				if len(sent) > 5 {
					t.Errorf("posted %d chunks for %d units; want at most 5", len(sent), tt.units)
				}
				got := strings.Join(sent, "")
				if n, want := strings.Count(got, "x"), strings.Count(in, "x"); n != want {
					t.Errorf("posted %d x; want all %d", n, want)
				}
			}
			if n := strings.Count(strings.Join(sent, ""), open); n != 1 {
				t.Errorf("the opening line was posted %d times; want once", n)
			}
		})
	}
}

// An ordinary markdown reply at rtsandbox.MaxReplyText is cut to chunk.MaxChunks
// messages, the last ending with the notice; what is posted is the
// reply's beginning.
func TestReplyCutWithNotice(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < rtsandbox.MaxReplyText; i++ {
		b.WriteString("## Section\n\nSome prose about the topic, long enough to wrap in a chat window. ")
		b.WriteString(strings.Repeat("More words follow here. ", 20) + "\n\n")
		b.WriteString("- a point\n- another point\n- a third point\n\n")
		b.WriteString("```go\nfunc main() {\n\tfmt.Println(\"hello\")\n}\n```\n\n")
	}
	in := b.String()[:rtsandbox.MaxReplyText]
	h := newHarness(t, newMemChannels(guests))
	h.rt.Turn = reply(in)
	if err := h.handle(t, mention(guests, "alice", "Alice", "x")); err != nil {
		t.Fatal(err)
	}
	sent := h.surface.Sent()
	checkPosted(t, in, sent, true)
	posted := strings.Join(sent, "\n\n")
	posted = strings.TrimSuffix(posted, "\n\n"+rtsandbox.ReplyCutNotice)
	if !strings.HasPrefix(in, sent[0]) {
		t.Errorf("the first chunk is not the reply's beginning: %q", sent[0][:80])
	}
	if strings.Count(posted, "## Section") >= strings.Count(in, "## Section") {
		t.Errorf("everything was posted; want a cut")
	}
	want := []string{"INFO reply cut: too long to post in full"}
	if diff := cmp.Diff(want, h.log.messages()); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
}

// A text handed to the Port (a notice, a report) that needs more than
// chunk.MaxChunks chunks is cut too: the router cuts every text after the
// door, and ends the last chunk with the notice.
func TestSendReplyCutsLongText(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	text := strings.Repeat(strings.Repeat("word ", chunk.ChunkLimit/5)+"\n\n", chunk.MaxChunks+5)
	if err := h.r.deliver(context.Background(), Delivery{Channel: guests, Kind: KindReply}, text); err != nil {
		t.Fatal(err)
	}
	sent := h.surface.Sent()
	if len(sent) != chunk.MaxChunks || !strings.HasSuffix(sent[chunk.MaxChunks-1], rtsandbox.ReplyCutNotice) {
		t.Errorf("sent %d chunks; want %d, the last ending with the notice", len(sent), chunk.MaxChunks)
	}
}

// A surface whose Send blocks until its context ends costs the channel one
// SendTimeout for the reply and one for the failure notice; the channel's
// next message is answered once the surface recovers.
func TestSurfaceSendBlockedHitsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, newMemChannels(guests))
		var blocked atomic.Bool
		blocked.Store(true)
		h.surface.onSend = func(ctx context.Context, _ rtsandbox.ChannelKey, _ string) error {
			if blocked.Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
		start := time.Now()
		if err := <-h.submit(mention(guests, "alice", "Alice", "x")); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		if got, want := time.Since(start), 2*DefaultSendTimeout; got != want {
			t.Errorf("the turn held the channel %v; want %v (the reply's and the notice's send timeouts)", got, want)
		}
		var errs []string
		for _, l := range h.log.records() {
			errs = append(errs, l.Msg)
			if !strings.Contains(l.Attrs["err"], context.DeadlineExceeded.Error()) {
				t.Errorf("log %q err = %q; want the deadline", l.Msg, l.Attrs["err"])
			}
		}
		if want := []string{sandboxTurnFailedLog, SandboxFailure}; !cmp.Equal(errs, want) {
			t.Errorf("logs = %q; want %q", errs, want)
		}

		blocked.Store(false)
		if err := <-h.submit(mention(guests, "alice", "Alice", "y")); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		if diff := cmp.Diff([]string{"Sealed."}, h.surface.Sent()); diff != "" {
			t.Errorf("sent (-want +got):\n%s", diff)
		}
	})
}

// A reply whose chunks each take long is bounded as a whole by
// ReplyTimeout: the chunks posted in time stay, then the failure notice.
func TestSurfaceSlowReplyHitsReplyTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, newMemChannels(guests), func(o *Options) {
			o.SendTimeout = time.Minute
			o.ReplyTimeout = 50 * time.Second
		})
		h.surface.onSend = func(ctx context.Context, _ rtsandbox.ChannelKey, _ string) error {
			select {
			case <-time.After(20 * time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		h.rt.Turn = reply(strings.Repeat("p\n\n"+strings.Repeat("x", 1990)+"\n\n", 5))
		start := time.Now()
		if err := <-h.submit(mention(guests, "alice", "Alice", "x")); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		// Two chunks in 40 s, the third cut at 50 s, the notice in 20 s.
		if got, want := time.Since(start), 70*time.Second; got != want {
			t.Errorf("the turn held the channel %v; want %v", got, want)
		}
		sent := h.surface.Sent()
		if len(sent) != 3 || sent[2] != rtsandbox.TurnFailedOrStoppedText {
			t.Errorf("sent %d chunks, last %q; want two chunks and the failure text", len(sent), sent[len(sent)-1])
		}
	})
}

// noContent fails when a log record holds any of the words.
func noContent(t *testing.T, h *harness, words ...string) {
	t.Helper()
	for _, l := range h.log.records() {
		for k, v := range l.Attrs {
			for _, w := range words {
				if strings.Contains(v, w) {
					t.Errorf("log %q attribute %s holds %q: %q", l.Msg, k, w, v)
				}
			}
		}
	}
}

// panics returns the recovered-panic records: channel and where.
func panics(h *harness) []string {
	var out []string
	for _, l := range h.log.records() {
		if l.Msg == "recovered from a panic" {
			out = append(out, l.Attrs["channel"]+" "+l.Attrs["where"])
			if !strings.Contains(l.Attrs["stack"], "panic") {
				return append(out, "no stack")
			}
		}
	}
	return out
}

// A surface that panics in Send or Typing fails that call only: the guest
// gets the fixed failure text, the channel's next message is answered and
// other channels are served meanwhile.
func TestSurfacePanicDoesNotKillHost(t *testing.T) {
	const other rtsandbox.ChannelKey = "fake:other"
	h := newHarness(t, newMemChannels(guests, other), func(o *Options) { o.TypingInterval = time.Millisecond })
	h.surface.onSend = func(_ context.Context, _ rtsandbox.ChannelKey, chunk string) error {
		if chunk == "secret-boom" {
			panic("cannot post " + chunk)
		}
		return nil
	}
	h.surface.onTyping = func(_ context.Context, ch rtsandbox.ChannelKey) error {
		if ch == guests {
			panic("typing broke in " + string(ch))
		}
		return nil
	}
	release := make(chan struct{})
	h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		if c.Text == "secret-boom" {
			<-release // the other channel is answered while this one waits
		}
		return rtsandbox.Reply{OK: true, Text: c.Text}, nil
	}
	boom := h.submit(mention(guests, "alice", "Alice", "secret-boom"))
	if err := h.handle(t, mention(other, "alice", "Alice", "hello")); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-boom; err != nil {
		t.Fatalf("the panicking turn settled with %v", err)
	}
	if err := h.handle(t, mention(guests, "alice", "Alice", "next")); err != nil {
		t.Fatal(err)
	}
	want := []string{"hello", rtsandbox.TurnFailedOrStoppedText, "next"}
	if diff := cmp.Diff(want, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	got := panics(h)
	wantPanics := []string{"fake:guests surface send"}
	typing := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s != "fake:guests surface typing" })
	got = slices.DeleteFunc(got, func(s string) bool { return s == "fake:guests surface typing" })
	if diff := cmp.Diff(wantPanics, got); diff != "" {
		t.Errorf("recovered send panics (-want +got):\n%s", diff)
	}
	if len(typing) != 2 { // once per turn in guests: the refresher stops
		t.Errorf("recovered typing panics = %d; want 2", len(typing))
	}
	noContent(t, h, "secret-boom", "cannot post")
}

// A runtime that panics is answered with the fixed failure text; the
// panic's value is logged only when the Go runtime wrote it.
func TestRuntimePanicAnsweredWithFixedText(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		switch c.Text {
		case "secret-explode":
			panic(errors.New("model said " + c.Text))
		case "out-of-range":
			var none []string
			_ = none[len(c.Text)]
		}
		return rtsandbox.Reply{OK: true, Text: "fine"}, nil
	}
	for _, text := range []string{"secret-explode", "out-of-range", "again"} {
		if err := h.handle(t, mention(guests, "alice", "Alice", text)); err != nil {
			t.Fatalf("Handle(%s) = %v", text, err)
		}
	}
	want := []string{rtsandbox.TurnFailedOrStoppedText, rtsandbox.TurnFailedOrStoppedText, "fine"}
	if diff := cmp.Diff(want, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"fake:guests sandbox turn", "fake:guests sandbox turn"}, panics(h)); diff != "" {
		t.Errorf("recovered panics (-want +got):\n%s", diff)
	}
	var errs []string
	for _, l := range h.log.records() {
		if l.Msg == "recovered from a panic" {
			errs = append(errs, l.Attrs["err"])
		}
	}
	wantErrs := []string{
		"sandbox turn panicked: a value of type *errors.errorString",
		"sandbox turn panicked: runtime error: index out of range [12] with length 0",
	}
	if diff := cmp.Diff(wantErrs, errs); diff != "" {
		t.Errorf("panic errors (-want +got):\n%s", diff)
	}
	noContent(t, h, "secret-explode", "model said")
}

// panicClaim panics in Admit: a broken claim must not take down the
// surface goroutine that submits.
type panicClaim struct{ fallbackClaim }

func (c *panicClaim) Admit(Message) (Admission, string) { panic("claim broke") }

func TestClaimPanicDropsMessage(t *testing.T) {
	h := newHarness(t, newMemChannels(guests), func(o *Options) { o.Claims = []Claim{&panicClaim{}} })
	if err := h.handle(t, mention("fake:other", "alice", "Alice", "x")); Reason(err) != DropInternal {
		t.Fatalf("Handle = %v; want dropped for %s", err, DropInternal)
	}
	if diff := cmp.Diff([]string{"fake:other admission"}, panics(h)); diff != "" {
		t.Errorf("recovered panics (-want +got):\n%s", diff)
	}
	if err := h.handle(t, mention(guests, "alice", "Alice", "x")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"Sealed."}, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
}

// TestHostBusyAnsweredWithBusyText: a turn that found no free slot on the
// host is answered with the fixed busy text, not the failure text, and the
// channel goes on.
func TestHostBusyAnsweredWithBusyText(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		if c.Text == "crowded" {
			return rtsandbox.Reply{}, fmt.Errorf("sandbox: %w", rtsandbox.ErrBusy)
		}
		return rtsandbox.Reply{OK: true, Text: "fine"}, nil
	}
	for _, text := range []string{"crowded", "again"} {
		if err := h.handle(t, mention(guests, "alice", "Alice", text)); err != nil {
			t.Fatalf("Handle(%s) = %v", text, err)
		}
	}
	if diff := cmp.Diff([]string{rtsandbox.BusyText, "fine"}, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
}

// TestOverBudgetAnsweredWithBudgetText: a turn refused (or cut short) for
// a spent daily budget gets the fixed budget text, never the scope or
// kind, and the channel goes on.
func TestOverBudgetAnsweredWithBudgetText(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		if c.Text == "spent" {
			return rtsandbox.Reply{}, fmt.Errorf("budget: %w: speaker:alice calls", rtsandbox.ErrOverBudget)
		}
		return rtsandbox.Reply{OK: true, Text: "fine"}, nil
	}
	for _, text := range []string{"spent", "again"} {
		if err := h.handle(t, mention(guests, "alice", "Alice", text)); err != nil {
			t.Fatalf("Handle(%s) = %v", text, err)
		}
	}
	if diff := cmp.Diff([]string{rtsandbox.BudgetText, "fine"}, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
}

// TestStoppedTurnNotLoggedAsFailure: a turn an owner stopped, or that
// shutdown cut, gets the fixed text but no failure record that sends the
// operator to inspect container cleanup.
func TestStoppedTurnNotLoggedAsFailure(t *testing.T) {
	for _, cause := range []error{fmt.Errorf("sandbox: %w", rtsandbox.ErrEndedEarly), context.Canceled} {
		h := newHarness(t, newMemChannels(guests))
		h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) { return rtsandbox.Reply{}, cause }
		if err := h.handle(t, mention(guests, "alice", "Alice", "hi")); err != nil {
			t.Fatalf("Handle = %v", err)
		}
		if diff := cmp.Diff([]string{rtsandbox.TurnFailedOrStoppedText}, h.surface.Sent()); diff != "" {
			t.Errorf("%v: sent (-want +got):\n%s", cause, diff)
		}
		var msgs []string
		for _, l := range h.log.records() {
			msgs = append(msgs, l.Msg)
		}
		if !slices.Contains(msgs, sandboxTurnEndedEarlyLog) || slices.Contains(msgs, sandboxTurnFailedLog) {
			t.Errorf("%v: logs = %q; want the ended-early record and no failure record", cause, msgs)
		}
	}
}

// Every delivery names the message it answers: a turn's reply and its
// failure text are KindReply for that message, typing is shown for it, a
// refusal's notice is KindNotice for the refused message, and a report is
// KindReport tied to none.
func TestDeliveriesNameTheirMessage(t *testing.T) {
	h := newHarness(t, newMemChannels(guests), func(o *Options) { o.QueueLimit = 1 })
	gate := make(chan struct{})
	h.rt.Turn = func(_ context.Context, c turnCall) (rtsandbox.Reply, error) {
		if c.Text == "fail" {
			return rtsandbox.Reply{}, errors.New("engine down")
		}
		<-gate
		return rtsandbox.Reply{OK: true, Text: "re " + c.Text}, nil
	}
	msg := func(id, text string) Message {
		m := mention(guests, "alice", "Alice", text)
		m.ID = id
		return m
	}
	first := h.submit(msg("m1", "one"))
	for len(h.rt.Calls()) == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := h.r.Submit(msg("m2", "over")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Submit beyond the bound = %v; want ErrQueueFull", err)
	}
	for len(h.surface.Sent()) == 0 {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := h.handle(t, msg("m3", "fail")); err != nil {
		t.Fatal(err)
	}
	if err := h.r.PostReport(context.Background(), guests, "report"); err != nil {
		t.Fatal(err)
	}
	want := []Delivery{
		{Channel: guests, InReplyTo: "m2", Kind: KindNotice, Chunk: rtsandbox.QueueFullText},
		{Channel: guests, InReplyTo: "m1", Kind: KindReply, Chunk: "re one"},
		{Channel: guests, InReplyTo: "m3", Kind: KindReply, Chunk: rtsandbox.TurnFailedOrStoppedText},
		{Channel: guests, Kind: KindReport, Chunk: "report"},
	}
	if diff := cmp.Diff(want, h.surface.Deliveries()); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"m1", "m3"}, h.surface.TypingFor()); diff != "" {
		t.Errorf("typing shown for (-want +got):\n%s", diff)
	}
}
