package wire

import "github.com/rtsandbox/rtsandbox"

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
	Server string               `json:"server"`
	Tools  []rtsandbox.ToolSpec `json:"tools"`
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
	Memory  []rtsandbox.MemoryEntry  `json:"memory"`
	History []rtsandbox.HistoryEntry `json:"history"`
	Tools   []rtsandbox.ToolSpec     `json:"tools"`
	MCP     []MCPServerTools         `json:"mcp"`
	// ModelAPI is the API the host's model speaks (config model.api):
	// ModelAPIOpenAI, whose worker posts chat completions to RouteModel,
	// or ModelAPIAnthropic, whose worker posts Messages to
	// RouteAnthropicMessages (docs/protocol.md, "Model calls"). "" means openai, so a
	// turn of an older host reads as before.
	ModelAPI string `json:"modelApi,omitempty"`
	// Stream lets the worker ask for a streamed model answer
	// (docs/session.md, "Session broker"; docs/protocol.md, "SSE"): the host sets it when its broker streams
	// model answers. Without it every answer is one JSON body.
	Stream bool `json:"stream,omitempty"`
	// Thinking is the host-judged thinking level of the turn (session spec
	// docs/protocol.md, "Model calls": low, medium, high or xhigh); the worker asks for extended
	// thinking up to that level's budget (ThinkingBudget) and never more,
	// since the broker caps it there. "" asks for no thinking. Only the
	// Anthropic API uses it.
	Thinking string `json:"thinking,omitempty"`
}
