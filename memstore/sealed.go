package memstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The sealed runtime's channel state (sealed.StateStore): the turn JSON
// carries the channel's memory in the sealed wire shape, because the
// sealed worker runs the memory tools itself, and its history; the reply
// carries both back.

// Load returns the channel's state in the wire shape: every memory entry
// of the channel in stored order (channel notes and every speaker's
// namespace, as the sealed worker has always received them) and the
// history, both lists empty and non-nil for a channel never seen. Stored
// data that breaks the limits is ErrCorrupt naming the channel.
func (s *Store) Load(ctx context.Context, channel rtsandbox.ChannelKey) (rtsandbox.ChannelState, error) {
	var st rtsandbox.ChannelState
	err := s.view(ctx, "load", func(tx *sql.Tx) error {
		var err error
		if st.Memory, err = channelEntries(ctx, tx, channel); err != nil {
			return err
		}
		st.History, err = channelHistory(ctx, tx, channel)
		return err
	})
	if err != nil {
		return rtsandbox.ChannelState{}, err
	}
	return normal(st), nil
}

// Save stores the state a cleanly ended sealed turn of b returned. The
// worker may change only the channel notes and its own speaker's
// namespace ("speaker:<b.Speaker.ID>", owned by b's principal from now
// on): the other speakers' entries stay as stored, whatever the reply
// says of them (a conforming worker returns them unchanged; a fabricated
// one is dropped). The history is replaced. Both the reply and the result
// must keep the limits, else ErrInvalid and nothing changes.
func (s *Store) Save(ctx context.Context, b rtsandbox.Binding, st rtsandbox.ChannelState) error {
	if err := Check(st); err != nil {
		return err
	}
	channel, own := b.Channel, speakerScope(b.Speaker.ID)
	return s.tx(ctx, "save", func(tx *sql.Tx) error {
		stored, err := storedRows(ctx, tx, channel)
		if err != nil {
			return err
		}
		if err := checkOwner(channel, stored, own, b.Speaker.PrincipalID); err != nil {
			return err
		}
		// Most turns change no memory: then only the history is written
		// (the stored rows were checked as they were read).
		if rows := merge(stored, st.Memory, own, b.Speaker.PrincipalID); !slices.Equal(rows, stored) {
			if err := Check(rtsandbox.ChannelState{Memory: entriesOf(rows)}); err != nil {
				return err
			}
			if err := replaceMemory(ctx, tx, ChannelID(channel), rows); err != nil {
				return err
			}
		}
		if err := replaceHistory(ctx, tx, ChannelID(channel), st.History); err != nil {
			return err
		}
		return touch(ctx, tx, channel)
	})
}

// row is one stored memory entry with its owner.
type row struct {
	rtsandbox.MemoryEntry
	principal string
}

func entriesOf(rows []row) []rtsandbox.MemoryEntry {
	out := make([]rtsandbox.MemoryEntry, len(rows))
	for i, r := range rows {
		out[i] = r.MemoryEntry
	}
	return out
}

// merge is the channel's memory after a sealed turn: the reply's notes and
// own entries in the reply's order, each other speaker's stored entry at
// the place where the reply kept it, then the stored ones the reply
// dropped.
func merge(stored []row, reply []rtsandbox.MemoryEntry, own, principal string) []row {
	foreign := map[[2]string]row{}
	var order [][2]string
	for _, r := range stored {
		if r.Scope != wire.ScopeChannel && r.Scope != own {
			k := [2]string{r.Scope, r.Key}
			foreign[k] = r
			order = append(order, k)
		}
	}
	out := make([]row, 0, len(reply)+len(foreign))
	for _, e := range reply {
		k := [2]string{e.Scope, e.Key}
		switch r, kept := foreign[k]; {
		case e.Scope == wire.ScopeChannel:
			out = append(out, row{MemoryEntry: e})
		case e.Scope == own:
			out = append(out, row{MemoryEntry: e, principal: principal})
		case kept:
			out = append(out, r)
			delete(foreign, k)
		}
	}
	for _, k := range order {
		if r, ok := foreign[k]; ok {
			out = append(out, r)
		}
	}
	return out
}

// speakerScope is the stored scope of a speaker's entries.
func speakerScope(speakerID string) string { return wire.ScopeSpeaker + ":" + speakerID }

// channelEntries reads the channel's memory in stored order and checks it.
func channelEntries(ctx context.Context, q querier, channel rtsandbox.ChannelKey) ([]rtsandbox.MemoryEntry, error) {
	rows, err := storedRows(ctx, q, channel)
	return entriesOf(rows), err
}

// storedRows reads the channel's memory rows in stored order, bounded by
// the entry limit, and checks them: ErrCorrupt naming the channel.
func storedRows(ctx context.Context, q querier, channel rtsandbox.ChannelKey) ([]row, error) {
	return queryRows(ctx, q, channel, `SELECT scope, key, text, principal FROM memory
		WHERE channel = ? ORDER BY seq LIMIT ?`, ChannelID(channel), rtsandbox.MaxMemoryEntries+1)
}

// queryRows runs a memory query (scope, key, text, principal), reads at
// most the entry limit plus one row and checks what it read.
func queryRows(ctx context.Context, q querier, channel rtsandbox.ChannelKey, query string, args ...any) ([]row, error) {
	rs, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.Scope, &r.Key, &r.Text, &r.principal); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if err := checkMemory(entriesOf(out)); err != nil {
		return nil, corrupt(channel, err)
	}
	return out, nil
}

// channelHistory reads the channel's history, bounded and checked.
func channelHistory(ctx context.Context, q querier, channel rtsandbox.ChannelKey) ([]rtsandbox.HistoryEntry, error) {
	rs, err := q.QueryContext(ctx, `SELECT role, content FROM history WHERE channel = ? ORDER BY pos LIMIT ?`,
		ChannelID(channel), rtsandbox.MaxHistory+1)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []rtsandbox.HistoryEntry
	for rs.Next() {
		var h rtsandbox.HistoryEntry
		if err := rs.Scan(&h.Role, &h.Content); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if err := checkHistory(out); err != nil {
		return nil, corrupt(channel, err)
	}
	return out, nil
}

func corrupt(channel rtsandbox.ChannelKey, err error) error {
	return fmt.Errorf("%w: channel %q: %w", ErrCorrupt, string(channel), err)
}

// querier is what reads need of *sql.DB and *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// replaceMemory writes rows as the whole memory of the channel id, in
// order.
func replaceMemory(ctx context.Context, tx *sql.Tx, id string, rows []row) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM memory WHERE channel = ?`, id); err != nil {
		return err
	}
	return insertAll(ctx, tx, `INSERT INTO memory (channel, scope, key, text, principal, seq) VALUES (?, ?, ?, ?, ?, ?)`,
		len(rows), func(i int) []any {
			return []any{id, rows[i].Scope, rows[i].Key, rows[i].Text, rows[i].principal, i + 1}
		})
}

// replaceHistory writes hist as the whole history of the channel id.
func replaceHistory(ctx context.Context, tx *sql.Tx, id string, hist []rtsandbox.HistoryEntry) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM history WHERE channel = ?`, id); err != nil {
		return err
	}
	return insertAll(ctx, tx, `INSERT INTO history (channel, pos, role, content) VALUES (?, ?, ?, ?)`,
		len(hist), func(i int) []any { return []any{id, i, hist[i].Role, hist[i].Content} })
}

// insertAll runs the statement insert n times, once prepared, with the
// arguments args(i).
func insertAll(ctx context.Context, tx *sql.Tx, insert string, n int, args func(i int) []any) error {
	if n == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, insert)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i := range n {
		if _, err := stmt.ExecContext(ctx, args(i)...); err != nil {
			return err
		}
	}
	return nil
}

// normal replaces nil lists with empty ones, as the wire wants.
func normal(st rtsandbox.ChannelState) rtsandbox.ChannelState {
	if st.Memory == nil {
		st.Memory = []rtsandbox.MemoryEntry{}
	}
	if st.History == nil {
		st.History = []rtsandbox.HistoryEntry{}
	}
	return st
}

// Check applies the limits of the shared contract (docs/protocol.md, "Memory tools"; docs/limits.md, "Memory and history"):
// at most 256 memory entries whose JSON is at most 512 KiB, each with scope
// "channel" or "speaker:<id>", a key of 1..128 and a non-blank text of at
// most 2,048 UTF-16 units, no (scope, key) twice; at most 20 history
// messages with role user or assistant and content of at most 8 KiB as a
// JSON string. Errors wrap ErrInvalid and name the first rule broken.
func Check(st rtsandbox.ChannelState) error {
	if err := checkMemory(st.Memory); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkHistory(st.History); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func checkMemory(mem []rtsandbox.MemoryEntry) error {
	if len(mem) > rtsandbox.MaxMemoryEntries {
		return fmt.Errorf("memory has %d entries, more than %d", len(mem), rtsandbox.MaxMemoryEntries)
	}
	seen := make(map[[2]string]bool, len(mem))
	for i, e := range mem {
		id, speaker := strings.CutPrefix(e.Scope, wire.ScopeSpeaker+":")
		switch {
		case e.Scope != wire.ScopeChannel && !speaker, speaker && rtsandbox.UTF16Len(id) > rtsandbox.MaxSpeakerField:
			return fmt.Errorf("memory entry %d: scope must be channel or speaker:<id>", i)
		case rtsandbox.UTF16Len(e.Key) < 1 || rtsandbox.UTF16Len(e.Key) > rtsandbox.MaxMemoryKey:
			return fmt.Errorf("memory entry %d: key must be 1..%d characters", i, rtsandbox.MaxMemoryKey)
		case rtsandbox.TrimJS(e.Text) == "" || rtsandbox.UTF16Len(e.Text) > rtsandbox.MaxMemoryText:
			return fmt.Errorf("memory entry %d: text must be 1..%d characters", i, rtsandbox.MaxMemoryText)
		case seen[[2]string{e.Scope, e.Key}]:
			return fmt.Errorf("memory entry %d: scope and key repeat an earlier entry", i)
		}
		seen[[2]string{e.Scope, e.Key}] = true
	}
	if n := memorySize(mem); n > rtsandbox.MaxMemoryBytes {
		return fmt.Errorf("memory is %d bytes of JSON, more than %d", n, rtsandbox.MaxMemoryBytes)
	}
	return nil
}

// memorySize is the size of mem as the wire's JSON array.
func memorySize(mem []rtsandbox.MemoryEntry) int {
	return jsonjs.Size(normal(rtsandbox.ChannelState{Memory: mem}).Memory)
}

func checkHistory(hist []rtsandbox.HistoryEntry) error {
	if len(hist) > rtsandbox.MaxHistory {
		return fmt.Errorf("history has %d messages, more than %d", len(hist), rtsandbox.MaxHistory)
	}
	for i, h := range hist {
		if h.Role != "user" && h.Role != "assistant" {
			return fmt.Errorf("history message %d: role must be user or assistant", i)
		}
		if jsonjs.StringSize(h.Content) > rtsandbox.HistoryBudget {
			return fmt.Errorf("history message %d: content is over %d bytes of JSON", i, rtsandbox.HistoryBudget)
		}
	}
	return nil
}
