package memstore

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Labels of the prompt memory block. The entries follow each label as one
// line of JSON: whatever a guest stored stays inside a JSON string, so it
// cannot start a line of its own or pose as the host's text.
const (
	speakerLabel = "Speaker memory (this speaker's own entries, JSON data): "
	channelLabel = "Channel notes (shared with everyone in this channel, JSON data): "
	// A list that was cut ends with omittedStart, the number left out (at
	// most three digits: 256 entries) and omittedEnd.
	omittedStart = " (older entries not shown: "
	omittedEnd   = "; the memory tools list them)"
	noteRoom     = len(omittedStart) + 3 + len(omittedEnd)
)

// Block is the prompt memory block of b's turn (docs/session-mode.md, "Memory"):
// the speaker's own memory entries and the channel notes, each as a line
// of JSON after its label, and the block's visibility: "private" when it
// holds any entry of the speaker's own, "shared" when it holds channel
// notes only, "" when it is empty (a speaker without memory in a channel
// without notes). A speaker without an id or principal gets the channel
// notes only.
//
// The block is at most rtsandbox.MaxSessionMemory UTF-16 units. When the
// entries do not fit, each list keeps its newest whole entries (the
// stored order ends with the latest change) and says how many older ones
// it left out; the speaker's list may take half the room, and more when
// the notes need less.
func (s *Store) Block(ctx context.Context, b rtsandbox.Binding) (string, string, error) {
	var mine, notes []row
	err := s.view(ctx, "prompt block", func(tx *sql.Tx) error {
		var err error
		if b.Speaker.ID != "" && b.Speaker.PrincipalID != "" {
			if mine, err = scopeRows(ctx, tx, b, speakerScope(b.Speaker.ID)); err != nil {
				return err
			}
		}
		notes, err = scopeRows(ctx, tx, b, wire.ScopeChannel)
		return err
	})
	if err != nil {
		return "", "", err
	}
	text, shown := block(items(mine), items(notes), rtsandbox.MaxSessionMemory)
	switch {
	case text == "":
		return "", "", nil
	case shown > 0:
		return text, wire.MemoryPrivate, nil
	}
	return text, wire.MemoryShared, nil
}

func items(rows []row) []wire.MemoryItem {
	out := make([]wire.MemoryItem, len(rows))
	for i, r := range rows {
		out[i] = wire.MemoryItem{Key: r.Key, Text: r.Text}
	}
	return out
}

// block lays out the two lists within limit UTF-16 units and reports how
// many of the speaker's entries it shows.
func block(mine, notes []wire.MemoryItem, limit int) (string, int) {
	// The labels, the notes and the newline are ASCII: bytes are units.
	room := limit - len(speakerLabel) - len(channelLabel) - 2*noteRoom - 1
	mineLine, shown, used := line(speakerLabel, mine, max(room/2, room-listUnits(notes)))
	notesLine, _, _ := line(channelLabel, notes, room-used)
	switch {
	case mineLine == "":
		return notesLine, 0
	case notesLine == "":
		return mineLine, shown
	}
	return mineLine + "\n" + notesLine, shown
}

// line is label and the newest entries of list whose JSON fits room
// units, with a note of how many it left out ("" for an empty list), the
// number of entries it shows and the units of its JSON.
func line(label string, list []wire.MemoryItem, room int) (string, int, int) {
	if len(list) == 0 {
		return "", 0, 0
	}
	first, used := len(list), 2 // "[" and "]"
	for first > 0 {
		u := itemUnits(list[first-1])
		if first < len(list) {
			u++ // the comma
		}
		if used+u > room {
			break
		}
		first, used = first-1, used+u
	}
	data, _ := jsonjs.Marshal(list[first:]) // strings only: cannot fail
	text := label + string(data)
	if first > 0 {
		text += omittedStart + strconv.Itoa(first) + omittedEnd
	}
	return text, len(list) - first, used
}

// listUnits is the UTF-16 length of list's JSON.
func listUnits(list []wire.MemoryItem) int {
	n := 2 + max(len(list)-1, 0)
	for _, it := range list {
		n += itemUnits(it)
	}
	return n
}

func itemUnits(it wire.MemoryItem) int {
	data, _ := jsonjs.Marshal(it)
	return rtsandbox.UTF16Len(string(data))
}
