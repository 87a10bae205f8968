package memstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Call runs one memory tool call for b's speaker, with the sealed
// semantics (docs/protocol.md, "Memory tools"): memory_get answers the JSON list
// [{"key","text"}…] of the scope's matching entries in stored order,
// memory_set "Saved." (an update moves the entry to the end), memory_remove
// "Forgotten." (also when nothing matched). The speaker is b's, never one
// the input names: speaker scope is "speaker:<b.Speaker.ID>" owned by
// b.Speaker.PrincipalID. A change that would break the channel's limits
// is wire.ErrMemoryCapacity and leaves the store as it was.
// Errors: ErrSpeaker (speaker scope without an id and principal),
// ErrOwner, ErrCorrupt, database errors.
func (s *Store) Call(ctx context.Context, b rtsandbox.Binding, c wire.MemoryCall) (string, error) {
	scope := c.StoredScope(b.Speaker.ID)
	if c.Scope == wire.ScopeSpeaker && (b.Speaker.ID == "" || b.Speaker.PrincipalID == "") {
		return "", ErrSpeaker
	}
	if c.Tool == wire.MemoryGet {
		return s.get(ctx, b, c, scope)
	}
	return s.change(ctx, b, c, scope)
}

func (s *Store) get(ctx context.Context, b rtsandbox.Binding, c wire.MemoryCall, scope string) (string, error) {
	var items []wire.MemoryItem
	err := s.view(ctx, c.Tool, func(tx *sql.Tx) error {
		rows, err := scopeRows(ctx, tx, b, scope)
		items = c.Select(entriesOf(rows), scope)
		return err
	})
	if err != nil {
		return "", err
	}
	out, err := jsonjs.Marshal(items)
	return string(out), err
}

// change runs a memory_set or memory_remove in one transaction: the
// channel's memory is read and checked, the speaker's namespace must be
// unowned or the speaker's (its unclaimed entries become the speaker's),
// the call is applied (wire.MemoryCall.Apply, the worker's own rule)
// and the result must keep the channel's limits before the one changed row
// is written.
func (s *Store) change(ctx context.Context, b rtsandbox.Binding, c wire.MemoryCall, scope string) (string, error) {
	var result string
	err := s.tx(ctx, c.Tool, func(tx *sql.Tx) error {
		stored, err := storedRows(ctx, tx, b.Channel)
		if err != nil {
			return err
		}
		principal := ""
		if c.Scope == wire.ScopeSpeaker {
			principal = b.Speaker.PrincipalID
			if err := claim(ctx, tx, b.Channel, stored, scope, principal); err != nil {
				return err
			}
		}
		next, res := c.Apply(entriesOf(stored), scope)
		if len(next) > rtsandbox.MaxMemoryEntries || memorySize(next) > rtsandbox.MaxMemoryBytes {
			return wire.ErrMemoryCapacity
		}
		// The stored entries were checked as they were read; a set adds
		// one more, last (a speaker id over 256 units, say).
		if c.Tool == wire.MemorySet {
			if err := checkMemory(next[len(next)-1:]); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
		if err := writeEntry(ctx, tx, b.Channel, c, scope, principal); err != nil {
			return err
		}
		result = res
		return touch(ctx, tx, b.Channel)
	})
	return result, err
}

// writeEntry drops the (scope, key) entry and, for a set, appends the new
// one after every entry of the channel.
func writeEntry(ctx context.Context, tx *sql.Tx, channel rtsandbox.ChannelKey, c wire.MemoryCall, scope, principal string) error {
	id := ChannelID(channel)
	if _, err := tx.ExecContext(ctx, `DELETE FROM memory WHERE channel = ? AND scope = ? AND key = ?`, id, scope, c.Key); err != nil {
		return err
	}
	if c.Tool != wire.MemorySet {
		return nil
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO memory (channel, scope, key, text, principal, seq)
		VALUES (?, ?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM memory WHERE channel = ?))`,
		id, scope, c.Key, c.Text, principal, id)
	return err
}

// scopeRows reads one scope of the channel for b in stored order: the
// channel notes, or b's speaker entries, which must be unowned or b's
// (checkOwner).
func scopeRows(ctx context.Context, tx *sql.Tx, b rtsandbox.Binding, scope string) ([]row, error) {
	rows, err := queryRows(ctx, tx, b.Channel, `SELECT scope, key, text, principal FROM memory
		WHERE channel = ? AND scope = ? ORDER BY seq LIMIT ?`, ChannelID(b.Channel), scope, rtsandbox.MaxMemoryEntries+1)
	if err != nil || scope == wire.ScopeChannel {
		return rows, err
	}
	return rows, checkOwner(b.Channel, rows, scope, b.Speaker.PrincipalID)
}

// checkOwner refuses principal the speaker namespace scope of channel when
// one of its rows belongs to another principal (ErrOwner).
func checkOwner(channel rtsandbox.ChannelKey, rows []row, scope, principal string) error {
	for _, r := range rows {
		if r.Scope == scope && r.principal != "" && r.principal != principal {
			return fmt.Errorf("%w: channel %q, %s", ErrOwner, string(channel), scope)
		}
	}
	return nil
}

// claim makes principal the owner of its speaker namespace's unclaimed
// entries (imported ones), after checkOwner on the channel's rows.
func claim(ctx context.Context, tx *sql.Tx, channel rtsandbox.ChannelKey, rows []row, scope, principal string) error {
	if err := checkOwner(channel, rows, scope, principal); err != nil {
		return err
	}
	if !slices.ContainsFunc(rows, func(r row) bool { return r.Scope == scope && r.principal == "" }) {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE memory SET principal = ? WHERE channel = ? AND scope = ? AND principal = ''`,
		principal, ChannelID(channel), scope)
	return err
}
