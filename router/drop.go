package router

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// Drop reasons: why the router did not run a message. Every drop names
// exactly one of them, in the operator log ("message dropped"), to
// Options.OnDrop and to the submitting surface (Reason of Submit's error).
// The set is fixed, so a metric labelled by reason stays small.
const (
	// DropEmpty: no text, no attachment and no forwarded text.
	DropEmpty = "empty"
	// DropNotSandboxed: no claim owns the channel (the sandbox claim owns
	// sandboxed channels), or it was switched off while the message waited.
	DropNotSandboxed = "not_sandboxed"
	// DropNotAddressed: the message neither mentions nor replies to the bot.
	DropNotAddressed = "not_addressed"
	// DropDirect: a direct message (DM); sandboxed turns are never direct.
	DropDirect = "direct"
	// DropBotAuthor: written by a bot or an integration (a webhook), which
	// the sandbox never serves.
	DropBotAuthor = "bot_author"
	// DropUnknownSpeaker: the access rules serve nobody by this author.
	DropUnknownSpeaker = "unknown_speaker"
	// DropNotAdmitted: a claim other than the sandbox declined without a
	// reason of this set.
	DropNotAdmitted = "not_admitted"
	// DropQueueFull: the channel already held its bound of messages.
	DropQueueFull = "queue_full"
	// DropShuttingDown: the host is shutting down and runs nothing new.
	DropShuttingDown = "shutting_down"
	// DropInternal: deciding about the message failed (a claim or the
	// access rules panicked); the log has the details.
	DropInternal = "internal_error"
)

// DropReasons returns every drop reason, for metrics that register their
// label values up front.
func DropReasons() []string {
	return []string{
		DropEmpty, DropNotSandboxed, DropNotAddressed, DropDirect, DropBotAuthor,
		DropUnknownSpeaker, DropNotAdmitted, DropQueueFull, DropShuttingDown, DropInternal,
	}
}

// ErrDropped marks a message the router did not run. Test with errors.Is;
// Reason names why.
var ErrDropped = errors.New("message dropped")

// DropError is a dropped message's error: its reason and, for a refusal
// the router answered with a notice, ErrQueueFull or ErrStopping (so
// errors.Is finds those classes too).
type DropError struct {
	Reason string
	Err    error // ErrQueueFull, ErrStopping or nil
}

func (e *DropError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return "message dropped: " + e.Reason
}

// Is makes every DropError match ErrDropped.
func (e *DropError) Is(target error) bool { return target == ErrDropped }

func (e *DropError) Unwrap() error { return e.Err }

// Reason returns the drop reason err carries, or "" when err is not a drop.
// ErrQueueFull and ErrStopping on their own count as drops too.
func Reason(err error) string {
	if de, ok := errors.AsType[*DropError](err); ok {
		return de.Reason
	}
	switch {
	case errors.Is(err, ErrQueueFull):
		return DropQueueFull
	case errors.Is(err, ErrStopping):
		return DropShuttingDown
	}
	return ""
}

// knownReason maps a reason outside the fixed set to DropNotAdmitted.
func knownReason(reason string) string {
	if slices.Contains(DropReasons(), reason) {
		return reason
	}
	return DropNotAdmitted
}

// dropped records a drop (log line and OnDrop) and returns its error.
// cause is ErrQueueFull, ErrStopping or nil.
func (r *Router) dropped(m Message, reason string, cause error) error {
	r.recordDrop(m.Channel, reason, addressed(m))
	return &DropError{Reason: reason, Err: cause}
}

// ReportDrop records a drop a surface decided on its own (its own bound
// on held messages, say), so that every drop is logged and reported to
// Options.OnDrop in one place. reason is one of the Drop constants.
func (r *Router) ReportDrop(channel rtsandbox.ChannelKey, reason string) {
	r.recordDrop(channel, knownReason(reason), true)
}

// recordDrop logs a drop and calls OnDrop. The log line is INFO, except
// for chatter that was never meant for the bot (neither a mention, a reply
// nor a DM), which is DEBUG: the Discord surface sees every message of
// every channel the bot can read, and the operator log must not become a
// traffic log. OnDrop sees every drop.
func (r *Router) recordDrop(channel rtsandbox.ChannelKey, reason string, addressed bool) {
	level := slog.LevelInfo
	if !addressed && (reason == DropNotAddressed || reason == DropNotSandboxed || reason == DropEmpty) {
		level = slog.LevelDebug
	}
	surface, _, _ := strings.Cut(string(channel), ":")
	r.log.Log(context.Background(), level, "message dropped", "channel", channel, "surface", surface, "reason", reason)
	if r.onDrop != nil {
		r.callOnDrop(channel, reason)
	}
}

// callOnDrop calls the hook; a panic in it is logged, never passed on.
func (r *Router) callOnDrop(channel rtsandbox.ChannelKey, reason string) {
	defer func() {
		if p := recover(); p != nil {
			_ = recovered(r.log, channel, "drop hook", p)
		}
	}()
	r.onDrop(channel, reason)
}

// addressed reports whether m was meant for the bot.
func addressed(m Message) bool { return m.MentionsBot || m.RepliesToBot || m.IsDirect }
