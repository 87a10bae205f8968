package sealed

import (
	"context"
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
