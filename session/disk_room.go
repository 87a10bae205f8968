package session

import "github.com/rtsandbox/rtsandbox/wire"

// The room a turn's inputs may take of a bounded workspace (issue 21
// item 3). A channel's turns need to write to its workspace: the
// conversation's records, a compaction's summary, the turn's outbox
// directory. Were a message's attachments or a turn's files allowed to
// fill the workspace to its last byte, every later turn would be refused
// (or fail to write its conversation) until the owner ran fresh: any
// guest could wedge the channel with three large messages. So the files
// that land in the workspace on a guest's behalf stop short of a
// reserve:
//
//   - a message's attachments (collect), counted file by file;
//   - a turn's own files, write_file's and a host tool's image in the
//     outbox: the host measures the room at the turn's start (diskGate)
//     and hands it to the worker in the turn (wire.SessionRoom),
//     which refuses a file that would pass it.
//
// The reserve is sized from what one turn writes besides those files,
// at the default call budget (rtsandbox.SessionMaxCalls, 128 calls, tool
// calls included): its prompt (at most rtsandbox.MaxSessionText, 100,000
// UTF-16 units: 600 KB as JSON when every unit is escaped), a compaction
// record whose summary has the same bound, its final text (the same),
// and at most 64 tool steps, each a tool-calling assistant message and a
// tool result kept at up to 64 KiB of JSON apiece (the worker's
// sessionResultBudget): 8 MiB. The heaviest turn the bounds allow writes
// about 9.8 MiB; 12 MiB covers it with ext4's metadata and still leaves
// more than the 1 MiB at which a hard workspace refuses turns
// (hardReserveBytes), so a workspace whose files stopped at the reserve
// runs its next turn whatever the turn before wrote. An ordinary turn
// writes a few KiB to tens of KiB. A turn makes at most two entries of
// its own (its outbox directory, a new session file), so 64 entries stay
// far above the 16 at which turns are refused. The conversation itself
// can still grow the workspace full over many turns: that is the
// channel's own history, which fresh archives and frees.
const (
	turnReserveBytes = 12 << 20
	turnReserveFiles = 64
)

// room is what u leaves a turn's inputs once the reserve is kept: never
// negative, nothing for a tree too deep to measure.
func (u diskUse) room() wire.SessionRoom {
	if u.deep {
		return wire.SessionRoom{}
	}
	return wire.SessionRoom{
		Bytes: max(0, u.maxBytes-turnReserveBytes-u.bytes),
		Files: max(0, u.maxFiles-turnReserveFiles-u.files),
	}
}

// inputBudget is a running account of a message's files against the
// room measured before the first was written; a nil room bounds nothing
// (no disk bound).
type inputBudget struct {
	room *wire.SessionRoom
}

// take counts a file of n bytes and reports whether it fits what is
// left; a file that does not fit is not counted.
func (b inputBudget) take(n int) bool {
	if b.room == nil {
		return true
	}
	cost := wire.FileCost(int64(n))
	if cost > b.room.Bytes || b.room.Files < 1 {
		return false
	}
	b.room.Bytes -= cost
	b.room.Files--
	return true
}
