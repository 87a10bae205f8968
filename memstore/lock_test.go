package memstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/sqlitelock"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Issue 22: an operator's sqlite3 shell holding a write transaction on
// memory.db while 12 channels talk. Reads (a sealed turn's Load, a
// session turn's memory block, memory_get) never wait for it, nor queue
// behind the writes that wait; each write (memory_set, a sealed Save)
// waits at most the busy timeout from its own start, never the writes
// queued before it, and fails as locked (ErrLocked), naming the file.
func TestLockedMemoryDatabaseStopsNoChannel(t *testing.T) {
	s, _ := testStore(t, nil)
	const channels = 12
	chans := make([]rtsandbox.ChannelKey, channels)
	for i := range chans {
		chans[i] = rtsandbox.ChannelKey(fmt.Sprintf("discord:%d", 100+i))
		mustCall(t, s, bind(chans[i], alice), "memory_set", `{"scope":"channel","key":"drink","text":"tea"}`)
	}
	release := sqlitelock.Hold(t, s.Path())
	defer release()

	type result struct {
		what string
		took time.Duration
		err  error
	}
	results := make(chan result, 4*channels)
	var wg sync.WaitGroup
	for _, ch := range chans {
		b := bind(ch, alice)
		do := func(what string, f func() error) {
			wg.Go(func() {
				start := time.Now()
				err := f()
				results <- result{what: what + " " + string(ch), took: time.Since(start), err: err}
			})
		}
		do("write", func() error {
			_, err := call(s, b, "memory_set", `{"scope":"channel","key":"food","text":"rice"}`)
			return err
		})
		do("save", func() error {
			return s.Save(context.Background(), b, rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: wire.ScopeChannel, Key: "drink", Text: "tea"}}, History: messages(2, "hi")})
		})
		do("load", func() error {
			st, err := s.Load(context.Background(), ch)
			if err == nil && (len(st.Memory) != 1 || st.Memory[0].Text != "tea") {
				err = fmt.Errorf("loaded %+v, want the note drink=tea", st.Memory)
			}
			return err
		})
		do("block", func() error {
			text, _, err := s.Block(context.Background(), b)
			if err == nil && text == "" {
				err = errors.New("empty memory block")
			}
			return err
		})
	}
	wg.Wait()
	close(results)
	for r := range results {
		switch r.what[:4] {
		case "load", "bloc":
			if r.err != nil || r.took > time.Second {
				t.Errorf("%s: %v after %v; want its answer within 1 s while the lock is held", r.what, r.err, r.took)
			}
		default:
			if !errors.Is(r.err, ErrLocked) || !errors.Is(r.err, rtsandbox.ErrStore) {
				t.Errorf("%s: %v; want ErrLocked (a rtsandbox.ErrStore)", r.what, r.err)
			}
			if limit := WriteWait + time.Second; r.took > limit {
				t.Errorf("%s failed after %v; want at most %v (its own wait, not the queue's)", r.what, r.took, limit)
			}
		}
	}
	release()
	mustCall(t, s, bind(chans[0], alice), "memory_set", `{"scope":"channel","key":"food","text":"rice"}`)
}
