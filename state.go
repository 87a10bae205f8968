package rtsandbox

// The host owns a sealed channel's memory and history (no guest-writable
// host directory outlives a turn): it passes them to the worker in the turn
// JSON and takes the updated state back in the reply. These are the nouns
// and limits both sides share; the host checks an update against them
// before it writes anything (package memstore), the worker before it
// acts on a turn.

// State limits. Lengths are UTF-16 code units, sizes bytes of JS-style JSON
// (package jsonjs), as in the reference (docs/protocol.md, "The sealed turn"; docs/protocol.md, "Memory tools"; docs/limits.md, "Memory and history").
const (
	MaxMemoryEntries = 256        // entries in a channel's memory
	MaxMemoryBytes   = 512 * 1024 // JSON of the whole memory array
	MaxMemoryKey     = 128        // a trimmed key
	MaxMemoryText    = 2048       // one entry's text
	MaxHistory       = 20         // history messages kept (10 exchanges)
	// HistoryBudget bounds each history message's content, JSON-encoded
	// with its quotes (promptText's budget, docs/protocol.md, "Decoding rules").
	HistoryBudget = 8192

	// MaxTurnBytes bounds the turn JSON on the worker's stdin. The reference
	// reads 262,144 bytes; the turn now carries the channel's state too
	// (memory up to 512 KiB, history up to 160 KiB, a 32,000-unit message
	// that may escape to 192 KiB), so the bound is 2 MiB. The host refuses
	// to start a turn whose JSON would exceed it.
	MaxTurnBytes = 2 << 20
)

// MemoryEntry is one remembered fact. Scope is "channel" or
// "speaker:<speaker id>"; the id is data, never a path.
type MemoryEntry struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	Text  string `json:"text"`
}

// HistoryEntry is one message of a channel's recent exchanges. Role is
// "user" or "assistant"; a user entry's content is the JSON-wrapped
// {"speaker":…,"message":…} string the model saw.
type HistoryEntry struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChannelState is what the host keeps for one sealed channel. Both lists
// are never null on the wire.
type ChannelState struct {
	Memory  []MemoryEntry  `json:"memory"`
	History []HistoryEntry `json:"history"`
}
