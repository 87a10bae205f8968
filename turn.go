package rtsandbox

// TurnSpeaker is the speaker as the worker sees it: the principal id stays
// on the host.
type TurnSpeaker struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// MCPServerTools lists the tools of one MCP server as the worker sees them:
// the server name (the broker route /mcp/<server>) and its declared tools.
// The server URL and credential stay on the host.
type MCPServerTools struct {
	Server string     `json:"server"`
	Tools  []ToolSpec `json:"tools"`
}

// Turn is the JSON the host writes to the worker's stdin: everything the
// sealed worker needs for one turn and nothing secret. Field order is the
// wire order.
type Turn struct {
	Text     string      `json:"text"`
	Speaker  TurnSpeaker `json:"speaker"`
	Model    string      `json:"model"`
	Prompt   string      `json:"prompt"`
	TimeZone string      `json:"timeZone"`
	Reset    bool        `json:"reset"`
	// Memory and History are the channel's state as the host keeps it;
	// History is empty when Reset is set.
	Memory  []MemoryEntry    `json:"memory"`
	History []HistoryEntry   `json:"history"`
	Tools   []ToolSpec       `json:"tools"`
	MCP     []MCPServerTools `json:"mcp"`
}

// Reply is the JSON the worker prints on stdout when the turn ends. A
// worker that exits 0 also returns the channel's State after the turn
// (memory with this turn's changes, history with this exchange when it
// ended in a final answer); the host checks and stores it and never passes
// it on, so a Reply that leaves the sandbox runtime has State nil.
type Reply struct {
	OK    bool          `json:"ok"`
	Text  string        `json:"text"`
	State *ChannelState `json:"state,omitempty"`
}

// WorkerFailedText is the reply a worker prints, with exit code 1, when
// anything goes wrong inside the container.
const WorkerFailedText = "The sandbox worker failed."
