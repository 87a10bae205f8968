// Package runtimetest is the conformance suite of rtsandbox.Runtime, the one
// interface the router drives: every mode's runtime (the sealed one, the
// session one) passes the same tests, so the router can rely on the
// contract without knowing the mode. A mode's package runs it against its
// real runtime on a real engine with a stand-in model or broker that
// understands the Harness's three inputs.
//
// What the suite holds a runtime to:
//   - a turn answers with the reply, and Status then names the mode, the
//     channel's profile and the container state of a channel that ran;
//   - a failed turn fails (an error or a reply with OK false), carries no
//     files, and never blocks the channel's next turn;
//   - a turn past its deadline returns, soon after it, an error wrapping
//     rtsandbox.ErrTurnTimeout, and the channel still answers;
//   - Stop of an idle channel reports false; Stop of a running turn
//     reports true and the turn returns an error wrapping
//     rtsandbox.ErrTurnStopped (a KindEndedEarly error);
//   - a channel's turns continue its conversation; after StartFresh the
//     next turn starts a new one, which the turn after it continues;
//   - Remove of a channel that never ran returns nil; after a turn it
//     removes what the runtime keeps and the channel still answers.
//
// The subtests run one after another (never in parallel: a real engine
// starts one container at a time here), each on a channel of its own.
package runtimetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// Harness is one mode's runtime under test and what its stand-ins do.
type Harness struct {
	// Runtime is the runtime under test, its turn deadline Timeout.
	Runtime rtsandbox.Runtime
	Timeout time.Duration
	// Mode and Profile are what Status names for every channel.
	Mode, Profile string
	// Ran and Removed are Status's container state after a turn and after
	// Remove ("" for a mode with no container between turns).
	Ran, Removed string
	// Channel returns a channel no earlier subtest used.
	Channel func() rtsandbox.ChannelKey
	// OK, Fail and Hang are turn texts the stand-ins understand: OK is
	// answered with Answer, Fail makes the turn fail, Hang is never
	// answered.
	OK, Fail, Hang, Answer string
	// Continued reports whether the latest turn continued an earlier
	// conversation of its channel: the model (sealed) or the worker
	// (session) saw an earlier turn.
	Continued func(t *testing.T) bool
}

// slack is how long after its deadline a cut turn may take to return: the
// engine kills and removes its container meanwhile.
const slack = 20 * time.Second

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("Turn", func(t *testing.T) { testTurn(t, h) })
	t.Run("FailedTurn", func(t *testing.T) { testFailed(t, h) })
	t.Run("Timeout", func(t *testing.T) { testTimeout(t, h) })
	t.Run("Stop", func(t *testing.T) { testStop(t, h) })
	t.Run("Fresh", func(t *testing.T) { testFresh(t, h) })
	t.Run("Remove", func(t *testing.T) { testRemove(t, h) })
}

// binding is the suite's speaker on channel, as the router resolves one.
func binding(channel rtsandbox.ChannelKey) rtsandbox.Binding {
	return rtsandbox.Binding{Channel: channel, Tier: rtsandbox.TierMember,
		Speaker: rtsandbox.Speaker{ID: "guest", Name: "Guest", PrincipalID: "test:guest"}}
}

// run runs a turn of text on channel.
func run(ctx context.Context, h Harness, channel rtsandbox.ChannelKey, text string) (rtsandbox.Answer, error) {
	return h.Runtime.Run(ctx, binding(channel), rtsandbox.TurnInput{MessageID: "m1", Text: text}, nil)
}

// mustAnswer runs an OK turn and fails the test unless it answers.
func mustAnswer(t *testing.T, h Harness, channel rtsandbox.ChannelKey) {
	t.Helper()
	a, err := run(context.Background(), h, channel, h.OK)
	if err != nil || !a.Reply.OK || a.Reply.Text != h.Answer {
		t.Fatalf("turn = %+v, %v; want OK %q", a.Reply, err, h.Answer)
	}
}

// status fails the test unless channel's status names the mode, the
// profile and container.
func status(t *testing.T, h Harness, channel rtsandbox.ChannelKey, container string) {
	t.Helper()
	st, err := h.Runtime.Status(context.Background(), channel)
	want := rtsandbox.RuntimeStatus{Mode: h.Mode, Profile: h.Profile, Container: container}
	st.Workspace = nil // a mode's own figures
	if err != nil || st != want {
		t.Errorf("Status = %+v, %v; want %+v", st, err, want)
	}
}

func testTurn(t *testing.T, h Harness) {
	ch := h.Channel()
	mustAnswer(t, h, ch)
	status(t, h, ch, h.Ran)
	if h.Continued(t) {
		t.Error("a channel's first turn continued a conversation")
	}
}

func testFailed(t *testing.T, h Harness) {
	ch := h.Channel()
	a, err := run(context.Background(), h, ch, h.Fail)
	if err == nil && a.Reply.OK {
		t.Fatalf("failed turn = %+v; want an error or OK false", a.Reply)
	}
	if a.Files != nil {
		t.Errorf("failed turn carries files %v", a.Files)
	}
	mustAnswer(t, h, ch)
}

func testTimeout(t *testing.T, h Harness) {
	ch := h.Channel()
	began := time.Now()
	_, err := run(context.Background(), h, ch, h.Hang)
	if took := time.Since(began); took > h.Timeout+slack {
		t.Errorf("a hung turn returned after %v; want by its deadline %v plus %v", took, h.Timeout, slack)
	}
	if !errors.Is(err, rtsandbox.ErrTurnTimeout) {
		t.Fatalf("hung turn = %v; want rtsandbox.ErrTurnTimeout", err)
	}
	mustAnswer(t, h, ch)
}

func testStop(t *testing.T, h Harness) {
	ch := h.Channel()
	if h.Runtime.Stop(ch) {
		t.Error("Stop of an idle channel reported a running turn")
	}
	errc := make(chan error, 1)
	go func() {
		_, err := run(context.Background(), h, ch, h.Hang)
		errc <- err
	}()
	// Stop reports true only once the turn runs: that is the event waited
	// for, and the runtime offers no other.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(h.Timeout)
	for !h.Runtime.Stop(ch) {
		select {
		case err := <-errc:
			t.Fatalf("the hung turn ended before Stop reached it: %v", err)
		case <-deadline:
			t.Fatal("Stop never found the running turn")
		case <-tick.C:
		}
	}
	err := <-errc
	if !errors.Is(err, rtsandbox.ErrTurnStopped) || rtsandbox.KindOf(err) != rtsandbox.KindEndedEarly {
		t.Fatalf("stopped turn = %v (kind %v); want rtsandbox.ErrTurnStopped, ended early", err, rtsandbox.KindOf(err))
	}
	mustAnswer(t, h, ch)
}

func testFresh(t *testing.T, h Harness) {
	ch := h.Channel()
	mustAnswer(t, h, ch)
	mustAnswer(t, h, ch)
	if !h.Continued(t) {
		t.Fatal("the second turn did not continue the conversation")
	}
	if err := h.Runtime.StartFresh(ch); err != nil {
		t.Fatalf("StartFresh = %v", err)
	}
	mustAnswer(t, h, ch)
	if h.Continued(t) {
		t.Error("the turn after StartFresh continued the old conversation")
	}
	mustAnswer(t, h, ch)
	if !h.Continued(t) {
		t.Error("the new conversation was not continued")
	}
}

func testRemove(t *testing.T, h Harness) {
	ctx := context.Background()
	if err := h.Runtime.Remove(ctx, h.Channel()); err != nil {
		t.Errorf("Remove of a channel that never ran = %v; want nil", err)
	}
	ch := h.Channel()
	mustAnswer(t, h, ch)
	if err := h.Runtime.Remove(ctx, ch); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	status(t, h, ch, h.Removed)
	mustAnswer(t, h, ch)
}
