// Package modelapi normalises the payloads a sealed guest sends to upstream
// model APIs and applies the local JSON-schema rule to tool parameters.
//
// The contract, for the OpenAI chat-completions route (/model):
//
//   - [NormalizeChat] validates a decoded request body against the rules of
//     the sealed spec §2.4 and rebuilds it from scratch. Any violation
//     refuses the whole request with an error wrapping
//     [rtsandbox.ErrRefused]; the error text names the rule and is meant for
//     the operator log only, never for the guest.
//   - [BuildChatRequest] wraps the normalised input in the upstream body,
//     whose fields serialise in the fixed order model, messages, tools,
//     stream, max_tokens. Nothing the guest sent outside messages and tools
//     reaches it.
//   - [CheckSchema] applies the local schema rule of §2.5: every schema
//     position may only reference local fragments ("#…"), so a tool
//     declaration cannot make the upstream provider fetch a remote schema.
//
// Everything here is a pure function of its arguments: no I/O, no globals
// that change, safe for concurrent use. Guest input is inspected as raw JSON
// (json.RawMessage) so that an absent key and a null differ, and numbers and
// unknown schema keywords are never rewritten.
package modelapi
