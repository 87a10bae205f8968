package memstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The benchmarks compare the database with the per-channel JSON files it
// replaces (the previous version's chanstate: one <id>.json per channel,
// read bounded and decoded strictly and checked, written atomically with
// fsync), side by side: go test -run '^$' -bench . ./memstore/
// (docs/benchmarks.md has the figures).

// benchState is a channel's state: half of the entries alice's, half
// channel notes, each text of textLen characters, and hist history
// messages of 2,000 characters.
func benchState(entries, textLen, hist int) rtsandbox.ChannelState {
	var st rtsandbox.ChannelState
	for i := range entries {
		scope := []string{"speaker:alice", "channel"}[i%2]
		st.Memory = append(st.Memory, rtsandbox.MemoryEntry{Scope: scope, Key: fmt.Sprint("key-", i), Text: strings.Repeat("t", textLen)})
	}
	st.History = messages(hist, strings.Repeat("h", 2000))
	return normal(st)
}

// benchSizes are a typical channel and one at the memory limit (about
// 500 KiB of memory and 20 history messages).
var benchSizes = []struct {
	name  string
	state rtsandbox.ChannelState
}{
	{"typical", benchState(32, 200, 10)},
	{"full", benchState(240, 2000, 20)},
}

// jsonFile is the replaced store: one state file per channel.
type jsonFile struct{ path string }

func (j jsonFile) load() (rtsandbox.ChannelState, error) {
	data, err := privdir.ReadFile(j.path, maxStateFile, os.Geteuid())
	if err != nil {
		return rtsandbox.ChannelState{}, err
	}
	return decodeStateFile(data)
}

func (j jsonFile) save(st rtsandbox.ChannelState) error {
	if err := Check(st); err != nil {
		return err
	}
	data, err := jsonjs.Marshal(normal(st))
	if err != nil {
		return err
	}
	return privdir.WriteFile(j.path, data)
}

func benchStores(b *testing.B, st rtsandbox.ChannelState) (*Store, jsonFile) {
	b.Helper()
	dir := b.TempDir()
	s, err := Open(context.Background(), Options{Path: filepath.Join(dir, "state", FileName)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Save(context.Background(), bind(chanA, alice), st); err != nil {
		b.Fatal(err)
	}
	j := jsonFile{path: filepath.Join(dir, "state", ChannelID(chanA)+".json")}
	if err := j.save(st); err != nil {
		b.Fatal(err)
	}
	return s, j
}

// BenchmarkMemoryGet: one memory_get of the speaker's entries. The
// database reads the scope's rows; a JSON file must be read, decoded and
// checked whole.
func BenchmarkMemoryGet(b *testing.B) {
	for _, size := range benchSizes {
		s, j := benchStores(b, size.state)
		c := wire.MemoryCall{Tool: wire.MemoryGet, Scope: wire.ScopeSpeaker}
		b.Run(size.name+"/db", func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Call(context.Background(), bind(chanA, alice), c); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/json-file", func(b *testing.B) {
			for b.Loop() {
				st, err := j.load()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := jsonjs.Marshal(c.Select(st.Memory, c.StoredScope("alice"))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSealedLoad: a sealed turn's state load.
func BenchmarkSealedLoad(b *testing.B) {
	for _, size := range benchSizes {
		s, j := benchStores(b, size.state)
		b.Run(size.name+"/db", func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Load(context.Background(), chanA); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/json-file", func(b *testing.B) {
			for b.Loop() {
				if _, err := j.load(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSealedSave: a sealed turn's commit of its state (durable: the
// database commits with synchronous FULL, the file is fsynced with its
// directory). Most turns change the history only.
func BenchmarkSealedSave(b *testing.B) {
	for _, size := range benchSizes {
		s, j := benchStores(b, size.state)
		b.Run(size.name+"/db", func(b *testing.B) {
			for b.Loop() {
				if err := s.Save(context.Background(), bind(chanA, alice), size.state); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/json-file", func(b *testing.B) {
			for b.Loop() {
				if err := j.save(size.state); err != nil {
					b.Fatal(err)
				}
			}
		})
		// A turn whose memory changed (one entry's text, each time): the
		// database rewrites the channel's memory rows; the file is
		// rewritten whole either way.
		changed := [2]rtsandbox.ChannelState{size.state, size.state}
		changed[1].Memory = append([]rtsandbox.MemoryEntry(nil), size.state.Memory...)
		changed[1].Memory[0].Text = "changed"
		b.Run(size.name+"/db-memory-changed", func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if err := s.Save(context.Background(), bind(chanA, alice), changed[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemorySet: one memory_set in session mode (no file store did
// this on the host before; for scale).
func BenchmarkMemorySet(b *testing.B) {
	c := wire.MemoryCall{Tool: wire.MemorySet, Scope: wire.ScopeSpeaker, Key: "key-0", HasKey: true, Text: "updated"}
	benchDB(b, func(s *Store) error {
		_, err := s.Call(context.Background(), bind(chanA, alice), c)
		return err
	})
}

// BenchmarkBlock: the prompt memory block of a session turn.
func BenchmarkBlock(b *testing.B) {
	benchDB(b, func(s *Store) error {
		_, _, err := s.Block(context.Background(), bind(chanA, alice))
		return err
	})
}

// benchDB runs op on the database of each size.
func benchDB(b *testing.B, op func(*Store) error) {
	for _, size := range benchSizes {
		s, _ := benchStores(b, size.state)
		b.Run(size.name+"/db", func(b *testing.B) {
			for b.Loop() {
				if err := op(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
