package discord

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Previews (Options.Preview): the first router.KindPreview for a message
// posts one preview message; later ones edit it, at most once per
// router.PreviewInterval (a preview that comes sooner is skipped: the next
// one carries its text too), each cut to Discord's 2,000 units with an
// ellipsis. A preview pings nobody, whatever it says.
//
// When the reply is posted (its first chunk), the preview is deleted: the
// guest then sees the worker's reply once, as without previews, rather
// than a truncated or superseded draft above it (the text of an answer
// before a tool call, say), and a later reader of the channel is not left
// guessing which of two messages is the answer. The reply is a new
// message, so it notifies as usual; an edit would not.

// previewLimit is Discord's message content limit, in UTF-16 units.
const previewLimit = 2000

// ellipsis ends a preview cut to previewLimit.
const ellipsis = "…"

// shownPreview is the preview message of the turn running in a channel.
type shownPreview struct {
	replyTo string // the message the turn answers
	msgID   string
	edited  time.Time
}

// Previews implements router.PreviewSurface.
func (s *Surface) Previews() bool { return s.preview }

// noMentions lets a message ping nobody.
func noMentions() *discordgo.MessageAllowedMentions {
	return &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}
}

// showPreview posts or edits the preview of d.InReplyTo in channel id.
// One channel runs one turn at a time, so a preview for another message
// replaces the channel's entry: the map holds one entry per channel.
func (s *Surface) showPreview(ctx context.Context, sess *discordgo.Session, id string, d router.Delivery) error {
	if !s.preview {
		return nil
	}
	text := cutPreview(d.Chunk)
	now := s.now()
	s.pmu.Lock()
	p := s.shown[id]
	if p != nil && p.replyTo != d.InReplyTo {
		p = nil // a stale entry: its turn ended without a reply
	}
	if p != nil && now.Sub(p.edited) < router.PreviewInterval {
		s.pmu.Unlock()
		return nil
	}
	if p != nil {
		p.edited = now
	}
	s.pmu.Unlock()
	if p == nil {
		msg := &discordgo.MessageSend{Content: text, AllowedMentions: noMentions()}
		m, err := sess.ChannelMessageSendComplex(id, msg, discordgo.WithContext(ctx))
		if err != nil {
			return fmt.Errorf("discord: preview to %s: %s", d.Channel, s.redact(err))
		}
		s.pmu.Lock()
		s.shown[id] = &shownPreview{replyTo: d.InReplyTo, msgID: m.ID, edited: now}
		s.pmu.Unlock()
		return nil
	}
	edit := &discordgo.MessageEdit{ID: p.msgID, Channel: id, Content: &text, AllowedMentions: noMentions()}
	if _, err := sess.ChannelMessageEditComplex(edit, discordgo.WithContext(ctx)); err != nil {
		return fmt.Errorf("discord: preview edit in %s: %s", d.Channel, s.redact(err))
	}
	return nil
}

// removePreview deletes the preview of replyTo in channel id, if any. A
// failure is logged: the reply is out, and a left-over preview is only
// noise.
func (s *Surface) removePreview(ctx context.Context, sess *discordgo.Session, id, replyTo string) {
	s.pmu.Lock()
	p := s.shown[id]
	if p == nil || p.replyTo != replyTo {
		s.pmu.Unlock()
		return
	}
	delete(s.shown, id)
	s.pmu.Unlock()
	if err := sess.ChannelMessageDelete(id, p.msgID, discordgo.WithContext(ctx)); err != nil {
		s.log.Warn("could not delete a preview", "channel", key(id), "err", s.redact(err))
	}
}

// cutPreview cuts text to previewLimit UTF-16 units, ending it with the
// ellipsis when cut.
func cutPreview(text string) string {
	if rtsandbox.UTF16Len(text) <= previewLimit {
		return text
	}
	n, units := 0, 0
	for n < len(text) {
		r, size := utf8.DecodeRuneInString(text[n:])
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if units+w > previewLimit-rtsandbox.UTF16Len(ellipsis) {
			break
		}
		n, units = n+size, units+w
	}
	return text[:n] + ellipsis
}
