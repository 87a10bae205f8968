package rtsandbox

import (
	"time"
)

// The limits of both modes and the values they are checked against
// (one limit, one place); docs/limits.md lists each with its value. The
// worker wire protocol that applies them is package wire.

// Model APIs a host's model may speak (config model.api); the turn JSON
// names it so the worker picks its client (ModelAPIOpenAI is the default
// when the field is empty).
const (
	ModelAPIOpenAI    = "openai"
	ModelAPIAnthropic = "anthropic"
)

// Limits of the protocol. Lengths are UTF-16 code units (JS .length) like
// the reference's; sizes are bytes. State limits are in state.go.
const (
	// MaxTextLen bounds a guest message's text.
	MaxTextLen = 32000
	// MaxSpeakerField bounds a speaker's id, name and principal id.
	MaxSpeakerField = 256
	// MaxReplyText bounds the reply text in the worker's stdout and
	// the model's final answer.
	MaxReplyText = 100000
	// MaxToolCallIDLen bounds a tool-call id.
	MaxToolCallIDLen = 128
	// MaxToolNameLen bounds a host tool, MCP server or MCP tool name.
	MaxToolNameLen = 48
	// MaxFunctionName bounds a model-facing function name.
	MaxFunctionName = 64
	// MaxToolCallsPerMessage bounds the tool calls of one assistant
	// message: the worker refuses more from the model and
	// the broker refuses more in a /model request.
	MaxToolCallsPerMessage = 8
	// MaxModelMessages bounds the messages of a chat-completions /model
	// request: the broker refuses more, so the worker drops its
	// oldest context to stay within it, as it does for the body size.
	MaxModelMessages = 128
	// MaxAnthropicModelMessages bounds the messages of an Anthropic
	// Messages request the same way (the worker counts its chat messages,
	// never fewer than the Messages request it sends).
	MaxAnthropicModelMessages = 2000

	// DefaultMaxCalls is the per-turn broker call budget (model, host
	// tools and MCP together), settable in 1..MaxCallsLimit.
	DefaultMaxCalls = 48
	MaxCallsLimit   = 1000
	// DefaultMaxTokens is the max_tokens the broker sends upstream,
	// settable in 1..MaxOutputTokensUL.
	DefaultMaxTokens  = 4096
	MaxOutputTokensUL = 32768

	// MaxBrokerRequest bounds a broker request body.
	MaxBrokerRequest = 256 << 10
	// MaxBrokerResponse bounds a broker answer as the worker reads it
	// and an upstream answer as the broker reads it.
	MaxBrokerResponse = 1 << 20
	// MaxToolResult bounds the JSON {"text": …} of a host-tool result.
	MaxToolResult = 1 << 20
	// BrokerCallTimeout is the broker's per-call deadline, also bounded by
	// the turn's.
	BrokerCallTimeout = 60 * time.Second
	// StreamSilence is the silence limit of a streamed broker answer
	// (docs/session.md, "Session broker"): once the upstream's head arrived, a gap of this
	// long with no piece passed on cuts the answer off. A streamed call
	// stays bounded by BrokerCallTimeout and the turn too.
	StreamSilence = 120 * time.Second
	// MaxStreamedAnswer caps the upstream bytes of one model answer
	// passed on by the broker (docs/protocol.md, "SSE"): a
	// streamed answer, an error body, or a non-streamed Anthropic answer.
	MaxStreamedAnswer = 50 << 20
	// BrokerClientTimeout is the worker's per-call timeout: a
	// little over BrokerCallTimeout, so the broker's answer wins.
	BrokerClientTimeout = 65 * time.Second
)

// Request decoding on the host (issue 21: four 96 MiB bodies of empty
// arrays took a host to 7 GB). A request body being read and decoded
// holds up to DecodeFactor times its size. Measured at the peak: a
// rebuilt 64 MiB text held 5 times it (the body, the decoded text, and
// encoding/json's buffer doubling as it encodes the request, then its
// copy), a tool_use input 4, a refused flood about 1 (the body: the rules
// count before they keep, and what they keep is bounded by
// jsontree.NodesFor). All the bodies being decoded at once, whatever
// their channels, hold at most DecodeBudget of the host's memory limit: a
// body waits for its share (broker.Intake).
const DecodeFactor = 5

// DecodeBudget is the share of a host's memory limit (bytes) that request
// decoding may hold at once: half of it. The other half is for the rest
// of the host: answers being relayed and scanned, surfaces, the database.
func DecodeBudget(memoryLimit int64) int64 { return memoryLimit / 2 }

// MaxDecodedBody is the largest request body a host of memoryLimit bytes
// can decode within DecodeBudget: the bound of every configurable body
// limit of session mode.
func MaxDecodedBody(memoryLimit int64) int64 { return DecodeBudget(memoryLimit) / DecodeFactor }

// Limits and defaults of session mode. Lengths are UTF-16
// code units like the reference's; sizes are bytes.
const (
	MaxSessionText     = 100000 // turn text
	MaxSessionMemory   = 100000 // prompt memory block
	MaxSessionField    = 256    // author id, name and principal id
	MaxResultError     = 10000  // ok:false error text
	MaxImages          = 8
	MaxImageBytes      = 20 << 20
	MaxImagesTotal     = 64 << 20
	MaxReplyFiles      = 10
	MaxReplyFileBytes  = 10 << 20
	MaxReplyFilesTotal = 50 << 20
	MaxSafeNameLen     = 255
	MaxReadyBody       = 16384    // POST /worker/ready
	MaxResultBody      = 72 << 20 // POST /worker/result
	MaxSessionRequest  = 96 << 20 // credential routes

	SessionMaxCalls      = 128 // per-turn call budget, 1..MaxCallsLimit
	SessionMaxInFlight   = 4   // credential calls at once
	SessionMaxConns      = 16  // broker connections at once
	SessionHeaderTimeout = 10 * time.Second
	SessionNextWait      = 45 * time.Second // /worker/next long poll
	SessionTurnTimeout   = 600 * time.Second
	SessionStartTimeout  = 90 * time.Second
	SessionWorkerRetry   = 250 * time.Millisecond // worker loop pause

	// The metadata-only startup window.
	StartupWindowCalls = 32
	StartupWindowTTL   = 90 * time.Second
	StartupRearmGap    = 10 * time.Second
	// StartupWindowsPerDay caps the re-armed windows a channel's workers
	// use per UTC day (a window counts at its first call; the one a new
	// broker opens does not). A healthy worker needs one per process
	// start, and its process starts again only when the worker or its
	// container restarts: 24 allows a restart every hour all day, where a
	// worker looping /worker/ready would take one every 10 s (8,640).
	StartupWindowsPerDay = 24
)

// Image MIME types a turn or a tool result may carry.
const (
	MIMEPNG  = "image/png"
	MIMEJPEG = "image/jpeg"
	MIMEWebP = "image/webp"
	MIMEGIF  = "image/gif"
)
