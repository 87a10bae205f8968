package router

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// memLedger is a Ledger in memory that records its calls in order.
type memLedger struct {
	mu    sync.Mutex
	calls []string
	open  map[string]bool
}

func (l *memLedger) Begin(ch rtsandbox.ChannelKey, id string) { l.note("begin", ch, id, true) }
func (l *memLedger) End(ch rtsandbox.ChannelKey, id string)   { l.note("end", ch, id, false) }

func (l *memLedger) note(what string, ch rtsandbox.ChannelKey, id string, open bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[string]bool{}
	}
	l.calls = append(l.calls, what+" "+string(ch)+" "+id)
	if open {
		l.open[id] = true
	} else {
		delete(l.open, id)
	}
}

func (l *memLedger) inFlight(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[id]
}

func (l *memLedger) log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// Issue 22 item 3: a message Submit takes is in the ledger while it is
// queued and while its turn runs, and leaves it when it is settled:
// answered, refused for a full queue, or refused by the shutdown while it
// waited. A message dropped at admission is never in it.
func TestLedgerHoldsMessagesUntilSettled(t *testing.T) {
	ledger := &memLedger{}
	release := make(chan struct{})
	seen := make(chan bool, 1)
	h := newHarness(t, newMemChannels(guests), func(o *Options) {
		o.InFlight = ledger
		o.QueueLimit = 2
		o.Runtime = &fakeRuntime{Turn: func(ctx context.Context, c turnCall) (rtsandbox.Reply, error) {
			seen <- ledger.inFlight("m1")
			<-release
			return rtsandbox.Reply{Text: "done"}, nil
		}}
	})
	m1 := mention(guests, "alice", "Alice", "first")
	m1.ID = "m1"
	d1 := h.submit(m1)
	if !<-seen {
		t.Error("the running message is not in the ledger")
	}
	m2, m3 := m1, m1
	m2.ID, m3.ID = "m2", "m3"
	d2 := h.submit(m2)
	if err := <-h.submit(m3); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third message = %v; want the queue full", err)
	}
	unaddressed := m1
	unaddressed.ID, unaddressed.MentionsBot = "m4", false
	if err := <-h.submit(unaddressed); err == nil {
		t.Fatal("an unaddressed message was taken")
	}
	h.r.Drain() // m2 waits: refused now
	if err := <-d2; !errors.Is(err, ErrStopping) {
		t.Errorf("waiting message after the drain = %v; want ErrStopping", err)
	}
	close(release)
	if err := <-d1; err != nil {
		t.Errorf("running message = %v", err)
	}
	want := []string{"begin fake:guests m1", "begin fake:guests m2", "begin fake:guests m3", "end fake:guests m3", "end fake:guests m2", "end fake:guests m1"}
	if diff := cmp.Diff(want, ledger.log()); diff != "" {
		t.Errorf("ledger calls (-want +got):\n%s", diff)
	}
}

// Issue 22 item 3: NotifyRestarted posts the fixed restarting notice as
// a KindRestarted delivery naming the message, and forgets the message
// in the ledger; without a surface for the channel it fails with
// ErrNoSurface and forgets it too (told at most once, else logged).
func TestNotifyRestarted(t *testing.T) {
	ledger := &memLedger{}
	h := newHarness(t, newMemChannels(guests), func(o *Options) { o.InFlight = ledger })
	if err := h.r.NotifyRestarted(context.Background(), guests, "old-1"); err != nil {
		t.Fatal(err)
	}
	want := []Delivery{{Channel: guests, InReplyTo: "old-1", Kind: KindRestarted, Chunk: rtsandbox.RestartingText}}
	if diff := cmp.Diff(want, h.surface.Deliveries()); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	if err := h.r.NotifyRestarted(context.Background(), "gone:room", "old-2"); !errors.Is(err, ErrNoSurface) {
		t.Errorf("NotifyRestarted without a surface = %v; want ErrNoSurface", err)
	}
	if diff := cmp.Diff([]string{"end fake:guests old-1", "end gone:room old-2"}, ledger.log()); diff != "" {
		t.Errorf("ledger calls (-want +got):\n%s", diff)
	}
}
