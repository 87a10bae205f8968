package sealed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/sqlitelock"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Issue 22: an operator's sqlite3 shell holds memory.db's write lock while
// a sealed turn finishes. The answer is delivered (within stateTimeout,
// the store's busy timeout: about 5 s), the turn's memory change and
// history are not kept, a pending fresh start stays pending, and the
// operator record names the file. Before, the answer was thrown away.
func TestSealedAnswerDeliveredWhileMemoryLocked(t *testing.T) {
	const ch = rtsandbox.ChannelKey("fake:a")
	log := &operatorLog{}
	f := newFixture(t, func(f *fixture) { f.opts.Logger = slog.New(log) })
	var resets []bool
	f.driver.run = func(_ context.Context, _ container.Spec, turn wire.Turn) (rtsandbox.Reply, error) {
		resets = append(resets, turn.Reset)
		return rtsandbox.Reply{OK: true, Text: "the answer", State: &rtsandbox.ChannelState{
			Memory:  []rtsandbox.MemoryEntry{{Scope: "channel", Key: "new", Text: "not kept"}},
			History: []rtsandbox.HistoryEntry{{Role: "user", Content: turn.Text}, {Role: "assistant", Content: "the answer"}},
		}}, nil
	}
	if err := f.rt.StartFresh(ch); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.stateDir, memstore.FileName)
	release := sqlitelock.Hold(t, path)
	b := rtsandbox.Binding{Channel: ch, Speaker: speaker("guest")}
	reply, err := f.rt.RunTurn(context.Background(), b, "first")
	if err != nil || reply.Text != "the answer" || !reply.OK {
		t.Fatalf("RunTurn under the lock = %+v, %v; want the answer", reply, err)
	}
	release()
	st, err := f.state.Load(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{}, History: []rtsandbox.HistoryEntry{}}, st); diff != "" {
		t.Errorf("stored state after the unsaved turn (-want +got):\n%s", diff)
	}
	recs := log.turnRecords()
	if len(recs) != 1 || recs[0].level != slog.LevelError || !strings.Contains(recs[0].message, "state was not saved") ||
		!strings.Contains(recs[0].attrs["err"], path) {
		t.Fatalf("turn records:\n%s\nwant one error naming %s", log.text(), path)
	}
	if _, err := f.rt.RunTurn(context.Background(), b, "second"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true}, resets); diff != "" {
		t.Errorf("reset flags (-want +got):\n%s; the fresh start must wait for a turn whose state was kept", diff)
	}
}

// blockingLoad is a state store whose Load waits for its turn to end and
// then fails as a store does when its context is cancelled.
type blockingLoad struct {
	StateStore
	loading chan struct{}
}

func (s blockingLoad) Load(ctx context.Context, _ rtsandbox.ChannelKey) (rtsandbox.ChannelState, error) {
	close(s.loading)
	<-ctx.Done()
	return rtsandbox.ChannelState{}, fmt.Errorf("memory database: load: %w", ctx.Err())
}

// A turn stopped while its state loads ends as stopped, not as a failed
// store: the guest and the operator log see the stop, and no store
// failure is counted.
func TestTurnStoppedWhileStateLoadsIsStopped(t *testing.T) {
	const ch = rtsandbox.ChannelKey("fake:a")
	loading := make(chan struct{})
	f := newFixture(t, func(f *fixture) { f.opts.State = blockingLoad{StateStore: f.opts.State, loading: loading} })
	errc := make(chan error, 1)
	go func() { errc <- f.say(ch) }()
	<-loading
	if !f.rt.Stop(ch) {
		t.Fatal("Stop did not find the turn that loads its state")
	}
	err := <-errc
	if !errors.Is(err, rtsandbox.ErrTurnStopped) || errors.Is(err, errState) || rtsandbox.KindOf(err) != rtsandbox.KindEndedEarly {
		t.Fatalf("RunTurn = %v (kind %v); want rtsandbox.ErrTurnStopped, ended early, not a state failure", err, rtsandbox.KindOf(err))
	}
}
