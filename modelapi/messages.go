package modelapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// Limits and defaults of the Anthropic Messages rule (docs/protocol.md, "Model calls").
const (
	MaxAnthropicMessages = rtsandbox.MaxAnthropicModelMessages // entries in messages
	MaxAnthropicBlocks   = 256                                 // blocks in one content array
	MaxAnthropicTools    = 128                                 // entries in tools
	MaxStopSequences     = 16                                  // entries in stop_sequences
	MaxStopSequenceLen   = 1000                                // UTF-16 units of one stop sequence
	DefaultAnthropicMax  = 16384                               // max_tokens when the guest names none
	DefaultMaxOutput     = 128000                              // MessagesParams.MaxOutputTokens when 0
	MinMaxOutput         = 1025                                // smallest configurable output ceiling
	MaxMaxOutput         = 200000                              // largest configurable output ceiling
	MinThinkingBudget    = 1024                                // smallest budget_tokens the guest may ask
	RefusalStatus        = 400                                 // status of a refused request (not 502: clients retry 502 unchanged)
	maxEchoedTag         = 128                                 // bytes of a guest's type or role echoed in a refusal
	maxSafeInteger       = 1<<53 - 1
)

// Refusal texts of docs/protocol.md, "Model calls", sent to the guest in the Anthropic error shape.
// Clients such as Claude Code resend without the refused part on a 400.
// RefuseBudget is ours: a body whose decoding would keep more values than
// its size pays for (jsontree.NodesFor).
const (
	RefuseBudget      = "Request too complex for its size"
	RefuseMessages    = "Invalid messages"
	RefuseMessage     = "Invalid message"
	RefuseTools       = "Invalid tools"
	RefuseTool        = "Remote schema or native tool refused"
	RefuseToolChoice  = "Invalid tool choice"
	RefuseThinking    = "Invalid thinking"
	RefuseContent     = "Invalid content"
	RefuseBlock       = "Invalid block"
	RefuseNativeBlock = "Native tools or remote media refused"
)

// ThinkingLevel is the host-judged thinking level bound to a turn; the guest
// may ask for less, never more.
type ThinkingLevel string

// The four levels of docs/protocol.md, "The session protocol", lowest first.
const (
	LevelLow    ThinkingLevel = "low"
	LevelMedium ThinkingLevel = "medium"
	LevelHigh   ThinkingLevel = "high"
	LevelXHigh  ThinkingLevel = "xhigh"
)

// Levels lists the thinking levels, lowest first, for messages that name
// them.
func Levels() []ThinkingLevel { return []ThinkingLevel{LevelLow, LevelMedium, LevelHigh, LevelXHigh} }

// Valid reports whether l is one of the four levels.
func (l ThinkingLevel) Valid() bool {
	_, ok := ceilings[l]
	return ok
}

// efforts is the effort scale of docs/protocol.md, "Model calls", lowest first.
var efforts = []string{"low", "medium", "high", "xhigh", "max"}

// ceilings maps a host level to the highest effort (an index into efforts)
// and the largest extended-thinking budget it allows. xhigh allows effort
// max: that is the spec's table, not a typo.
var ceilings = map[ThinkingLevel]struct {
	effort int
	budget int64
}{
	LevelLow:    {0, 2048},
	LevelMedium: {1, 8192},
	LevelHigh:   {2, 16384},
	LevelXHigh:  {4, 32768},
}

// anthropicNameRE is the rule for tool names and tool_use names.
var anthropicNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

// MessagesParams is what the host decides for one model call; none of it
// comes from the guest.
type MessagesParams struct {
	Model           string        // the host profile's model
	MaxOutputTokens int64         // 0 means DefaultMaxOutput; else MinMaxOutput..MaxMaxOutput
	Level           ThinkingLevel // the bound turn's level
	CountTokens     bool          // the /v1/messages/count_tokens variant
	// Budget bounds the body's decoding (jsontree.Budget): the broker's,
	// of the body's size and stopped by the call's context. nil means one
	// of the body's size that never stops.
	Budget *jsontree.Budget
}

func (p MessagesParams) check() (MessagesParams, error) {
	if p.MaxOutputTokens == 0 {
		p.MaxOutputTokens = DefaultMaxOutput
	}
	switch {
	case p.Model == "":
		return p, fmt.Errorf("%w: anthropic messages: no model", rtsandbox.ErrInvalid)
	case p.MaxOutputTokens < MinMaxOutput || p.MaxOutputTokens > MaxMaxOutput:
		return p, fmt.Errorf("%w: anthropic messages: max output tokens %d outside %d..%d", rtsandbox.ErrInvalid, p.MaxOutputTokens, MinMaxOutput, MaxMaxOutput)
	}
	if _, ok := ceilings[p.Level]; !ok {
		return p, fmt.Errorf("%w: anthropic messages: thinking level %q", rtsandbox.ErrInvalid, p.Level)
	}
	return p, nil
}

// Refusal is a request refused by the rule of docs/protocol.md, "Model calls". Message is the text the
// guest receives; it wraps rtsandbox.ErrRefused.
type Refusal struct{ Message string }

func (e *Refusal) Error() string { return "anthropic messages refused: " + e.Message }

// Unwrap makes errors.Is(err, rtsandbox.ErrRefused) hold.
func (e *Refusal) Unwrap() error { return rtsandbox.ErrRefused }

// Render returns the answer to the guest: RefusalStatus and
// {"type":"error","error":{"type":"invalid_request_error","message":…}}.
func (e *Refusal) Render() (status int, body []byte) {
	return RefusalStatus, AnthropicErrorBody("invalid_request_error", e.Message)
}

// AnthropicErrorBody renders an error in the Anthropic API's shape.
func AnthropicErrorBody(errType, message string) []byte {
	b, err := jsonjs.Marshal(anthropicError{Type: "error", Error: anthropicErrorDetail{Type: errType, Message: message}})
	if err != nil { // two strings always encode
		panic(err)
	}
	return b
}

type anthropicError struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func refuse(msg string) error { return &Refusal{Message: msg} }

// MessagesRequest is a rebuilt Messages body; marshal it with
// jsonjs.Marshal. Fields serialise in this order; the optional ones only
// when set. MaxTokens, Stream, the sampling fields and StopSequences stay
// unset for count_tokens.
type MessagesRequest struct {
	Model         string             `json:"model"`
	Messages      []AnthropicMessage `json:"messages"`
	System        any                `json:"system,omitempty"` // string or []any of blocks
	Tools         []AnthropicTool    `json:"tools,omitzero"`
	ToolChoice    *ToolChoice        `json:"tool_choice,omitempty"`
	Thinking      *Thinking          `json:"thinking,omitempty"`
	OutputConfig  *OutputConfig      `json:"output_config,omitempty"`
	MaxTokens     int64              `json:"max_tokens,omitempty"`
	Stream        *bool              `json:"stream,omitempty"`
	Temperature   *float64           `json:"temperature,omitempty"`
	TopP          *float64           `json:"top_p,omitempty"`
	TopK          *float64           `json:"top_k,omitempty"`
	StopSequences []string           `json:"stop_sequences,omitzero"`
}

// AnthropicMessage is one rebuilt message. Content is a string or a []any
// of the block types below. ClearAt and OutputConfig appear only on
// system-role messages.
type AnthropicMessage struct {
	Role         string        `json:"role"`
	Content      any           `json:"content"`
	ClearAt      string        `json:"clear_at,omitempty"`
	OutputConfig *OutputConfig `json:"output_config,omitempty"`
}

// AnthropicTool is one rebuilt custom tool. InputSchema has passed
// [CheckSchema] and is forwarded compacted, byte for byte otherwise.
type AnthropicTool struct {
	Name         string          `json:"name"`
	InputSchema  json.RawMessage `json:"input_schema"`
	Description  string          `json:"description,omitempty"`
	CacheControl *CacheControl   `json:"cache_control,omitempty"`
}

// ToolChoice is the rebuilt tool_choice.
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// Thinking is the rebuilt thinking setting; BudgetTokens only for enabled.
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens int64  `json:"budget_tokens,omitempty"`
}

// OutputConfig carries only the capped effort.
type OutputConfig struct {
	Effort string `json:"effort"`
}

// CacheControl is always ephemeral; TTL is "1h" or empty.
type CacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// Rebuilt content blocks.
type (
	TextBlock struct {
		Type         string        `json:"type"`
		Text         string        `json:"text"`
		CacheControl *CacheControl `json:"cache_control,omitempty"`
	}
	ImageBlock struct {
		Type         string        `json:"type"`
		Source       ImageSource   `json:"source"`
		CacheControl *CacheControl `json:"cache_control,omitempty"`
	}
	ImageSource struct {
		Type      string `json:"type"`
		Data      string `json:"data"`
		MediaType string `json:"media_type"`
	}
	ToolUseBlock struct {
		Type         string          `json:"type"`
		ID           string          `json:"id"`
		Name         string          `json:"name"`
		Input        json.RawMessage `json:"input"`
		CacheControl *CacheControl   `json:"cache_control,omitempty"`
	}
	ToolResultBlock struct {
		Type         string        `json:"type"`
		ToolUseID    string        `json:"tool_use_id"`
		Content      any           `json:"content"`
		IsError      bool          `json:"is_error,omitempty"`
		CacheControl *CacheControl `json:"cache_control,omitempty"`
	}
	ThinkingBlock struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}
	RedactedThinkingBlock struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}
)

// NormalizeMessages rebuilds a decoded /anthropic/v1/messages (or, with
// p.CountTokens, count_tokens) body field by field under the host's
// parameters. A violation returns a *Refusal (wrapping
// rtsandbox.ErrRefused) whose Message is the docs/protocol.md, "Model calls" text for the guest; bad
// parameters return an error wrapping rtsandbox.ErrInvalid.
//
// The body is read under p.Budget: over its node count the request is
// refused with RefuseBudget, and once its context ends the error wraps
// jsontree.ErrStopped (no refusal: the call is over).
func NormalizeMessages(body map[string]json.RawMessage, p MessagesParams) (*MessagesRequest, error) {
	p, err := p.check()
	if err != nil {
		return nil, err
	}
	b := budgetFor(p.Budget, body)
	out, err := normalizeMessages(b, body, p)
	if err := budgetError(b); err != nil {
		if errors.Is(err, jsontree.ErrBudget) {
			return nil, refuse(RefuseBudget)
		}
		return nil, err
	}
	return out, err
}

// body is a map on purpose: the guest's request, split and read under the
// budget (the seal issue's memory bound), rebuilt member by member.
func normalizeMessages(b *jsontree.Budget, body map[string]json.RawMessage, p MessagesParams) (*MessagesRequest, error) {
	var err error
	out := &MessagesRequest{Model: p.Model}
	if out.Messages, err = anthropicMessages(b, body["messages"], p.Level); err != nil {
		return nil, err
	}
	if raw, ok := body["system"]; ok {
		if out.System, err = blocks(b, raw, false); err != nil {
			return nil, err
		}
	}
	if raw, ok := body["tools"]; ok {
		if out.Tools, err = anthropicTools(b, raw); err != nil {
			return nil, err
		}
	}
	if raw, ok := body["tool_choice"]; ok {
		if out.ToolChoice, err = toolChoice(b, raw); err != nil {
			return nil, err
		}
	}
	if out.Thinking, err = thinking(b, body["thinking"], p); err != nil {
		return nil, err
	}
	out.OutputConfig = topEffort(b, body["output_config"], out.Thinking, p.Level)
	if !p.CountTokens {
		generationFields(b, out, body, p)
	}
	return out, nil
}

// generationFields sets what only /v1/messages carries: max_tokens,
// stream, sampling and stop sequences.
func generationFields(b *jsontree.Budget, out *MessagesRequest, body map[string]json.RawMessage, p MessagesParams) {
	asked := int64(DefaultAnthropicMax)
	if n, ok := safeInteger(body["max_tokens"]); ok && n > 0 {
		asked = n
	}
	out.MaxTokens = min(asked, p.MaxOutputTokens)
	if out.Thinking != nil {
		out.MaxTokens = max(out.MaxTokens, out.Thinking.BudgetTokens+1)
	}
	stream := kind(body["stream"]) == 't'
	out.Stream = &stream
	out.Temperature = finite(body["temperature"])
	out.TopP = finite(body["top_p"])
	out.TopK = finite(body["top_k"])
	out.StopSequences = stopSequences(b, body["stop_sequences"])
}

// number decodes raw when it is a JSON number; a number too large for a
// float64 is ±Inf, as in JavaScript.
func number(raw json.RawMessage) (float64, bool) {
	if c := kind(raw); c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
	if err != nil && f == 0 { // range errors still return ±Inf
		return 0, false
	}
	return f, true
}

// safeInteger is JavaScript's Number.isSafeInteger on a JSON value.
func safeInteger(raw json.RawMessage) (int64, bool) {
	f, ok := number(raw)
	if !ok || f != float64(int64(f)) || f > maxSafeInteger || f < -maxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// finite returns a JSON number that is finite (1e400 is not), else nil.
func finite(raw json.RawMessage) *float64 {
	f, ok := number(raw)
	if !ok || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// stopSequences copies a valid list and silently drops anything else.
func stopSequences(b *jsontree.Budget, raw json.RawMessage) []string {
	items, n, ok := b.Array(raw, MaxStopSequences)
	if !ok || n > MaxStopSequences {
		return nil
	}
	out := make([]string, 0, len(items))
	for _, item := range items {
		s, ok := asString(b, item)
		if !ok || rtsandbox.UTF16Len(s) > MaxStopSequenceLen {
			return nil
		}
		out = append(out, s)
	}
	return out
}

func anthropicTools(b *jsontree.Budget, raw json.RawMessage) ([]AnthropicTool, error) {
	items, n, ok := b.Array(raw, MaxAnthropicTools)
	if !ok || n > MaxAnthropicTools {
		return nil, refuse(RefuseTools)
	}
	tools := make([]AnthropicTool, 0, len(items))
	for _, item := range items {
		t, ok := anthropicTool(b, item)
		if !ok {
			return nil, refuse(RefuseTool)
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// anthropicTool rebuilds one custom tool. Server and native tools (a type
// other than custom) fail, and so does a schema that is not local.
// Duplicate names are not checked, as in the reference.
func anthropicTool(b *jsontree.Budget, raw json.RawMessage) (AnthropicTool, bool) {
	var obj [5]json.RawMessage // type, name, input_schema, cache_control, description
	if !fields(b, raw, anthropicToolFields, obj[:]) {
		return AnthropicTool{}, false
	}
	if typ := obj[0]; typ != nil {
		if s, _ := asString(b, typ); s != "custom" {
			return AnthropicTool{}, false
		}
	}
	name, ok := asString(b, obj[1])
	if !ok || !anthropicNameRE.MatchString(name) {
		return AnthropicTool{}, false
	}
	schema, err := normalizeParameters(b, obj[2])
	if err != nil {
		return AnthropicTool{}, false
	}
	t := AnthropicTool{Name: name, InputSchema: schema, CacheControl: cacheControl(b, obj[3])}
	if rawDesc := obj[4]; rawDesc != nil {
		if t.Description, ok = asString(b, rawDesc); !ok {
			return AnthropicTool{}, false
		}
	}
	return t, true
}

var anthropicToolFields = []string{"type", "name", "input_schema", "cache_control", "description"}

func toolChoice(b *jsontree.Budget, raw json.RawMessage) (*ToolChoice, error) {
	var obj [3]json.RawMessage // type, disable_parallel_tool_use, name
	if !fields(b, raw, toolChoiceFields, obj[:]) {
		return nil, refuse(RefuseToolChoice)
	}
	typ, _ := asString(b, obj[0])
	tc := &ToolChoice{Type: typ, DisableParallelToolUse: kind(obj[1]) == 't'}
	switch typ {
	case "auto", "any", "none":
	case "tool":
		name, ok := asString(b, obj[2])
		if !ok || !anthropicNameRE.MatchString(name) {
			return nil, refuse(RefuseToolChoice)
		}
		tc.Name = name
	default:
		return nil, refuse(RefuseToolChoice)
	}
	return tc, nil
}

var toolChoiceFields = []string{"type", "disable_parallel_tool_use", "name"}

// thinking rebuilds the thinking setting; a non-object is silently dropped.
func thinking(b *jsontree.Budget, raw json.RawMessage, p MessagesParams) (*Thinking, error) {
	var obj [2]json.RawMessage // type, budget_tokens
	if !fields(b, raw, thinkingFields, obj[:]) {
		return nil, nil
	}
	typ, _ := asString(b, obj[0])
	switch typ {
	case "adaptive", "disabled":
		return &Thinking{Type: typ}, nil
	case "enabled":
		asked, ok := safeInteger(obj[1])
		if !ok || asked < MinThinkingBudget {
			break
		}
		budget := min(asked, ceilings[p.Level].budget, p.MaxOutputTokens-1)
		return &Thinking{Type: typ, BudgetTokens: budget}, nil
	}
	return nil, refuse(RefuseThinking)
}

var thinkingFields = []string{"type", "budget_tokens"}

// askedEffort is the index of output_config.effort on the effort scale, or
// -1 when none is asked (absent, not an object, or not on the scale).
func askedEffort(b *jsontree.Budget, outputConfig json.RawMessage) int {
	var effort [1]json.RawMessage
	fields(b, outputConfig, effortFields, effort[:])
	s, _ := asString(b, effort[0])
	for i, e := range efforts {
		if s == e {
			return i
		}
	}
	return -1
}

// cappedEffort is the asked effort capped at the level's ceiling, or nil.
func cappedEffort(b *jsontree.Budget, outputConfig json.RawMessage, level ThinkingLevel) *OutputConfig {
	asked := askedEffort(b, outputConfig)
	if asked < 0 {
		return nil
	}
	return &OutputConfig{Effort: efforts[min(asked, ceilings[level].effort)]}
}

// topEffort is the top-level output_config. With no effort asked, adaptive
// thinking at low or medium is pinned to that level: adaptive thinking's
// default effort would exceed the ceiling.
func topEffort(b *jsontree.Budget, outputConfig json.RawMessage, th *Thinking, level ThinkingLevel) *OutputConfig {
	if oc := cappedEffort(b, outputConfig, level); oc != nil {
		return oc
	}
	if th != nil && th.Type == "adaptive" && (level == LevelLow || level == LevelMedium) {
		return &OutputConfig{Effort: string(level)}
	}
	return nil
}

// cacheControl keeps an object as {type:"ephemeral"}, plus ttl "1h" when
// asked for exactly; anything else is dropped.
func cacheControl(b *jsontree.Budget, raw json.RawMessage) *CacheControl {
	var obj [1]json.RawMessage
	if !fields(b, raw, ttlFields, obj[:]) {
		return nil
	}
	cc := &CacheControl{Type: "ephemeral"}
	if ttl, _ := asString(b, obj[0]); ttl == "1h" {
		cc.TTL = ttl
	}
	return cc
}

// echo bounds a guest string quoted back in a refusal, so the answer and
// the log line stay small; real clients match on the fixed words only.
func echo(s string) string {
	if len(s) <= maxEchoedTag {
		return s
	}
	cut := maxEchoedTag
	for cut > 0 && !utf8.RuneStart(s[cut]) { // never split a character
		cut--
	}
	return s[:cut] + "…"
}
