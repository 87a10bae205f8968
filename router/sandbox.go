package router

import (
	"context"
	"log/slog"
	"strings"

	"github.com/rtsandbox/rtsandbox"
)

// The sandbox claim (docs/host.md, "Routing rules").
const (
	SandboxClaimName = "sandbox"
	SandboxPriority  = 200
	// SandboxKind is what StartFresh returns for a sandboxed channel.
	SandboxKind = "sandbox"
	// SandboxFailure is the log message when a sandbox turn's Run fails
	// (even its failure notice could not be posted).
	SandboxFailure = "sandbox turn failed"
	// sandboxTurnFailedLog is logged when a turn throws.
	sandboxTurnFailedLog = "sandbox turn failed; inspect container cleanup and broker configuration"
	// sandboxTurnEndedEarlyLog is logged, at Info, when a turn was stopped
	// or cut by shutdown: the reference logs the failure line above for
	// those too, which sends operators looking for a fault that is not there.
	sandboxTurnEndedEarlyLog = "sandbox turn ended early (stopped or shutting down)"
	// sandboxTurnStoreLog is logged when a turn was refused because the
	// usage database could not be written (budgets.on_store_error: deny);
	// the error names the file's path.
	sandboxTurnStoreLog = "sandbox turn refused: the usage database (usage.db in the state dir) cannot be written; inspect it (a lock held by another process, a full disk, damage: docs/operations.md)"
	// sandboxStoppedLog is logged, at Warn, when a session turn's
	// container stopped serving while it ran (killed, crashed, removed,
	// paused, restarted): the channel recovers on its next turn.
	sandboxStoppedLog = "sandbox turn cut: its session container stopped serving; the next turn starts it again"
)

// Fixed parts of the model input (docs/host.md, "Routing rules"). Texts guests see are
// in the root package (texts.go).
const (
	// QuotePrefix starts the model input when the message replies to one
	// with text; the quoted text is untrusted.
	QuotePrefix = "Quoted message (untrusted): "
)

// sandboxClaim owns every sandboxed channel and admits only addressed
// messages from resolved speakers.
type sandboxClaim struct {
	channels ChannelSet
	runtime  rtsandbox.Runtime
	log      *slog.Logger
}

func newSandboxClaim(ch ChannelSet, rt rtsandbox.Runtime, log *slog.Logger) *sandboxClaim {
	return &sandboxClaim{channels: ch, runtime: rt, log: log.With("claim", SandboxClaimName)}
}

func (c *sandboxClaim) Name() string  { return SandboxClaimName }
func (c *sandboxClaim) Priority() int { return SandboxPriority }

func (c *sandboxClaim) Owns(channel rtsandbox.ChannelKey, _ string) bool {
	return c.channels.Enabled(channel)
}

// Admit admits only when all hold: the channel is sandboxed, the author is
// neither a bot nor an integration, the message is not direct, it mentions
// or replies to the bot, and the router resolved a speaker. The owner is
// treated like everyone else. The first rule that fails, in that order
// after the channel, names the drop.
func (c *sandboxClaim) Admit(m Message) (Admission, string) {
	if reason := sandboxDrop(m, c.channels.Enabled(m.Channel)); reason != "" {
		return Admission{}, reason
	}
	b := rtsandbox.Binding{
		Channel: m.Channel,
		Speaker: rtsandbox.Speaker{ID: m.Author.ID, Name: m.Author.Name, PrincipalID: m.Speaker.PrincipalID},
		Tier:    m.Tier,
	}
	in := TurnInput(m)
	return Admission{
		Failure: SandboxFailure,
		Run: func(ctx context.Context, port Port) error {
			return c.turn(ctx, port, b, in)
		},
	}, ""
}

// sandboxDrop is the sandbox address rule (docs/host.md, "Routing rules"): the reason m
// is not admitted, or "".
func sandboxDrop(m Message, enabled bool) string {
	switch {
	case !enabled:
		return DropNotSandboxed
	case m.Author.Bot || m.Author.Integration:
		return DropBotAuthor
	case m.IsDirect:
		return DropDirect
	case !m.MentionsBot && !m.RepliesToBot:
		return DropNotAddressed
	case m.Speaker == nil:
		return DropUnknownSpeaker
	}
	return ""
}

// TurnInput is the runtime's input of m's turn: its id, modelText, its
// files and how many of its own it had (Message.Attachments). A runtime
// that takes no attachments answers from its SealedText.
func TurnInput(m Message) rtsandbox.TurnInput {
	return rtsandbox.TurnInput{MessageID: m.ID, Text: modelText(m), Attachments: m.Files, Attached: m.Attachments}
}

// modelText is the model input of a message without the attachments
// notice (TurnInput.Text): the untrusted quote prefix when the message
// replies to one with text, then the message text. Forwarded text is not
// included.
func modelText(m Message) string {
	if strings.TrimSpace(m.ReferenceText) != "" {
		return QuotePrefix + m.ReferenceText + "\n\n" + m.Text
	}
	return m.Text
}

// turn is one queued sandbox turn (docs/host.md, "Routing rules"). A returned error means
// even the failure notice could not be posted, or (a *DropError) that the
// channel was switched off while the message waited.
func (c *sandboxClaim) turn(ctx context.Context, port Port, b rtsandbox.Binding, in rtsandbox.TurnInput) error {
	channel := b.Channel
	if !c.channels.Enabled(channel) {
		// Turned off while queued: no answer, no host agents.
		return &DropError{Reason: DropNotSandboxed}
	}
	stopTyping := port.StartTyping(ctx)
	defer stopTyping() // after the reply is posted
	err := c.answer(ctx, port, b, in)
	if err == nil {
		return nil
	}
	switch rtsandbox.KindOf(err) {
	case rtsandbox.KindBusy:
		// The host had no free turn slot for the whole queue wait.
		c.log.Warn("sandbox turn refused: host busy", "channel", channel, "err", err)
	case rtsandbox.KindOverBudget:
		c.log.Info("sandbox turn refused: daily budget spent", "channel", channel, "err", err)
	case rtsandbox.KindStore:
		c.log.Error(sandboxTurnStoreLog, "channel", channel, "class", "store", "err", err)
	case rtsandbox.KindSandboxStopped:
		// The session runtime logged what stopped the container.
		c.log.Warn(sandboxStoppedLog, "channel", channel, "err", err)
	case rtsandbox.KindEndedEarly, rtsandbox.KindStopping:
		// Stopped by an owner or cut by shutdown: nothing to inspect.
		c.log.Info(sandboxTurnEndedEarlyLog, "channel", channel, "err", err)
	default:
		c.log.Error(sandboxTurnFailedLog, "channel", channel, "err", err)
	}
	// Detached: a turn aborted by shutdown still says so.
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), noticeTimeout)
	defer cancel()
	return port.Reply(nctx, rtsandbox.GuestText(err))
}

// answer runs the turn and posts its reply, in at most MaxChunks chunks,
// the answer's files on the last. A failed answer (Reply.OK false) posts
// the fixed failure text and no file. A panic (in the runtime, say)
// becomes an error like any failure, so the guest gets the fixed failure
// text.
func (c *sandboxClaim) answer(ctx context.Context, port Port, b rtsandbox.Binding, in rtsandbox.TurnInput) (err error) {
	channel := b.Channel
	defer func() {
		if p := recover(); p != nil {
			err = recovered(c.log, channel, "sandbox turn", p)
		}
	}()
	a, err := c.run(ctx, port, b, in)
	if err != nil {
		return err
	}
	out, files := a.Reply.Text, a.Files
	if !a.Reply.OK {
		out, files = rtsandbox.TurnFailedText, nil
	}
	return port.ReplyFiles(ctx, out, files)
}

// run runs the turn with previews when the message's surface takes them;
// they end before run returns, so none follows the reply.
func (c *sandboxClaim) run(ctx context.Context, port Port, b rtsandbox.Binding, in rtsandbox.TurnInput) (rtsandbox.Answer, error) {
	onText, stop := port.StartPreview(ctx)
	defer stop()
	return c.runtime.Run(ctx, b, in, onText)
}

func (c *sandboxClaim) StartFresh(_ context.Context, channel rtsandbox.ChannelKey) (string, error) {
	if err := c.runtime.StartFresh(channel); err != nil {
		return "", err
	}
	return SandboxKind, nil
}

func (c *sandboxClaim) Stop(channel rtsandbox.ChannelKey) bool { return c.runtime.Stop(channel) }
