package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Speakers as the router admits them: the principal is <channel kind>:<id>.
var (
	alice = rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "discord:alice"}
	bob   = rtsandbox.Speaker{ID: "bob", Name: "Bob", PrincipalID: "discord:bob"}
)

const (
	chanA rtsandbox.ChannelKey = "discord:1"
	chanB rtsandbox.ChannelKey = "discord:2"
)

func bind(ch rtsandbox.ChannelKey, sp rtsandbox.Speaker) rtsandbox.Binding {
	return rtsandbox.Binding{Channel: ch, Speaker: sp, Tier: rtsandbox.TierMember}
}

// logBuf is the operator log of a test store.
type logBuf = syncbuf.Buffer

// testStore opens a store on a real database file under t.TempDir(); edit
// may set the migration sources before it opens.
func testStore(t *testing.T, edit func(o *Options)) (*Store, *logBuf) {
	t.Helper()
	log := &logBuf{}
	o := Options{Path: filepath.Join(t.TempDir(), "state", FileName), Logger: slog.New(slog.NewTextHandler(log, nil))}
	if edit != nil {
		edit(&o)
	}
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, log
}

// call runs one memory tool call with the input as JSON text.
func call(s *Store, b rtsandbox.Binding, tool, input string) (string, error) {
	c, err := wire.DecodeMemoryCall(tool, json.RawMessage(input))
	if err != nil {
		return "", err
	}
	return s.Call(context.Background(), b, c)
}

func mustCall(t *testing.T, s *Store, b rtsandbox.Binding, tool, input string) string {
	t.Helper()
	out, err := call(s, b, tool, input)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", tool, input, b.Speaker.ID, err)
	}
	return out
}

// plant writes a row straight into the database, as a damaged file or
// another program could leave it.
func plant(t *testing.T, s *Store, ch rtsandbox.ChannelKey, scope, key, text, principal string, seq int) {
	t.Helper()
	if _, err := s.db.Exec(`INSERT INTO memory (channel, scope, key, text, principal, seq) VALUES (?, ?, ?, ?, ?, ?)`,
		ChannelID(ch), scope, key, text, principal, seq); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, s *Store, ch rtsandbox.ChannelKey) rtsandbox.ChannelState {
	t.Helper()
	st, err := s.Load(context.Background(), ch)
	if err != nil {
		t.Fatalf("Load(%s): %v", ch, err)
	}
	return st
}

func entries(n int, text string) []rtsandbox.MemoryEntry {
	out := make([]rtsandbox.MemoryEntry, n)
	for i := range out {
		out[i] = rtsandbox.MemoryEntry{Scope: "channel", Key: fmt.Sprint("k", i), Text: text}
	}
	return out
}

func messages(n int, content string) []rtsandbox.HistoryEntry {
	out := make([]rtsandbox.HistoryEntry, n)
	for i := range out {
		out[i] = rtsandbox.HistoryEntry{Role: []string{"user", "assistant"}[i%2], Content: content}
	}
	return out
}

func mustParse(t *testing.T, tool, input string) wire.MemoryCall {
	t.Helper()
	c, err := wire.DecodeMemoryCall(tool, json.RawMessage(input))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func slogTo(l *logBuf) *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
