// Package broker is the capability boundary between a sealed worker and the
// world: a per-turn HTTP/1.1 server on a Unix socket that allows three kinds
// of route, each checked and rebuilt before anything leaves the host.
//
//	POST /model          normalised chat completion to the fixed model URL
//	POST /tools/<name>   a declared host tool, run with the host-bound context
//	POST /mcp/<server>   a single tools/call of a declared MCP tool, made by
//	                     the broker's own MCP client (mcp.go)
//
// POST /openai/v1/chat/completions is /model at the path the official
// OpenAI SDKs post to, with their headers accepted and dropped. With
// Config.API anthropic, POST /anthropic/v1/messages and
// /anthropic/v1/messages/count_tokens (anthropic.go) take their place.
// With Config.Stream, a model call that asks to stream is relayed as it
// arrives through a reflection filter that works across reads (stream.go).
//
// Every request passes the pipeline in handle.go in a fixed order: target,
// method, header allow- and deny-lists, the dummy bearer, Host: broker, the
// undecoded route, turn liveness, the call budget and the single in-flight
// call, the body limit, and only then the route. The real credentials are
// read from the host on every call, sent only to the fixed upstream, and an
// upstream answer that echoes one is refused. Guests only ever see the fixed
// error texts of errors.go; each call leaves one content-free audit record.
//
// A Broker holds the checked configuration and can be shared; a Turn binds
// it to one admitted channel and speaker, with its own budget, and is the
// http.Handler. Server (listener.go) serves a Turn on a Unix socket.
//
// Session mode (session*.go, docs/session.md) serves a channel's
// long-lived worker instead: a Session is bound to one turn at a time and
// adds the worker routes (/worker/ready|config|next|result, /mcp-tools).
// Its pipeline is the session spec's, not the one above: it applies no
// header checks (no dummy bearer, any Host, no header allow-list; the
// worker's headers are ignored and never forwarded but for the few the
// spec names), answers the session texts of docs/session.md, "Routes and statuses", allows four calls in
// flight, each holding its slot until its answer ends, and bounds a call
// by the bound turn's deadline instead of the per-call timeout.
package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Tool is a host tool: its declaration and its implementation.
type Tool struct {
	Spec rtsandbox.ToolSpec
	Impl rtsandbox.HostTool
}

// MCPServer is an MCP server reached over Streamable HTTP (mcp.go): the
// broker is its MCP client, with one session per turn.
type MCPServer struct {
	Name  string
	URL   upstream.Endpoint // checked by upstream.ParseEndpoint
	Tools []rtsandbox.ToolSpec
	// APIKey returns the server's credential for the turn's Binding, read
	// for every call and for the session's closing DELETE; nil or "" sends
	// no Authorization header.
	APIKey func(ctx context.Context, b rtsandbox.Binding) (rtsandbox.Secret, error)
}

// Config configures a Broker. The credential getters are called on every
// call and their results are never stored.
type Config struct {
	// ModelURL is the model's endpoint, checked by upstream.ParseEndpoint
	// (the one endpoint rule) where it was read: for API openai the
	// chat-completions URL, for API anthropic the API's base (such as
	// https://api.anthropic.com), to which a call's route minus its
	// /anthropic prefix is appended (/v1/messages, plus ?beta=true when
	// the worker sent it).
	ModelURL upstream.Endpoint
	Model    string
	// API is the model's dialect: rtsandbox.ModelAPIOpenAI ("" too) serves
	// POST /model, rtsandbox.ModelAPIAnthropic serves
	// wire.RouteAnthropicMessages and RouteAnthropicCountTokens
	// instead (docs/protocol.md, "Model calls"); the other dialect's routes are 404.
	API string
	// Stream allows "stream": true on the model route: the answer is then
	// passed on as it arrives (stream.go). Without it a streamed /model
	// request is answered whole as before (stream stays pinned to false),
	// and a streamed Anthropic request is refused with a 400 in the
	// Anthropic error shape, which the client will not retry.
	Stream bool
	// Thinking is the host-judged thinking level that caps an Anthropic
	// call's thinking budget and effort (docs/protocol.md, "Model calls"); "" means
	// modelapi.LevelHigh. Session mode binds a level per turn instead
	// (Session.Bind).
	Thinking modelapi.ThinkingLevel
	// StreamSilence is the silence limit of a streamed answer; 0 means
	// rtsandbox.StreamSilence.
	StreamSilence time.Duration
	// APIKey returns the model credential for the turn's Binding (what the
	// host admitted, never anything from the request). An error or an
	// empty key fails the call with 502; there is no fallback.
	APIKey func(ctx context.Context, b rtsandbox.Binding) (rtsandbox.Secret, error)
	// MaxCalls is the per-turn call budget (default 48, 1..1000) and
	// MaxOutputTokens the max_tokens sent upstream (default 4096,
	// 1..32768); for API anthropic it is the ceiling of the worker's
	// max_tokens instead (default 128000, 1025..200000, docs/protocol.md, "Model calls").
	MaxCalls        int
	MaxOutputTokens int
	Tools           []Tool
	MCP             []MCPServer
	// Client makes upstream calls; nil means upstream.New(nil).
	Client *upstream.Client
	// Logger receives one audit record per call; nil discards them.
	Logger *slog.Logger
	// Now is the clock for audit durations; nil means time.Now.
	Now func() time.Time
	// Observe, when set, receives one CallRecord per call, after the
	// response is written and the audit record emitted. It runs on the
	// call's goroutine and must not block; nil costs nothing.
	Observe func(CallRecord)
	// Intake is the host's budget of request bodies being read and
	// decoded (intake.go), one for every broker of the host; nil bounds
	// nothing beyond each body's own limit.
	Intake *Intake
	// Budget is the daily budget ledger: every call reserves one call, and
	// a /model call an estimate of its tokens, for the turn's speaker,
	// channel and the installation before it is dispatched, settled after
	// with the upstream's usage. nil is unlimited and costs nothing.
	Budget *budget.Ledger
}

// Construction errors, with the reference's texts. All wrap
// rtsandbox.ErrInvalid. The endpoint rule itself is upstream.ParseEndpoint;
// the broker refuses only a missing endpoint.
var (
	ErrEndpoint   = fmt.Errorf("%w: broker endpoints must be credential-free HTTPS URLs", rtsandbox.ErrInvalid)
	ErrBudget     = fmt.Errorf("%w: invalid broker call or output-token budget", rtsandbox.ErrInvalid)
	ErrHostTool   = fmt.Errorf("%w: invalid or duplicate host tool", rtsandbox.ErrInvalid)
	ErrMCP        = fmt.Errorf("%w: invalid or duplicate MCP server/tool", rtsandbox.ErrInvalid)
	ErrToolSchema = fmt.Errorf("%w: tool parameters schema refused", rtsandbox.ErrInvalid)
)

// Broker is a checked broker configuration. It is safe for concurrent use.
type Broker struct {
	cfg    Config
	tools  map[string]*hostTool
	mcp    map[string]*mcpServer
	client *upstream.Client
	log    *slog.Logger
	now    func() time.Time
}

type hostTool struct {
	Tool
	args *argSchema
}

// New checks cfg and returns a Broker. Besides the reference's checks it
// applies the local schema rule to every operator tool and MCP schema and
// compiles them for host-side argument validation, so a bad schema is an
// error now rather than a 400 at every turn.
func New(cfg Config) (*Broker, error) {
	b := &Broker{cfg: cfg, client: cfg.Client, log: cfg.Logger, now: cfg.Now}
	if b.client == nil {
		b.client = upstream.New(nil)
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.now == nil {
		b.now = time.Now
	}
	if cfg.ModelURL.IsZero() {
		return nil, fmt.Errorf("model: %w", ErrEndpoint)
	}
	if err := b.checkModel(); err != nil {
		return nil, err
	}
	if err := b.checkBudgets(); err != nil {
		return nil, err
	}
	var err error
	if b.tools, err = buildTools(cfg.Tools); err != nil {
		return nil, err
	}
	if b.mcp, err = buildMCP(cfg.MCP, b.client); err != nil {
		return nil, err
	}
	return b, nil
}

// Declarations is what the worker must be told about this broker: each
// host tool's declaration and each MCP server's name and tools, in
// configuration order. URLs, credentials and implementations stay out.
// The runtime takes the worker's tool list from here, so the two cannot
// drift; the slices are fresh copies.
func (b *Broker) Declarations() ([]rtsandbox.ToolSpec, []wire.MCPServerTools) {
	tools := make([]rtsandbox.ToolSpec, 0, len(b.cfg.Tools))
	for _, t := range b.cfg.Tools {
		tools = append(tools, t.Spec)
	}
	mcp := make([]wire.MCPServerTools, 0, len(b.cfg.MCP))
	for _, m := range b.cfg.MCP {
		mcp = append(mcp, wire.MCPServerTools{Server: m.Name, Tools: slices.Clone(m.Tools)})
	}
	return tools, mcp
}

// checkModel checks the dialect, the thinking level and the silence limit.
func (b *Broker) checkModel() error {
	switch b.cfg.API {
	case "":
		b.cfg.API = rtsandbox.ModelAPIOpenAI
	case rtsandbox.ModelAPIOpenAI, rtsandbox.ModelAPIAnthropic:
	default:
		return fmt.Errorf("%w: model API %q is neither %q nor %q", rtsandbox.ErrInvalid, b.cfg.API,
			rtsandbox.ModelAPIOpenAI, rtsandbox.ModelAPIAnthropic)
	}
	if b.cfg.Thinking == "" {
		b.cfg.Thinking = modelapi.LevelHigh
	}
	if !b.cfg.Thinking.Valid() {
		return fmt.Errorf("%w: thinking level %q", rtsandbox.ErrInvalid, b.cfg.Thinking)
	}
	if b.cfg.StreamSilence == 0 {
		b.cfg.StreamSilence = rtsandbox.StreamSilence
	}
	if b.cfg.StreamSilence < 0 {
		return fmt.Errorf("%w: negative stream silence limit", rtsandbox.ErrInvalid)
	}
	return nil
}

// anthropic reports whether the model speaks Anthropic Messages.
func (b *Broker) anthropic() bool { return b.cfg.API == rtsandbox.ModelAPIAnthropic }

func (b *Broker) checkBudgets() error {
	if b.cfg.MaxCalls == 0 {
		b.cfg.MaxCalls = rtsandbox.DefaultMaxCalls
	}
	lo, def, hi := 1, rtsandbox.DefaultMaxTokens, rtsandbox.MaxOutputTokensUL
	if b.anthropic() {
		lo, def, hi = modelapi.MinMaxOutput, modelapi.DefaultMaxOutput, modelapi.MaxMaxOutput
	}
	if b.cfg.MaxOutputTokens == 0 {
		b.cfg.MaxOutputTokens = def
	}
	if b.cfg.MaxCalls < 1 || b.cfg.MaxCalls > rtsandbox.MaxCallsLimit ||
		b.cfg.MaxOutputTokens < lo || b.cfg.MaxOutputTokens > hi {
		return ErrBudget
	}
	if b.cfg.Model == "" || b.cfg.APIKey == nil {
		return fmt.Errorf("%w: model name and key getter are required", rtsandbox.ErrInvalid)
	}
	return nil
}

func buildTools(tools []Tool) (map[string]*hostTool, error) {
	out := make(map[string]*hostTool, len(tools))
	for _, t := range tools {
		name := t.Spec.Name
		if !rtsandbox.ValidToolName(name) || out[name] != nil || t.Impl == nil {
			return nil, fmt.Errorf("%w: %q", ErrHostTool, name)
		}
		args, err := compileArgs("tools/"+name, t.Spec.Parameters)
		if err != nil {
			return nil, fmt.Errorf("host tool %q: %w", name, err)
		}
		out[name] = &hostTool{Tool: t, args: args}
	}
	return out, nil
}

// compileArgs checks an operator schema with the local schema rule (the
// same rule /model applies to the tools a guest sends) and compiles it.
func compileArgs(name string, params json.RawMessage) (*argSchema, error) {
	if err := modelapi.CheckSchema(params); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrToolSchema, err)
	}
	var obj map[string]json.RawMessage // a map on purpose: an operator's JSON schema, whose keys are not ours
	if json.Unmarshal(params, &obj) != nil {
		return nil, fmt.Errorf("%w: parameters must be a JSON object", ErrToolSchema)
	}
	s, err := compileSchema(name, params)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrToolSchema, err)
	}
	return s, nil
}

// Turn binds the broker to one admitted turn: every call of it runs for
// binding, which credential getters and host tools receive. ctx is the
// turn's context: when it ends, new calls get 410 and calls in flight are
// cancelled. opts add per-turn behaviour (WithText).
func (b *Broker) Turn(ctx context.Context, binding rtsandbox.Binding, opts ...TurnOption) *Turn {
	t := &Turn{b: b, ctx: ctx, binding: binding, budget: b.cfg.MaxCalls, maxInFlight: 1}
	for _, o := range opts {
		o(t)
	}
	return t
}

// statusOK is the only status of a successful call.
const statusOK = http.StatusOK
