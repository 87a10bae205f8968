// Package modelapi normalises the payloads a guest sends to upstream model
// APIs (OpenAI chat completions and Anthropic Messages) and applies the
// local JSON-schema rule to tool parameters.
//
// The contract, for the OpenAI chat-completions route (/model):
//
//   - [NormalizeChat] validates a decoded request body against the rules of
//     docs/protocol.md, "Model calls", and rebuilds it from scratch. Any violation
//     refuses the whole request with an error wrapping
//     [rtsandbox.ErrRefused]; the error text names the rule and is meant for
//     the operator log only, never for the guest.
//   - [BuildChatRequest] wraps the normalised input in the upstream body,
//     whose fields serialise in the fixed order model, messages, tools,
//     stream, max_tokens. Nothing the guest sent outside messages and tools
//     reaches it.
//   - [CheckSchema] applies the local schema rule of docs/protocol.md, "Model calls": every schema
//     position may only reference local fragments ("#…"), so a tool
//     declaration cannot make the upstream provider fetch a remote schema.
//
// The contract, for the Anthropic Messages routes (/anthropic/v1/messages
// and /anthropic/v1/messages/count_tokens, docs/protocol.md, "Model calls"):
//
//   - [NormalizeMessages] rebuilds the decoded body field by field under
//     [MessagesParams], which the host decides: the profile's model, the
//     output-token ceiling (default 128,000, configurable 1,025..200,000)
//     and the turn's [ThinkingLevel]. The guest's object is never
//     forwarded: the model is fixed; max_tokens is the guest's (default
//     16,384) capped at the ceiling but above the thinking budget; only
//     custom tools with a local input_schema (see [CheckSchema]) and names
//     of ^[a-zA-Z0-9_-]{1,128}$ pass; content blocks are text, base64
//     images (docs/protocol.md, "Where the worker finds the broker" media rules), and at the top level tool_use,
//     tool_result, thinking and redacted_thinking; thinking budget and
//     effort are capped at the level's ceiling (low: low/2,048, medium:
//     medium/8,192, high: high/16,384, xhigh: max/32,768), and adaptive
//     thinking at low or medium with no effort asked is pinned to that
//     level; cache_control becomes {type:"ephemeral"} with ttl "1h" only
//     when asked for exactly. Every other field (metadata, service_tier,
//     container, mcp_servers, …) is dropped. With CountTokens set,
//     max_tokens, stream, sampling and stop_sequences are left out.
//   - A violation returns a [*Refusal] (wrapping [rtsandbox.ErrRefused])
//     whose Message is the docs/protocol.md, "Model calls" text, which the guest does see: mid-
//     conversation system messages get the API's own "Input tag" wording
//     and unknown roles its "Unexpected role" wording, which clients match
//     on. [Refusal.Render] gives status 400 and the Anthropic error body
//     {"type":"error","error":{"type":"invalid_request_error","message":…}}:
//     a 400 rather than a 502 because clients retry a 502 unchanged but
//     resend without the refused part after a 400. A guest string quoted in
//     a refusal (a block type, a role) is cut at 128 bytes.
//   - Tool_use input is re-encoded from its decoded value with its keys
//     sorted (numbers as written, a repeated key keeping its last value as
//     JSON.parse does). Tool input_schema stays byte for byte.
//   - Numbers follow JavaScript: "safe integer" means an integral value of
//     at most 2^53-1 in magnitude, and a number too large for a float64
//     (1e400) is not finite, so a sampling field holding it is dropped.
//
// Decoding costs what the bytes cost (issue 21). A body is read under a
// jsontree.Budget (ChatOptions.Budget, MessagesParams.Budget: the
// broker's, of the body's size and the call's context): its members are
// read through views straight from the bytes, keeping only what is
// rebuilt, and an array a rule counts (messages, content parts and
// blocks, tool calls, tools, stop sequences) is refused at its count,
// before the rest of it is read. The only trees are a tool_use input
// (re-encoded) and a non-string role quoted in a refusal; they and the
// schema check's key sets count against the budget's values, and a body
// over it is refused (RefuseBudget, or the /model rule's refusal). Every
// read looks at the budget's context as it goes: once the call is over,
// normalising stops within jsontree.CheckBytes of reading with an error
// wrapping jsontree.ErrStopped, which is no refusal.
//
// Everything here is a pure function of its arguments: no I/O, no globals
// that change, safe for concurrent use. Guest input is inspected as raw JSON
// (json.RawMessage) so that an absent key and a null differ, and numbers and
// unknown schema keywords are never rewritten.
package modelapi
