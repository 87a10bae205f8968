package router

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

func ownerCmd(ch rtsandbox.ChannelKey, action string) Command {
	return Command{Channel: ch, Author: Author{ID: "owner", Name: "Ada"}, Action: action}
}

// The reference's test "Commands guard".
func TestCommandsGuard(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	store := openStore(t, dir)
	h := newHarness(t, store)
	ctx := context.Background()

	text, err := h.r.Command(ctx, Command{Channel: guests, Author: Author{ID: "alice", Name: "Alice"}, Action: ActionOn})
	if !errors.Is(err, ErrNotOwner) || text != rtsandbox.NotOwnerText || store.Enabled(guests) {
		t.Errorf("guest on = %q, %v, enabled %v; want the refusal and no change", text, err, store.Enabled(guests))
	}
	text, err = h.r.Command(ctx, Command{Channel: guests, Author: Author{ID: "owner", Bot: true}, Action: ActionOn})
	if !errors.Is(err, ErrNotOwner) || store.Enabled(guests) {
		t.Errorf("bot with the owner's id on = %q, %v; want refusal", text, err)
	}
	dm := ownerCmd(guests, ActionOn)
	dm.Direct = true
	text, err = h.r.Command(ctx, dm)
	if !errors.Is(err, ErrNeedsChannel) || text != rtsandbox.NeedsChannelText || store.Enabled(guests) {
		t.Errorf("owner on in a DM = %q, %v; want %q and no change", text, err, rtsandbox.NeedsChannelText)
	}
	text, err = h.r.Command(ctx, ownerCmd(guests, ActionOn))
	if err != nil || text != rtsandbox.EnabledText || !store.Enabled(guests) {
		t.Errorf("owner on = %q, %v, enabled %v", text, err, store.Enabled(guests))
	}
	text, _ = h.r.Command(ctx, ownerCmd(guests, ActionStatus))
	if !strings.Contains(text, "enabled") {
		t.Errorf("status = %q; want it to contain enabled", text)
	}
	text, err = h.r.Command(ctx, ownerCmd(guests, "explode"))
	if !errors.Is(err, ErrUnknownAction) || text != rtsandbox.UnknownActionText {
		t.Errorf("unknown action = %q, %v", text, err)
	}
	text, err = h.r.Command(ctx, ownerCmd(guests, ActionOff))
	if err != nil || text != rtsandbox.DisabledText {
		t.Errorf("owner off = %q, %v", text, err)
	}
	store.Close()
	again := openStore(t, dir)
	if again.Enabled(guests) {
		t.Errorf("a new store instance still has %s after off", guests)
	}
}

// The reference's test "Commands queue": off waits behind the running turn.
func TestCommandsQueue(t *testing.T) {
	chans := newMemChannels(guests)
	h := newHarness(t, chans)
	release := make(chan struct{})
	started := make(chan struct{})
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		close(started)
		<-release
		return rtsandbox.Reply{OK: true, Text: "held"}, nil
	}
	turn := h.submit(mention(guests, "alice", "Alice", "x"))
	<-started
	cmd := make(chan string, 1)
	go func() {
		text, _ := h.r.Command(context.Background(), ownerCmd(guests, ActionOff))
		cmd <- text
	}()
	for h.r.QueueSize(guests) < 2 {
		runtimeGosched()
	}
	if !chans.Enabled(guests) {
		t.Fatalf("off took effect while the turn still held the queue")
	}
	close(release)
	<-turn
	if text := <-cmd; text != rtsandbox.DisabledText {
		t.Errorf("off = %q", text)
	}
	if chans.Enabled(guests) {
		t.Errorf("still enabled after the command finished")
	}
}

// A fresh that found a session channel's own bounded workspace full is
// answered with the workspace's text, never the host's disk-full text
// (issue 21: "The host's disk is full" with 72 GB free); an ENOSPC of the
// host's own is still the disk's.
func TestFreshWorkspaceFullIsNotTheHostDisk(t *testing.T) {
	enospc := &os.PathError{Op: "mkdir", Path: "sessions/archive", Err: syscall.ENOSPC}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"workspace", fmt.Errorf("%w: archive sessions: %w", rtsandbox.ErrWorkspaceFull, enospc), rtsandbox.WorkspaceFullText},
		{"host", fmt.Errorf("archive sessions: %w", enospc), rtsandbox.DiskFullText},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newMemChannels(guests))
			h.rt.FreshErr = tc.err
			if text, err := h.r.Command(context.Background(), ownerCmd(guests, ActionFresh)); text != tc.want || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("fresh = %q, %v; want %q", text, err, tc.want)
			}
		})
	}
}

func TestCommandsFreshAndStop(t *testing.T) {
	h := newHarness(t, newMemChannels(guests))
	ctx := context.Background()
	if text, err := h.r.Command(ctx, ownerCmd(guests, ActionFresh)); err != nil || text != rtsandbox.FreshText {
		t.Errorf("fresh = %q, %v", text, err)
	}
	if diff := cmp.Diff([]rtsandbox.ChannelKey{guests}, h.rt.Fresh()); diff != "" {
		t.Errorf("runtime StartFresh calls (-want +got):\n%s", diff)
	}
	if text, err := h.r.Command(ctx, ownerCmd("fake:plain", ActionFresh)); err != nil || text != rtsandbox.NotOwnedText {
		t.Errorf("fresh in an unowned channel = %q, %v", text, err)
	}
	if text, _ := h.r.Command(ctx, ownerCmd(guests, ActionStop)); text != rtsandbox.IdleText {
		t.Errorf("stop with nothing running = %q", text)
	}
	started := make(chan struct{})
	h.rt.Turn = func(ctx context.Context, _ turnCall) (rtsandbox.Reply, error) {
		close(started)
		<-ctx.Done()
		return rtsandbox.Reply{}, ctx.Err()
	}
	turn := h.submit(mention(guests, "alice", "Alice", "x"))
	<-started
	if text, _ := h.r.Command(ctx, ownerCmd(guests, ActionStop)); text != rtsandbox.StoppedText {
		t.Errorf("stop during a turn = %q", text)
	}
	<-turn
	if diff := cmp.Diff([]string{rtsandbox.TurnFailedOrStoppedText}, h.surface.Sent()); diff != "" {
		t.Errorf("sent (-want +got):\n%s", diff)
	}
	if text, _ := h.r.Command(ctx, Command{Channel: guests, Author: Author{ID: "alice"}, Action: ActionStop}); text != rtsandbox.NotOwnerText {
		t.Errorf("guest stop = %q; want refusal", text)
	}
}

func TestCommandStoreFailure(t *testing.T) {
	chans := newMemChannels()
	chans.failing = true
	h := newHarness(t, chans)
	text, err := h.r.Command(context.Background(), ownerCmd(guests, ActionOn))
	if err == nil || text != rtsandbox.CommandFailedText {
		t.Errorf("on with a failing store = %q, %v; want %q", text, err, rtsandbox.CommandFailedText)
	}
	if strings.Contains(text, "disk full") {
		t.Errorf("the user-facing text leaks the error detail")
	}
	if got := h.log.messages(); len(got) != 1 || got[0] != "ERROR owner command failed" {
		t.Errorf("logs = %q", got)
	}
}

func runtimeGosched() { time.Sleep(time.Millisecond) }

// An owner command whose wait ends (an interaction about to expire) says
// it is queued, and still applies when the running turn ends (review
// finding: it used to say it failed).
func TestCommandWaitEndsStillApplies(t *testing.T) {
	chans := newMemChannels(guests)
	h := newHarness(t, chans)
	release := make(chan struct{})
	started := make(chan struct{})
	h.rt.Turn = func(context.Context, turnCall) (rtsandbox.Reply, error) {
		close(started)
		<-release
		return rtsandbox.Reply{OK: true, Text: "held"}, nil
	}
	turn := h.submit(mention(guests, "alice", "Alice", "x"))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if text, err := h.r.Command(ctx, ownerCmd(guests, ActionOff)); text != rtsandbox.QueuedText || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("off past its wait = %q, %v; want %q", text, err, rtsandbox.QueuedText)
	}
	close(release)
	<-turn
	deadline := time.Now().Add(5 * time.Second)
	for chans.Enabled(guests) {
		if time.Now().After(deadline) {
			t.Fatal("the queued off never applied")
		}
		runtimeGosched()
	}
}

// TestStatusAppendsUsage: with a usage source, status (and only status)
// ends with the channel's usage line.
func TestStatusAppendsUsage(t *testing.T) {
	h := newHarness(t, newMemChannels(guests), func(o *Options) {
		o.Usage = func(_ context.Context, ch rtsandbox.ChannelKey) string { return "usage of " + string(ch) }
	})
	ctx := context.Background()
	text, err := h.r.Command(ctx, ownerCmd(guests, ActionStatus))
	if want := rtsandbox.EnabledText + "\nusage of " + string(guests); err != nil || text != want {
		t.Errorf("status = %q, %v; want %q", text, err, want)
	}
	if text, _ := h.r.Command(ctx, ownerCmd(guests, ActionOn)); text != rtsandbox.EnabledText {
		t.Errorf("on = %q; want %q without usage", text, rtsandbox.EnabledText)
	}
}
