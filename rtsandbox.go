// Package rtsandbox is the shared contract of every part of rtsandbox: the
// domain nouns, the error kinds and the one table of guest texts, the
// limits both sides keep, and Secret. It imports nothing of this module
// and only the standard library, so the in-container worker may depend on
// it without pulling in host code. The worker↔broker wire protocol that
// applies these nouns and limits is package wire.
//
// Nouns: ChannelKey (kind and local id), Speaker, Tier, and Binding, what
// the host admitted for one piece of work. The router resolves a message's
// speaker and tier from the access rules and passes the Binding to the
// runtime; the runtime binds the turn's broker to it; every credential
// getter and host tool of the turn receives it (HostTool.Run), and nothing
// a guest sends can change it. Authorisation decisions downstream of the
// router (only members may delegate research, say) read Binding.Tier and
// never re-parse a principal or a name. A Binding never enters the
// container: the worker sees only the speaker's id and name
// (wire.TurnSpeaker).
//
// Runtime (runtime.go) is the one interface the router drives a mode's
// runtime through, with its Answer and RuntimeStatus; each mode implements
// it whole. Limits (limits.go, state.go) carry their spec sections; the
// turn outcome classes of both modes are in class.go.
package rtsandbox

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf16"
)

var (
	toolNameRE     = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)
	mcpToolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	functionNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	// JS "." excludes line terminators; (?s) is deliberately off and \r and
	// the Unicode separators are excluded explicitly.
	localIDRE = regexp.MustCompile("^[^\n\r\u2028\u2029]+$")
)

// ValidToolName reports whether s is a valid host tool or MCP server name:
// ^[a-z][a-z0-9_]{0,47}$.
func ValidToolName(s string) bool { return toolNameRE.MatchString(s) }

// ValidMCPToolName reports whether s is a valid MCP tool name:
// ^[a-zA-Z0-9_-]{1,128}$, the function-name rule of the model APIs (the
// longest, Anthropic's), so that a real server's tools ("get-sum",
// "getWeather") can be allow-listed. The worker gives each a model-facing
// function name that passes ValidFunctionName, whatever the dialect.
func ValidMCPToolName(s string) bool { return mcpToolNameRE.MatchString(s) }

// ValidFunctionName reports whether s is a valid model-facing function name:
// ^[a-z][a-z0-9_]{0,63}$.
func ValidFunctionName(s string) bool { return functionNameRE.MatchString(s) }

// ValidToolCallID reports whether s is a valid tool-call id: 1..128 UTF-16
// code units.
func ValidToolCallID(s string) bool {
	n := UTF16Len(s)
	return n >= 1 && n <= MaxToolCallIDLen
}

// ChannelKey names a chat channel across surfaces, such as
// "discord:112233445566778899" or "http:lobby".
type ChannelKey string

// MaxChannelKey bounds a channel key, in bytes (session spec: longer keys
// are refused). Every surface's keys fit: Discord's are under 30 bytes,
// the HTTP API's at most 205.
const MaxChannelKey = 256

// ChannelKeyRule is ChannelKey.Valid's rule as config errors and commands
// state it (TestChannelKeyRuleNamesTheBound keeps its number
// MaxChannelKey).
const ChannelKeyRule = "a channel key matching ^[a-z][a-z0-9_-]*:.+$ of at most 256 bytes"

// Valid reports whether k matches ^[a-z][a-z0-9_-]*:.+$ (no line breaks)
// and is at most MaxChannelKey bytes.
func (k ChannelKey) Valid() bool {
	kind, id, ok := strings.Cut(string(k), ":")
	return ok && len(k) <= MaxChannelKey && ValidKind(kind) && localIDRE.MatchString(id)
}

// Speaker is the author of a guest message as the host resolved it. The
// PrincipalID is the host's identity for access and credential scoping; it
// never reaches the container.
type Speaker struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	PrincipalID string `json:"principal_id"`
}

// Validate checks the UTF-16 length limits and that the principal is set.
func (s Speaker) Validate() error {
	if s.PrincipalID == "" {
		return errors.New("speaker principal id is required")
	}
	for _, f := range []string{s.ID, s.Name, s.PrincipalID} {
		if UTF16Len(f) > MaxSpeakerField {
			return errors.New("speaker field longer than 256 UTF-16 units")
		}
	}
	return nil
}

// ToolSpec declares a tool to the model: a name, a description and a JSON
// Schema for its arguments (kept as raw JSON so key order survives).
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// HostTool is a tool that runs on the host, bound to the turn's Binding.
// Run receives the parsed request body (a JSON object) exactly as the guest
// sent it and returns the text handed back to the model; b is what the
// host admitted (channel, speaker, tier), never anything from the request.
// ctx ends when the call's deadline passes, the guest disconnects or the
// turn ends.
type HostTool interface {
	Run(ctx context.Context, input json.RawMessage, b Binding) (string, error)
}

// HostToolFunc adapts a function to HostTool.
type HostToolFunc func(ctx context.Context, input json.RawMessage, b Binding) (string, error)

// Run calls f.
func (f HostToolFunc) Run(ctx context.Context, input json.RawMessage, b Binding) (string, error) {
	return f(ctx, input, b)
}

// TrimJS trims like JS String.prototype.trim: Unicode White_Space plus
// U+FEFF, but not U+0085, which Go's unicode.IsSpace includes. Rules that
// ask for "non-blank after trimming" use it on both sides of the worker
// protocol, so the host never refuses what the worker accepted.
func TrimJS(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return r == '\uFEFF' || (r != '\u0085' && unicode.IsSpace(r))
	})
}

// UTF16Len returns the length of s in UTF-16 code units, the unit of the
// reference's string limits (JS .length). Invalid UTF-8 bytes count as one
// unit each, as U+FFFD would.
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		if l := utf16.RuneLen(r); l > 0 {
			n += l
		} else {
			n++
		}
	}
	return n
}

// PrefixUTF16 returns the longest prefix of s of at most n UTF-16 code
// units that does not split a character; units are counted as UTF16Len
// counts them. It is the one truncation by the reference's string length.
func PrefixUTF16(s string, n int) string {
	u := 0
	for i, r := range s {
		u += max(utf16.RuneLen(r), 1) // an invalid byte counts as U+FFFD
		if u > n {
			return s[:i]
		}
	}
	return s
}
