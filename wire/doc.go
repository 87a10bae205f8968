// Package wire is the worker↔broker protocol of both modes, in one place
// the in-container worker and the host share, so that neither side can
// drift from the other: the sealed turn JSON on the worker's stdin (Turn)
// and the reply on its stdout (ParseReply), the broker's routes (RouteModel,
// ToolRoute, MCPRoute) and the headers the worker presents (BrokerHost,
// DummyKey), the MCP call shape (MCPCall), the chat-completions parts both
// sides write (ChatMessage, ToolCall, ChatTool), the session protocol
// (SessionTurn, ResultPacket, WorkerReady and the session routes), the host
// compaction protocol (CompactRequest, CompactResponse, CompactionReport)
// and the memory tools (MemoryCall: parsed, then applied to a channel's
// entries).
//
// What the other side sends is decoded into typed wire structs, never read
// member by member out of a map: Fill (wirefield.go) fills one by exact
// member name, the last of repeated members, no null, and the domain
// type's one Validate checks the values; the worker reads the protocol's
// objects with it too. Its field types (String, Bool, Int, OptString,
// Checked, …) carry the JSON type rules the reference's typeof checks made.
//
// Like the root package, it imports only the standard library and the root
// (whose nouns, limits and error kinds it applies), so the worker may
// import it: the architecture test holds it to that.
package wire
