package discord

import (
	"context"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// onMessage runs on discordgo's gateway reader: it only queues the message
// for inbound, which routes messages one at a time so that their order is
// kept (docs/host.md, "Discord"). A full inbox drops the message.
func (s *Surface) onMessage(_ *discordgo.Session, mc *discordgo.MessageCreate) {
	if mc == nil || mc.Message == nil {
		return
	}
	defer s.recovered("message event", key(mc.ChannelID))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.inbox <- mc.Message:
	default:
		s.log.Warn("inbound message dropped: too many waiting", "channel", key(mc.ChannelID), "message", mc.ID)
	}
}

// inbound routes queued messages until Close.
func (s *Surface) inbound() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case m := <-s.inbox:
			s.route(m)
		}
	}
}

// route hands one message to the router. A panic fails that message only:
// the loop goes on with the next.
func (s *Surface) route(m *discordgo.Message) {
	defer s.recovered("inbound message", key(m.ChannelID))
	if rm, ok := s.message(s.ctx, m); ok {
		_, _ = s.router.Submit(rm) // settles on its own; the router logs outcomes
	}
}

// routedTypes are the message types that are chat: plain messages (and
// forwards) and replies. System messages (joins, pins, boosts…) are not.
func routed(t discordgo.MessageType) bool {
	return t == discordgo.MessageTypeDefault || t == discordgo.MessageTypeReply
}

// message maps a gateway message to the router's facts (docs/host.md, "Discord").
// It reports false for messages that are not chat at all: before READY,
// the bot's own, system messages, or an invalid channel.
func (s *Surface) message(ctx context.Context, m *discordgo.Message) (router.Message, bool) {
	botID, _ := s.ids()
	if botID == "" || m.Author == nil || m.Author.ID == botID || !routed(m.Type) {
		return router.Message{}, false
	}
	ch := key(m.ChannelID)
	if !ch.Valid() || !snowflakeRE.MatchString(m.ChannelID) {
		return router.Message{}, false
	}
	out := router.Message{
		Channel:  ch,
		ID:       m.ID,
		Space:    m.GuildID,
		IsDirect: m.GuildID == "",
		Author: router.Author{
			ID:          m.Author.ID,
			Name:        displayName(m.Author, m.Member),
			Roles:       roles(m.Member),
			Bot:         m.Author.Bot,
			Integration: m.WebhookID != "",
		},
		MentionsBot: mentions(m.Mentions, botID),
		Text:        stripMention(m.Content, botID),
		Files:       attachments(m.Attachments, false),
	}
	var quoted []rtsandbox.Attachment // the replied-to message's
	ref := m.MessageReference
	switch {
	case ref != nil && ref.Type == discordgo.MessageReferenceTypeForward:
		if len(m.MessageSnapshots) > 0 && m.MessageSnapshots[0].Message != nil {
			f := m.MessageSnapshots[0].Message
			out.ForwardedText = f.Content
			out.Files = append(out.Files, attachments(f.Attachments, false)...)
		}
	case ref != nil && ref.MessageID != "":
		if r := s.referenced(ctx, m, out); r != nil {
			out.RepliesToBot = r.Author != nil && r.Author.ID == botID
			out.ReferenceText = stripMention(r.Content, botID)
			quoted = attachments(r.Attachments, true)
		}
	}
	out.Attachments = len(out.Files)
	out.Files = append(out.Files, quoted...)
	return out, true
}

// referenced returns the replied-to message: the copy Discord embedded, else
// fetched. The fetch is skipped for messages no claim may admit (bots,
// integrations, DMs), so they cost no REST call; a failed fetch means no
// reference.
func (s *Surface) referenced(ctx context.Context, m *discordgo.Message, facts router.Message) *discordgo.Message {
	if m.ReferencedMessage != nil {
		return m.ReferencedMessage
	}
	if facts.Author.Bot || facts.Author.Integration || facts.IsDirect {
		return nil
	}
	// The inbound loop is serial: a fetch (up to fetchTimeout) holds up
	// every channel. Fetch only when a reply to the bot would be admitted
	// here (a sandboxed channel, a resolved author).
	probe := facts
	probe.RepliesToBot = true
	if !s.router.Admits(probe) {
		return nil
	}
	sess, err := s.rest()
	if err != nil {
		return nil
	}
	chID := m.MessageReference.ChannelID
	if chID == "" {
		chID = m.ChannelID
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	r, err := sess.ChannelMessage(chID, m.MessageReference.MessageID, discordgo.WithContext(ctx))
	if err != nil {
		s.log.Info("replied-to message could not be read", "channel", facts.Channel, "message", m.ID, "err", s.redact(err))
		return nil
	}
	return r
}

// displayName is the server nickname, else the global name, else the
// username.
func displayName(u *discordgo.User, mem *discordgo.Member) string {
	switch {
	case mem != nil && mem.Nick != "":
		return mem.Nick
	case u.GlobalName != "":
		return u.GlobalName
	}
	return u.Username
}

// roles returns the member's roles as "discord:role:<id>", or nil when no
// member object came (DMs: unknown, not empty).
func roles(mem *discordgo.Member) []string {
	if mem == nil {
		return nil
	}
	out := make([]string, 0, len(mem.Roles))
	for _, r := range mem.Roles {
		if snowflakeRE.MatchString(r) {
			out = append(out, Prefix+":role:"+r)
		}
	}
	return out
}

func mentions(users []*discordgo.User, botID string) bool {
	for _, u := range users {
		if u != nil && u.ID == botID {
			return true
		}
	}
	return false
}

// stripMention removes <@BOT> and <@!BOT> and trims.
func stripMention(text, botID string) string {
	text = strings.ReplaceAll(text, "<@"+botID+">", "")
	text = strings.ReplaceAll(text, "<@!"+botID+">", "")
	return strings.TrimSpace(text)
}
