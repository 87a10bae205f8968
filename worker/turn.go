package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// maxTurnBytes bounds stdin: the host never writes more, and an unbounded
// read would let a broken host exhaust the container's memory.
const maxTurnBytes = rtsandbox.MaxTurnBytes

var errInvalidTurn = errors.New("invalid turn")

// readTurn reads at most maxTurnBytes from r and decodes the turn.
func readTurn(r io.Reader) (wire.Turn, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTurnBytes+1))
	if err != nil {
		return wire.Turn{}, fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > maxTurnBytes {
		return wire.Turn{}, fmt.Errorf("stdin exceeds %d bytes", maxTurnBytes)
	}
	return decodeTurn(b)
}

// decodeTurn parses and validates the turn JSON. It decodes into
// turnWire by wire.Fill's rules rather than into wire.Turn directly,
// because encoding/json accepts null for strings and booleans, where the
// reference requires the JSON type itself, and matches names under case
// folding. Extra fields are ignored. A refusal names the first bad member
// in the reference's order.
func decodeTurn(b []byte) (wire.Turn, error) {
	var w turnWire
	if err := wire.Fill(b, &w); err != nil {
		var me *wire.MemberError
		if errors.As(err, &me) && me.Member != "" {
			return wire.Turn{}, fmt.Errorf("%w: %s", errInvalidTurn, me.Member)
		}
		return wire.Turn{}, errInvalidTurn
	}
	return wire.Turn{
		Text: string(w.Text), Speaker: wire.TurnSpeaker{ID: string(w.Speaker.ID), Name: string(w.Speaker.Name)},
		Model: string(w.Model), Prompt: string(w.Prompt), TimeZone: string(w.TimeZone), Reset: bool(w.Reset),
		Memory: w.Memory, History: w.History, Tools: w.Tools, MCP: w.MCP,
		ModelAPI: string(w.ModelAPI), Stream: bool(w.Stream), Thinking: string(w.Thinking),
	}, nil
}

// turnWire is the turn JSON (docs/sealed-turn.md, "The container") in the order the reference checks
// its members. Each member's type holds its rule, so the first bad
// member Fill names is the one the reference refused: the optional model
// settings (modelApi a known API, stream a boolean, thinking a known
// level; absent means openai, not streamed, no thinking) come last.
type turnWire struct {
	Text     wire.String   `json:"text"`
	Model    wire.String   `json:"model"`
	Prompt   wire.String   `json:"prompt"`
	TimeZone wire.String   `json:"timeZone"`
	Speaker  speakerWire   `json:"speaker"`
	Reset    wire.Bool     `json:"reset,omitempty"`
	Memory   memoryWire    `json:"memory"`
	History  historyWire   `json:"history"`
	Tools    hostToolsWire `json:"tools"`
	MCP      turnMCPWire   `json:"mcp"`
	ModelAPI modelAPIWire  `json:"modelApi,omitempty"`
	Stream   wire.Bool     `json:"stream,omitempty"`
	Thinking levelWire     `json:"thinking,omitempty"`
}

// speakerWire is the turn's speaker: id and name strings.
type speakerWire struct {
	ID   wire.String `json:"id"`
	Name wire.String `json:"name"`
}

func (s *speakerWire) UnmarshalJSON(b []byte) error {
	type plain speakerWire
	return wire.Fill(b, (*plain)(s))
}

// memoryWire is the channel's memory as the reference's load checked it
// (docs/protocol.md, "Memory tools"): an array of at most 256 entries with string scope, key and
// text. The host checks the finer rules before it stores anything.
type memoryWire []rtsandbox.MemoryEntry

func (m *memoryWire) UnmarshalJSON(b []byte) error {
	var items []wire.MemoryEntryWire
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	if len(items) > rtsandbox.MaxMemoryEntries {
		return errInvalidTurn
	}
	*m = make(memoryWire, len(items))
	for i, e := range items {
		(*m)[i] = e.Entry()
	}
	return nil
}

// historyWire is the channel's history (docs/protocol.md, "The sealed turn"): an array of at
// most 20 messages with role user or assistant and string content.
type historyWire []rtsandbox.HistoryEntry

func (h *historyWire) UnmarshalJSON(b []byte) error {
	var items []wire.HistoryEntryWire
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	if len(items) > rtsandbox.MaxHistory {
		return errInvalidTurn
	}
	*h = make(historyWire, len(items))
	for i, e := range items {
		if e.Role != "user" && e.Role != "assistant" {
			return errInvalidTurn
		}
		(*h)[i] = e.Entry()
	}
	return nil
}

// hostToolsWire is the turn's host tools, named by ValidToolName.
type hostToolsWire []rtsandbox.ToolSpec

func (t *hostToolsWire) UnmarshalJSON(b []byte) error {
	specs, ok := toolSpecs(b, rtsandbox.ValidToolName)
	*t = specs
	return okOrInvalid(ok)
}

// turnMCPWire is the turn's MCP servers, each named by ValidToolName.
type turnMCPWire []wire.MCPServerTools

func (m *turnMCPWire) UnmarshalJSON(b []byte) error {
	servers, ok := mcpServers(b, rtsandbox.ValidToolName)
	*m = servers
	return okOrInvalid(ok)
}

// modelAPIWire is modelApi: a known API (rtsandbox.ValidModelAPI).
type modelAPIWire string

func (a *modelAPIWire) UnmarshalJSON(b []byte) error {
	var s wire.String
	if err := s.UnmarshalJSON(b); err != nil {
		return err
	}
	*a = modelAPIWire(s)
	return okOrInvalid(rtsandbox.ValidModelAPI(string(s)))
}

// levelWire is thinking: "" or a known level (rtsandbox.ThinkingBudget).
type levelWire string

func (l *levelWire) UnmarshalJSON(b []byte) error {
	var s wire.String
	if err := s.UnmarshalJSON(b); err != nil {
		return err
	}
	*l = levelWire(s)
	_, known := rtsandbox.ThinkingBudget(string(s))
	return okOrInvalid(s == "" || known)
}

func okOrInvalid(ok bool) error {
	if !ok {
		return errInvalidTurn
	}
	return nil
}

// toolSpecs parses a list of tool declarations whose names pass valid
// (host tools and MCP tools have different name rules).
func toolSpecs(raw json.RawMessage, valid func(string) bool) ([]rtsandbox.ToolSpec, bool) {
	var items []toolSpecWire
	if firstByte(raw) != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, false
	}
	specs := make([]rtsandbox.ToolSpec, 0, len(items))
	for _, w := range items {
		if !valid(string(w.Name)) {
			return nil, false
		}
		specs = append(specs, rtsandbox.ToolSpec{Name: string(w.Name), Description: string(w.Description), Parameters: compact(json.RawMessage(w.Parameters))})
	}
	return specs, true
}

// toolSpecWire is one tool declaration: name and description strings,
// parameters an object (kept as sent, compacted).
type toolSpecWire struct {
	Name        wire.String `json:"name"`
	Description wire.String `json:"description"`
	Parameters  wire.Object `json:"parameters"`
}

func (t *toolSpecWire) UnmarshalJSON(b []byte) error {
	type plain toolSpecWire
	return wire.Fill(b, (*plain)(t))
}

// mcpServers reads [{server, tools}], each server name passing validName
// and each tool ValidMCPToolName.
func mcpServers(raw json.RawMessage, validName func(string) bool) ([]wire.MCPServerTools, bool) {
	var items []mcpServerWire
	if firstByte(raw) != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, false
	}
	servers := make([]wire.MCPServerTools, 0, len(items))
	for _, w := range items {
		tools, ok := toolSpecs(json.RawMessage(w.Tools), rtsandbox.ValidMCPToolName)
		if !validName(string(w.Server)) || !ok {
			return nil, false
		}
		servers = append(servers, wire.MCPServerTools{Server: string(w.Server), Tools: tools})
	}
	return servers, true
}

// mcpServerWire is one MCP server of a turn: its name and its tools,
// read by toolSpecs.
type mcpServerWire struct {
	Server wire.String  `json:"server"`
	Tools  rawArrayWire `json:"tools"`
}

func (m *mcpServerWire) UnmarshalJSON(b []byte) error {
	type plain mcpServerWire
	return wire.Fill(b, (*plain)(m))
}

// rawArrayWire is a JSON array kept as received, read by its user.
type rawArrayWire json.RawMessage

func (a *rawArrayWire) UnmarshalJSON(b []byte) error {
	if firstByte(b) != '[' {
		return errInvalidTurn
	}
	*a = append((*a)[:0], b...)
	return nil
}

// The helpers below test the JSON type of a raw value the way the
// reference's typeof checks do: an object is not null and not an array.

// object is a map on purpose: its users read a model's tool arguments
// (callInput), check a value is an object, or hand the members to
// wire.FillFrom (parseWorkerConfig); none reads members by hand.
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if firstByte(raw) != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	return m, true
}

func array(raw json.RawMessage) ([]json.RawMessage, bool) {
	if firstByte(raw) != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

func str(raw json.RawMessage) (string, bool) {
	if firstByte(raw) != '"' {
		return "", false
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

func boolean(raw json.RawMessage) (bool, bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

func firstByte(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// compact strips insignificant whitespace, as JSON.stringify of the parsed
// value would; key order is kept. raw must be valid JSON.
func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}
