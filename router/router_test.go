package router

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// The reference's test "Claim routing and precedence".
func TestClaimRoutingAndPrecedence(t *testing.T) {
	fb := &fallbackClaim{}
	h := newHarness(t, newMemChannels(guests), func(o *Options) { o.Claims = []Claim{fb} })

	admitted := []Message{
		mention(guests, "alice", "Alice", "hello"),
		mention(guests, "owner", "Ada", "hi"),
		{Channel: guests, Author: Author{ID: "alice", Name: "Alice"}, Text: "again", RepliesToBot: true},
	}
	ignored := map[string]struct {
		msg    Message
		reason string
	}{
		"bot":         {Message{Channel: guests, Author: Author{ID: "alice", Name: "Alice", Bot: true}, Text: "x", MentionsBot: true}, DropBotAuthor},
		"dm":          {Message{Channel: guests, Author: Author{ID: "alice", Name: "Alice"}, Text: "x", MentionsBot: true, IsDirect: true}, DropDirect},
		"integration": {Message{Channel: guests, Author: Author{ID: "alice", Name: "Alice", Integration: true}, Text: "x", MentionsBot: true}, DropBotAuthor},
		"unaddressed": {Message{Channel: guests, Author: Author{ID: "alice", Name: "Alice"}, Text: "x"}, DropNotAddressed},
		"unresolved":  {mention(guests, "mallory", "Mallory", "x"), DropUnknownSpeaker},
	}
	for _, m := range admitted {
		if err := h.handle(t, m); err != nil {
			t.Fatalf("Handle: %v", err)
		}
	}
	for name, tt := range ignored {
		if err := h.handle(t, tt.msg); !errors.Is(err, ErrDropped) || Reason(err) != tt.reason {
			t.Errorf("Handle(%s) = %v; want dropped for %s", name, err, tt.reason)
		}
	}
	var speakers []rtsandbox.Speaker
	for _, c := range h.rt.Calls() {
		speakers = append(speakers, c.Speaker)
	}
	want := []rtsandbox.Speaker{
		{ID: "alice", Name: "Alice", PrincipalID: "p_alice"},
		{ID: "owner", Name: "Ada", PrincipalID: "owner"}, // the surface's name, not the identity's
		{ID: "alice", Name: "Alice", PrincipalID: "p_alice"},
	}
	if diff := cmp.Diff(want, speakers); diff != "" {
		t.Errorf("speakers (-want +got):\n%s", diff)
	}
	if got := fb.Admitted(); len(got) != 0 {
		t.Errorf("the priority-100 claim saw %d messages in a sandboxed channel; want 0", len(got))
	}
	if diff := cmp.Diff([]string{"Sealed.", "Sealed.", "Sealed."}, h.surface.Sent()); diff != "" {
		t.Errorf("replies (-want +got):\n%s", diff)
	}
	ctx := context.Background()
	if kind, err := h.r.StartFresh(ctx, guests); kind != "sandbox" || err != nil {
		t.Errorf("StartFresh(%s) = %q, %v; want sandbox", guests, kind, err)
	}

	// Stop reaches the runtime through the owning claim.
	started := make(chan struct{})
	h.rt.Turn = func(ctx context.Context, _ turnCall) (rtsandbox.Reply, error) {
		close(started)
		<-ctx.Done()
		return rtsandbox.Reply{}, ctx.Err()
	}
	done := h.submit(mention(guests, "alice", "Alice", "long"))
	<-started
	if !h.r.Stop(guests) {
		t.Errorf("Stop(%s) = false during a turn; want true", guests)
	}
	<-done
	if h.r.Stop(guests) {
		t.Errorf("Stop(%s) = true with nothing running", guests)
	}

	// A channel the sandbox does not own goes to the next claim.
	if err := h.handle(t, mention("fake:other", "alice", "Alice", "x")); err != nil {
		t.Fatal(err)
	}
	if got := fb.Admitted(); len(got) != 1 || got[0].Channel != "fake:other" {
		t.Errorf("fallback admitted %+v; want the fake:other message", got)
	}
	if kind, _ := h.r.StartFresh(ctx, "fake:other"); kind != "agents" {
		t.Errorf("StartFresh(fake:other) = %q; want the owning claim's kind agents", kind)
	}
}

func TestSurfaceCannotSetSpeaker(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	m := mention(guests, "mallory", "Mallory", "x")
	m.Speaker = &rtsandbox.Speaker{ID: "mallory", Name: "M", PrincipalID: "owner"}
	h.handle(t, m)
	if n := len(h.rt.Calls()); n != 0 {
		t.Errorf("a surface-supplied speaker got %d turns; want 0", n)
	}
}

func TestNewRefusesDuplicateClaimAndBadOptions(t *testing.T) {
	dup := &fallbackClaim{}
	opts := Options{Channels: newMemChannels(), Runtime: &fakeRuntime{}, Access: fixtureAccess{}, Claims: []Claim{dup, dup}, Door: openDoor{}}
	if _, err := New(opts); !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("New with a duplicate claim = %v; want ErrInvalid", err)
	}
	if _, err := New(Options{}); !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("New(Options{}) = %v; want ErrInvalid", err)
	}
	// Fail closed: no router without a door.
	if _, err := New(Options{Channels: newMemChannels(), Runtime: &fakeRuntime{}, Access: fixtureAccess{}}); !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("New without a Door = %v; want ErrInvalid", err)
	}
	r, err := New(Options{Channels: newMemChannels(), Runtime: &fakeRuntime{}, Access: fixtureAccess{}, Door: openDoor{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	for _, p := range []string{"", "Fake", "a:b"} {
		if err := r.AddSurface(p, &fakeSurface{}); err == nil {
			t.Errorf("AddSurface(%q) = nil; want error", p)
		}
	}
	r.AddSurface("fake", &fakeSurface{})
	if err := r.AddSurface("fake", &fakeSurface{}); err == nil {
		t.Errorf("AddSurface twice = nil; want error")
	}
}

// docs/host.md, "Routing rules", the failure matrix of an addressed message in a sandbox
// channel (and the drops around it).
func TestFailureMatrix(t *testing.T) {
	failTurn := func(context.Context, turnCall) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{}, errors.New("docker: cleanup failed")
	}
	tests := []struct {
		name     string
		msg      Message
		run      func(context.Context, turnCall) (rtsandbox.Reply, error)
		failSend func(string) error
		drop     string // the drop reason; "" when the message ran
		turns    int
		sent     []string
		logs     []string
	}{
		{name: "channel-not-enabled", msg: mention("fake:off", "alice", "Alice", "x"), drop: DropNotSandboxed, logs: dropLog},
		{name: "channel-not-enabled-chatter", msg: Message{Channel: "fake:off", Author: Author{ID: "alice"}, Text: "x"}, drop: DropNotSandboxed},
		{name: "not-addressed", msg: Message{Channel: guests, Author: Author{ID: "alice"}, Text: "x"}, drop: DropNotAddressed},
		{name: "bot", msg: Message{Channel: guests, Author: Author{ID: "alice", Bot: true}, Text: "x", MentionsBot: true}, drop: DropBotAuthor, logs: dropLog},
		{name: "webhook", msg: Message{Channel: guests, Author: Author{ID: "alice", Integration: true}, Text: "x", MentionsBot: true}, drop: DropBotAuthor, logs: dropLog},
		{name: "dm", msg: Message{Channel: guests, Author: Author{ID: "alice"}, Text: "x", MentionsBot: true, IsDirect: true}, drop: DropDirect, logs: dropLog},
		{name: "no-speaker", msg: mention(guests, "mallory", "M", "x"), drop: DropUnknownSpeaker, logs: dropLog},
		{name: "empty-message", msg: mention(guests, "alice", "Alice", "  \n "), drop: DropEmpty, logs: dropLog},
		{name: "invalid-channel-key", msg: mention("Fake:guests", "alice", "Alice", "x"), drop: DropNotSandboxed, logs: dropLog},
		{
			name: "worker-ok-false",
			msg:  mention(guests, "alice", "Alice", "x"),
			run: func(context.Context, turnCall) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{OK: false, Text: "secret detail"}, nil
			},
			turns: 1, sent: []string{"The sandbox turn failed."},
		},
		{
			name: "worker-ok-empty-text",
			msg:  mention(guests, "alice", "Alice", "x"),
			run: func(context.Context, turnCall) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{OK: true, Text: " \n "}, nil
			},
			turns: 1,
		},
		{
			name:  "runtime-error",
			msg:   mention(guests, "alice", "Alice", "x"),
			run:   failTurn,
			turns: 1, sent: []string{"The sandbox turn failed or was stopped."},
			logs: []string{"ERROR sandbox turn failed; inspect container cleanup and broker configuration"},
		},
		{
			// budgets.on_store_error: deny refused the turn: the guest
			// gets the store's text, the operator a line naming usage.db.
			name: "store-refused",
			msg:  mention(guests, "alice", "Alice", "x"),
			run: func(context.Context, turnCall) (rtsandbox.Reply, error) {
				return rtsandbox.Reply{}, fmt.Errorf("budget: usage database /s/usage.db: %w", rtsandbox.ErrStore)
			},
			turns: 1, sent: []string{rtsandbox.StoreText},
			logs: []string{"ERROR " + sandboxTurnStoreLog},
		},
		{
			name:     "reply-send-fails",
			msg:      mention(guests, "alice", "Alice", "x"),
			failSend: func(c string) error { return errIf(c == "Sealed.") },
			turns:    1, sent: []string{"The sandbox turn failed or was stopped."},
			logs: []string{"ERROR sandbox turn failed; inspect container cleanup and broker configuration"},
		},
		{
			name:     "failure-notice-send-fails",
			msg:      mention(guests, "alice", "Alice", "x"),
			run:      failTurn,
			failSend: func(string) error { return errors.New("discord down") },
			turns:    1,
			logs: []string{
				"ERROR sandbox turn failed; inspect container cleanup and broker configuration",
				"ERROR sandbox turn failed",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			drops := &dropCounter{}
			h := newHarness(t, newMemChannels(guests), drops.option)
			h.rt.Turn = tt.run
			h.surface.failSend = tt.failSend
			err := h.handle(t, tt.msg)
			if got := Reason(err); got != tt.drop || (tt.drop == "" && err != nil) {
				t.Fatalf("Handle = %v (reason %q); want reason %q", err, got, tt.drop)
			}
			if want := dropsOf(tt.msg.Channel, tt.drop); !cmp.Equal(drops.seen(), want) {
				t.Errorf("OnDrop saw %q; want %q", drops.seen(), want)
			}
			if n := len(h.rt.Calls()); n != tt.turns {
				t.Errorf("runtime called %d times; want %d", n, tt.turns)
			}
			if diff := cmp.Diff(tt.sent, h.surface.Sent()); diff != "" {
				t.Errorf("sent (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.logs, h.log.messages()); diff != "" {
				t.Errorf("logs at info and above (-want +got):\n%s", diff)
			}
			for _, l := range h.log.records() {
				if l.Attrs["channel"] != string(tt.msg.Channel) {
					t.Errorf("log %q has channel %q; want %q", l.Msg, l.Attrs["channel"], tt.msg.Channel)
				}
				surface, _, _ := strings.Cut(string(tt.msg.Channel), ":")
				if l.Msg == "message dropped" && (l.Attrs["reason"] != tt.drop || l.Attrs["surface"] != surface) {
					t.Errorf("drop log attrs = %v; want reason %s, surface %s", l.Attrs, tt.drop, surface)
				}
			}
		})
	}
}

// dropLog is the log of one addressed message that was dropped.
var dropLog = []string{"INFO message dropped"}

func errIf(b bool) error {
	if b {
		return errors.New("send failed")
	}
	return nil
}

// docs/host.md, "Routing rules" "mode turned off while queued": the queued turn re-checks
// the mode when it starts and is neither answered nor handed to host agents.
func TestModeOffWhileQueued(t *testing.T) {
	fb := &fallbackClaim{}
	chans := newMemChannels(guests)
	h := newHarness(t, chans, func(o *Options) { o.Claims = []Claim{fb} })
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		started <- struct{}{}
		<-release
		return rtsandbox.Reply{OK: true, Text: "first"}, nil
	}
	first := h.submit(mention(guests, "alice", "Alice", "one"))
	<-started
	second := h.submit(mention(guests, "alice", "Alice", "two"))
	chans.Disable(guests) // as an owner "off" that overtook the queue
	close(release)
	<-first
	if err := <-second; Reason(err) != DropNotSandboxed {
		t.Errorf("queued message settled with %v; want dropped for %s", err, DropNotSandboxed)
	}
	if n := len(h.rt.Calls()); n != 1 {
		t.Errorf("runtime called %d times; want 1 (the queued turn must re-check the mode)", n)
	}
	if diff := cmp.Diff([]string{"first"}, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	if len(fb.Admitted()) != 0 {
		t.Errorf("the queued message reached the host claim")
	}
	if diff := cmp.Diff(dropLog, h.log.messages()); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
}

func TestTurnText(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
		want string
	}{
		{"plain", Message{Text: "hi"}, "hi"},
		{"quoted-reply", Message{Text: "what?", ReferenceText: "earlier words"}, "Quoted message (untrusted): earlier words\n\nwhat?"},
		{"blank-reference-ignored", Message{Text: "what?", ReferenceText: " \n"}, "what?"},
		{"attachments-notice", Message{Text: "look", Attachments: 2}, "look\n[Attachments are not supported in this sandbox.]"},
		{"attachments-only", Message{Attachments: 1}, "\n[Attachments are not supported in this sandbox.]"},
		{"forward-not-included", Message{Text: "see", ForwardedText: "forwarded secret"}, "see"},
		{"quote-and-attachments", Message{Text: "t", ReferenceText: "r", Attachments: 1}, "Quoted message (untrusted): r\n\nt\n[Attachments are not supported in this sandbox.]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TurnInput(tt.msg).SealedText(); got != tt.want {
				t.Errorf("TurnInput(%+v).SealedText() = %q; want %q", tt.msg, got, tt.want)
			}
		})
	}
}

// The reference's test "Full plugin", as far as it applies without Discord: a
// real store seeded by initial channels, one mention, one runtime call with
// the speaker passed through (the time zone is the runtime's own option,
// sealed.Options.TimeZone, and never passes through the router).
func TestFullPluginWithoutDiscord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	store := openStore(t, dir, guests)
	h := newHarness(t, store)
	msg := mention(guests, "alice", "Alice", "hello")
	msg.ReferenceText = "quoted"
	msg.Attachments = 1
	if err := h.handle(t, msg); err != nil {
		t.Fatal(err)
	}
	want := []turnCall{{
		Channel:  guests,
		Speaker:  rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "p_alice"},
		Text:     "Quoted message (untrusted): quoted\n\nhello",
		Attached: 1,
	}}
	calls := h.rt.Calls()
	if diff := cmp.Diff(want, calls); diff != "" {
		t.Errorf("runtime calls (-want +got):\n%s", diff)
	}
	if got, wantText := calls[0].Input().SealedText(), "Quoted message (untrusted): quoted\n\nhello\n[Attachments are not supported in this sandbox.]"; got != wantText {
		t.Errorf("sealed text = %q; want %q", got, wantText)
	}
	if diff := cmp.Diff([]rtsandbox.ChannelKey{guests}, store.List()); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
}

// Typing shows while the turn runs, is refreshed every TypingInterval,
// and stops after the reply is posted. In a synctest bubble the clock is
// exact: a 35 s turn with a 10 s refresh shows typing at 0, 10, 20 and
// 30 s.
func TestTypingWhileTurnRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, newMemChannels(guests), func(o *Options) { o.TypingInterval = 10 * time.Second })
		h.rt.Turn = func(ctx context.Context, _ turnCall) (rtsandbox.Reply, error) {
			time.Sleep(35 * time.Second)
			return rtsandbox.Reply{OK: true, Text: "done"}, nil
		}
		if err := <-h.submit(mention(guests, "alice", "Alice", "x")); err != nil {
			t.Fatal(err)
		}
		ev := h.surface.Events()
		time.Sleep(time.Minute)
		synctest.Wait()
		if after := h.surface.Events(); len(after) != len(ev) {
			t.Errorf("typing continued after the turn: %q", after[len(ev):])
		}
		want := []string{"typing fake:guests", "typing fake:guests", "typing fake:guests", "typing fake:guests", "send fake:guests"}
		if diff := cmp.Diff(want, ev); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

func TestLongReplyChunked(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	long := strings.Repeat("x", 4500)
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		return rtsandbox.Reply{OK: true, Text: long}, nil
	}
	h.handle(t, mention(guests, "alice", "Alice", "x"))
	sent := h.surface.Sent()
	if len(sent) != 3 || strings.Join(sent, "") != long {
		t.Errorf("sent %d chunks; want 3 that rejoin to the reply", len(sent))
	}
}

func TestNoSurfaceForChannel(t *testing.T) {
	const ch rtsandbox.ChannelKey = "nosurface:1"
	h := newHarness(t, newMemChannels(ch))
	h.handle(t, mention(ch, "alice", "Alice", "x"))
	if n := len(h.rt.Calls()); n != 1 {
		t.Fatalf("runtime calls = %d; want 1", n)
	}
	if got := h.log.messages(); len(got) != 2 {
		t.Errorf("logs = %q; want the turn failure and the failed notice", got)
	}
}

// Queue: per-channel order, isolation of failures, channels concurrent.
func TestQueueOrderAndIsolation(t *testing.T) {
	const other rtsandbox.ChannelKey = "fake:other"
	h := newHarness(t, newMemChannels(guests, other), func(o *Options) { o.QueueLimit = 100 })
	gate := make(chan struct{})
	var mu sync.Mutex
	var order []string
	h.rt.Turn = func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		if c.Channel == guests && c.Text == "0" {
			<-gate // hold the guests channel
		}
		mu.Lock()
		order = append(order, string(c.Channel)+" "+c.Text)
		mu.Unlock()
		if c.Text == "2" {
			return rtsandbox.Reply{}, errors.New("boom")
		}
		if c.Text == "3" {
			panic("worse")
		}
		return rtsandbox.Reply{OK: true, Text: c.Text}, nil
	}
	var dones []<-chan error
	for i := range 6 {
		dones = append(dones, h.submit(mention(guests, "alice", "Alice", string(rune('0'+i)))))
	}
	// The other channel runs while guests is held.
	if err := h.handle(t, mention(other, "alice", "Alice", "x")); err != nil {
		t.Fatal(err)
	}
	if got := h.r.QueueSize(guests); got != 6 {
		t.Errorf("QueueSize(guests) = %d; want 6", got)
	}
	// The other lane settles its task, then goes (its size reaches 0
	// before the lane leaves the queue's set).
	for deadline := time.Now().Add(5 * time.Second); slices.Contains(h.r.Busy(), other) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if diff := cmp.Diff([]rtsandbox.ChannelKey{guests}, h.r.Busy()); diff != "" {
		t.Errorf("Busy (-want +got):\n%s", diff)
	}
	close(gate)
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Errorf("settled with %v; want nil", err)
		}
	}
	want := []string{"fake:other x", "fake:guests 0", "fake:guests 1", "fake:guests 2", "fake:guests 3", "fake:guests 4", "fake:guests 5"}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("run order (-want +got):\n%s", diff)
	}
	// The lane settles a task before it frees its slot.
	for deadline := time.Now().Add(5 * time.Second); h.r.QueueSize(guests) != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := h.r.QueueSize(guests); got != 0 {
		t.Errorf("QueueSize after drain = %d", got)
	}
	var failures []string
	for _, l := range h.log.records() {
		failures = append(failures, l.Msg+": "+l.Attrs["err"])
	}
	// The runtime's panic is answered like any failure; its value is not
	// logged (it could quote a guest), only its type and the stack.
	wantLogs := []string{
		"sandbox turn failed; inspect container cleanup and broker configuration: boom",
		"recovered from a panic: sandbox turn panicked: a value of type string",
		"sandbox turn failed; inspect container cleanup and broker configuration: sandbox turn panicked: a value of type string",
	}
	if diff := cmp.Diff(wantLogs, failures); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
}

func TestQueueBound(t *testing.T) {
	h := newHarness(t, newMemChannels(guests), func(o *Options) { o.QueueLimit = 2 })
	gate := make(chan struct{})
	started := make(chan struct{}, 8)
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		started <- struct{}{}
		<-gate
		return rtsandbox.Reply{OK: true, Text: "ok"}, nil
	}
	first := h.submit(mention(guests, "alice", "Alice", "1"))
	<-started
	second := h.submit(mention(guests, "alice", "Alice", "2"))
	for range 3 {
		if err := h.handle(t, mention(guests, "alice", "Alice", "over")); !errors.Is(err, ErrQueueFull) {
			t.Errorf("Handle beyond the bound = %v; want ErrQueueFull", err)
		}
	}
	// The refusal is answered at once; its notice follows in the background.
	for deadline := time.Now().Add(5 * time.Second); len(h.surface.Sent()) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	// Owner commands are not bounded.
	cmdDone := make(chan string, 1)
	go func() {
		text, _ := h.r.Command(context.Background(), Command{Channel: guests, Author: Author{ID: "owner"}, Action: ActionStatus})
		cmdDone <- text
	}()
	close(gate)
	<-first
	<-second
	if got := <-cmdDone; got != rtsandbox.EnabledText {
		t.Errorf("status while full = %q", got)
	}
	want := []string{rtsandbox.QueueFullText, "ok", "ok"} // one notice for the run of refusals
	if diff := cmp.Diff(want, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	// The bound frees up again.
	if err := h.handle(t, mention(guests, "alice", "Alice", "later")); err != nil {
		t.Errorf("Handle after drain = %v", err)
	}
}

func TestShutdown(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	h.rt.Turn = func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		started <- struct{}{}
		<-gate
		return rtsandbox.Reply{OK: true, Text: "finished"}, nil
	}
	running := h.submit(mention(guests, "alice", "Alice", "1"))
	<-started
	waiting := h.submit(mention(guests, "alice", "Alice", "2"))
	closed := make(chan error, 1)
	go func() { closed <- h.r.Close(context.Background()) }()
	if err := <-waiting; !errors.Is(err, ErrStopping) {
		t.Errorf("waiting message settled with %v; want ErrStopping", err)
	}
	if err := h.handle(t, mention(guests, "alice", "Alice", "3")); !errors.Is(err, ErrStopping) {
		t.Errorf("message during shutdown = %v; want ErrStopping", err)
	}
	if err := h.handle(t, mention(guests, "mallory", "M", "dropped anyway")); Reason(err) != DropUnknownSpeaker {
		t.Errorf("unadmitted message during shutdown = %v; want dropped for %s", err, DropUnknownSpeaker)
	}
	close(gate)
	if err := <-running; err != nil {
		t.Errorf("running turn settled with %v", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close = %v", err)
	}
	want := []string{rtsandbox.RestartingText, "finished"} // once per channel
	if diff := cmp.Diff(want, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	var reasons []string
	for _, l := range h.log.records() {
		reasons = append(reasons, l.Level.String()+" "+l.Msg+" "+l.Attrs["reason"])
	}
	want = []string{
		"INFO message dropped shutting_down", // waiting when Close began
		"INFO message dropped shutting_down", // submitted during the drain
		"INFO message dropped unknown_speaker",
	}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("logs (-want +got):\n%s", diff)
	}
	if n := len(h.rt.Calls()); n != 1 {
		t.Errorf("runtime calls = %d; want 1", n)
	}
}

// TestCloseIdleWithEndedContextCancelsNothing: a router that runs no turn
// closes with nil even under an ended ctx, as a failed start closes it, so
// the host never logs that running turns were cancelled when none ran. (It
// used to race an idle wait against the ended ctx: half the closes said
// they had cancelled turns.)
func TestCloseIdleWithEndedContextCancelsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		h := newHarness(t, newMemChannels(guests))
		if err := h.r.Close(ctx); err != nil {
			t.Fatalf("close %d of an idle router under an ended ctx = %v; want nil", i, err)
		}
	}
}

func TestCloseAbortsRunningTurnsAfterGrace(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	started := make(chan struct{})
	h.rt.Turn = func(ctx context.Context, _ turnCall) (rtsandbox.Reply, error) {
		close(started)
		<-ctx.Done()
		return rtsandbox.Reply{}, ctx.Err()
	}
	done := h.submit(mention(guests, "alice", "Alice", "x"))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v; want DeadlineExceeded (had to abort)", err)
	}
	<-done
	if diff := cmp.Diff([]string{rtsandbox.TurnFailedOrStoppedText}, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
}

// TestDrainCutTurnRestartingText (issue 22 item 4): a turn Close cuts
// after the drain ends with the cause ErrStopping, so a runtime that
// reports its turn's cause (the session runtime does) answers the guest
// with the restarting text, not the generic failure.
func TestDrainCutTurnRestartingText(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	started := make(chan struct{})
	h.rt.Turn = func(ctx context.Context, _ turnCall) (rtsandbox.Reply, error) {
		close(started)
		<-ctx.Done()
		return rtsandbox.Reply{}, fmt.Errorf("session turn: %w", context.Cause(ctx))
	}
	done := h.submit(mention(guests, "alice", "Alice", "x"))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v; want DeadlineExceeded (had to abort)", err)
	}
	<-done
	if diff := cmp.Diff([]string{rtsandbox.RestartingText}, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
}

// Messages submitted while Close runs are refused, never a panic: a
// WaitGroup must not gain work while Close waits on it (review finding:
// "sync: WaitGroup is reused before previous Wait has returned").
func TestSubmitDuringCloseDoesNotPanic(t *testing.T) {
	for range 100 {
		h := newHarness(t, newMemChannels(guests))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					done, err := h.r.Submit(Message{Channel: guests, Author: Author{ID: "alice"}, Text: "x", MentionsBot: true})
					if err != nil { // refused at once: do not spin on the router's lock
						time.Sleep(time.Millisecond)
						continue
					}
					<-done
				}
			}()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.r.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		cancel()
		close(stop)
		wg.Wait()
	}
}

// A background report waits on the channel's queue behind a running turn
// and is dropped once the channel is no longer sandboxed (review finding).
func TestPostReportQueuedAndModeChecked(t *testing.T) {
	chans := newMemChannels(guests)
	release := make(chan struct{})
	started := make(chan struct{})
	h := newHarness(t, chans)
	h.rt.Turn = func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
		close(started)
		<-release
		return rtsandbox.Reply{OK: true, Text: "Turn reply."}, nil
	}
	done := h.submit(Message{Channel: guests, Author: Author{ID: "alice"}, Text: "x", MentionsBot: true})
	<-started
	posted := make(chan error, 1)
	go func() { posted <- h.r.PostReport(context.Background(), guests, "Report.") }()
	for h.r.QueueSize(guests) != 2 { // the report waits behind the turn
		time.Sleep(time.Millisecond)
	}
	if got := h.surface.Sent(); len(got) != 0 {
		t.Fatalf("sent before the turn ended: %q", got)
	}
	close(release)
	<-done
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if got := h.surface.Sent(); len(got) != 2 || got[0] != "Turn reply." || got[1] != "Report." {
		t.Errorf("sent = %q; want the turn's reply, then the report", got)
	}
	if err := chans.Disable(guests); err != nil {
		t.Fatal(err)
	}
	if err := h.r.PostReport(context.Background(), guests, "Late."); !errors.Is(err, ErrNotSandboxed) {
		t.Errorf("report to an unsandboxed channel = %v; want ErrNotSandboxed", err)
	}
}

func TestValidAuthorID(t *testing.T) {
	for _, tt := range []struct {
		kind, id string
		want     bool
	}{
		{"http", "alice", true},
		{"discord", "112233445566778899", true},
		{"http", "", false},
		{"http", "a b", false},
		{"http", "role:7", false},
		{"Http", "alice", false},
	} {
		if got := ValidAuthorID(tt.kind, tt.id); got != tt.want {
			t.Errorf("ValidAuthorID(%q, %q) = %v; want %v", tt.kind, tt.id, got, tt.want)
		}
	}
}
