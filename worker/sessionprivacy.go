package worker

import (
	"cmp"
	"slices"

	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the session worker's privacy projection (session spec
// docs/session.md, "Privacy projection"; docs/session.md, "Session worker and conversation format"): what of the kept conversation each reader's model
// requests may hold, and what a summary may be written from. The worker
// builds every request itself, so it applies the projection to every
// request and never needs the reference's bridge refusal (which exists
// only for a provider that replays its own transcript).
//
// The reader of a turn is its author's principalId, else its author id.
// A tool result is private when its host tool answered privateTo; a turn
// is private when its prompt memory was (wire.SessionTurn.
// PrivateMemory, kept in the turn's reader record). For a reader R:
//
//   - a tool result private to someone other than R becomes hiddenPrivate,
//     and the arguments of the call it answers become {} (the model wrote
//     them knowing the private data); the call's id and name stay, so
//     every call keeps its answer;
//   - an exchange of another reader that is private (its prompt memory, or
//     a tool result not private to R) is closed: besides the rule above,
//     every call's arguments become {}, every other result becomes
//     hiddenTurnResult, and every assistant text but the final reply is
//     dropped. This is stronger than the reference, which hides only the
//     private results: the model saw the other reader's private memory
//     while it wrote those texts and arguments, and a public tool may echo
//     what it was asked. The user's message and the final reply stay: both
//     were posted in the channel for everyone to read;
//   - thinking is never kept past the model call that needs it (the
//     Anthropic client replays only the running turn's latest), so no
//     earlier assistant message carries any;
//   - prompt memory lives only in the running turn's system prompt; it is
//     never part of the conversation.
//
// A summary is written from the view of no reader at all (anonymous):
// every private result hidden, every private exchange closed; the summary
// request has its own system prompt, so it holds no prompt memory and no
// thinking. This is exchange isolation among a channel's guests, not a
// security boundary: they share the workspace and its files.

// Placeholders of what a reader may not see.
const (
	hiddenPrivate    = "(another person's private memory, hidden)"
	hiddenTurnResult = "(a result from another person's private turn, hidden)"
	hiddenArguments  = "{}"
)

// viewer is who a projection is for: a reader, or nobody (the view a
// summary is written from, and the one privateHistory measures).
type viewer struct {
	id        string
	anonymous bool
}

// anonymous is the view of no reader.
var anonymous = viewer{anonymous: true}

// readerOf is the viewer of a turn: its principal, else its author id.
func readerOf(turn wire.SessionTurn) viewer {
	return viewer{id: cmp.Or(turn.Author.PrincipalID, turn.Author.ID)}
}

// is reports whether v is the reader named id.
func (v viewer) is(id string) bool { return !v.anonymous && v.id == id }

// mayRead reports whether v may see a result private to owner ("" is
// everyone).
func (v viewer) mayRead(owner string) bool { return owner == "" || v.is(owner) }

// closedTo reports whether x is another reader's private exchange for v.
func (x *sessionExchange) closedTo(v viewer) bool {
	if v.is(x.reader) {
		return false
	}
	return x.privateMemory || slices.ContainsFunc(x.messages, func(m message) bool { return !v.mayRead(m.PrivateTo) })
}

// projectExchanges is the kept conversation as v may see it, oldest
// first. Messages are copied where they change, never changed in place.
func projectExchanges(xs []sessionExchange, v viewer) []message {
	var out []message
	for i := range xs {
		if xs[i].closedTo(v) {
			out = append(out, closeExchange(xs[i].messages, v)...)
		} else {
			out = append(out, hidePrivate(xs[i].messages, v)...)
		}
	}
	return out
}

// hidePrivate applies the first rule: each result private to another
// becomes hiddenPrivate and its call's arguments {}. Each tool message
// answers a call of the nearest assistant message before it. msgs is
// returned as it is when nothing is hidden.
func hidePrivate(msgs []message, v viewer) []message {
	var out []message // a copy, made at the first change
	calls := -1       // index of the assistant message whose calls are being answered
	for i, m := range msgs {
		switch {
		case m.Role == "assistant":
			calls = i
		case m.Role == "tool" && !v.mayRead(m.PrivateTo):
			if out == nil {
				out = slices.Clone(msgs)
			}
			out[i].Content = hiddenPrivate
			if calls >= 0 {
				out[calls].ToolCalls = hideArguments(out[calls].ToolCalls, m.ToolCallID)
			}
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

// closeExchange applies the closing rule to one exchange.
func closeExchange(msgs []message, v viewer) []message {
	out := slices.Clone(msgs)
	for i := range out {
		m := &out[i]
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			m.Content = ""
			m.ToolCalls = hideArguments(m.ToolCalls, "")
		case m.Role == "tool" && !v.mayRead(m.PrivateTo):
			m.Content = hiddenPrivate
		case m.Role == "tool" && m.PrivateTo == "":
			m.Content = hiddenTurnResult
		}
	}
	return out
}

// hideArguments returns a copy of calls with the arguments of the call
// id, or of every call when id is "", replaced by {}.
func hideArguments(calls []wire.ToolCall, id string) []wire.ToolCall {
	out := slices.Clone(calls)
	for i := range out {
		if id == "" || out[i].ID == id {
			out[i].Function.Arguments = hiddenArguments
		}
	}
	return out
}

// privateHistory is the ready body's privateHistory (docs/session.md, "Privacy projection"): whether the
// kept conversation hides anything from the view of no reader.
func privateHistory(xs []sessionExchange) bool {
	return slices.ContainsFunc(xs, func(x sessionExchange) bool { return x.closedTo(anonymous) })
}
