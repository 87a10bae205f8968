package discord

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Files in and out (docs/protocol.md, "Images and files"; docs/session.md, "Attachments in, reply files out").
//
// In: a message's attachments become router.Message.Files as Discord
// describes them (CDN URL, file name, declared size and type): the
// message's own, then a forward's snapshot's (merged into the message's,
// as the reference merges them), then the replied-to message's
// (FromReference). The surface downloads nothing; the runtime fetches
// through safefetch.
//
// Out: a delivery's files are posted as Discord attachments
// (multipart/form-data with payload_json and files[n], discordgo's
// MessageSend.Files): as many as fit with the chunk's text, the rest in
// follow-up messages without text, each message holding at most
// MaxFilesPerMessage files and Options.MaxUploadBytes bytes of them. A
// file larger than MaxUploadBytes on its own, or in a message Discord
// refuses as too large (413, the server's real limit being lower than
// the configured one), is not posted: the channel gets the fixed note
// rtsandbox.FileTooLargeFormat naming it instead.

const (
	// MaxFilesPerMessage is Discord's bound on the attachments of one
	// message.
	MaxFilesPerMessage = 10
	// DefaultMaxUploadBytes is the upload limit of a server without
	// boosts: the file bytes one message may carry.
	DefaultMaxUploadBytes = 10 << 20
)

// attachments returns the attachments of a Discord message as the
// router's, marked as the replied-to message's when fromReference.
func attachments(list []*discordgo.MessageAttachment, fromReference bool) []rtsandbox.Attachment {
	var out []rtsandbox.Attachment
	for _, a := range list {
		if a == nil {
			continue
		}
		out = append(out, rtsandbox.Attachment{
			Name: a.Filename, ContentType: a.ContentType, Size: int64(max(a.Size, 0)),
			URL: a.URL, FromReference: fromReference,
		})
	}
	return out
}

// planUploads packs files, in order, into messages of at most
// MaxFilesPerMessage files and limit bytes; files larger than limit on
// their own are returned apart, by name.
func planUploads(files []rtsandbox.File, limit int64) (groups [][]rtsandbox.File, tooLarge []string) {
	var cur []rtsandbox.File
	var size int64
	for _, f := range files {
		n := int64(len(f.Data))
		if n > limit {
			tooLarge = append(tooLarge, f.Name)
			continue
		}
		if len(cur) == MaxFilesPerMessage || size+n > limit {
			groups, cur, size = append(groups, cur), nil, 0
		}
		cur, size = append(cur, f), size+n
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	return groups, tooLarge
}

// send posts d's chunk with the first group of its files, removes the
// message's preview once that first message is out (a reply), then posts
// the other groups and the notes for files that could not be posted.
func (s *Surface) send(ctx context.Context, sess *discordgo.Session, id string, d router.Delivery) error {
	groups, tooLarge := planUploads(d.Files, s.maxUpload)
	var first []rtsandbox.File
	if len(groups) > 0 {
		first, groups = groups[0], groups[1:]
	}
	if d.Chunk != "" || len(first) > 0 {
		refused, err := s.post(ctx, sess, id, d.Chunk, first)
		if err != nil {
			return fmt.Errorf("discord: send to %s: %s", d.Channel, s.redact(err))
		}
		tooLarge = append(tooLarge, refused...)
	}
	if d.Kind == router.KindReply {
		s.removePreview(ctx, sess, id, d.InReplyTo)
	}
	for _, g := range groups {
		refused, err := s.post(ctx, sess, id, "", g)
		if err != nil {
			return fmt.Errorf("discord: send files to %s: %s", d.Channel, s.redact(err))
		}
		tooLarge = append(tooLarge, refused...)
	}
	for _, name := range tooLarge {
		note := &discordgo.MessageSend{Content: fmt.Sprintf(rtsandbox.FileTooLargeFormat, escapeMarkdown(name)), AllowedMentions: noMentions()}
		if _, err := sess.ChannelMessageSendComplex(id, note, discordgo.WithContext(ctx)); err != nil {
			return fmt.Errorf("discord: send a file note to %s: %s", d.Channel, s.redact(err))
		}
	}
	if len(tooLarge) > 0 {
		s.log.Warn("reply files not posted: larger than the upload limit", "channel", d.Channel,
			"files", len(tooLarge), "max_upload_bytes", s.maxUpload)
	}
	return nil
}

// post posts one message: content (users-only mentions) with files. When
// Discord refuses the upload as too large, it posts the content alone
// and returns the files' names as not posted.
func (s *Surface) post(ctx context.Context, sess *discordgo.Session, id, content string, files []rtsandbox.File) (refused []string, err error) {
	msg := &discordgo.MessageSend{Content: content, AllowedMentions: usersOnly()}
	for _, f := range files {
		msg.Files = append(msg.Files, &discordgo.File{Name: f.Name, Reader: bytes.NewReader(f.Data)})
	}
	_, err = sess.ChannelMessageSendComplex(id, msg, discordgo.WithContext(ctx))
	if len(files) == 0 || !tooLargeForDiscord(err) {
		return nil, err
	}
	for _, f := range files {
		refused = append(refused, f.Name)
	}
	if content == "" {
		return refused, nil
	}
	msg.Files = nil
	_, err = sess.ChannelMessageSendComplex(id, msg, discordgo.WithContext(ctx))
	return refused, err
}

// tooLargeForDiscord reports a request Discord refused for its size.
func tooLargeForDiscord(err error) bool {
	re, ok := errors.AsType[*discordgo.RESTError](err)
	return ok && re.Response != nil && re.Response.StatusCode == http.StatusRequestEntityTooLarge
}

// markdownEscaper escapes what Discord's markdown would read in a file
// name: emphasis, code, spoilers, quotes, headings, lists, links and
// mentions.
var markdownEscaper = strings.NewReplacer(
	`\`, `\\`, "*", `\*`, "_", `\_`, "~", `\~`, "`", "\\`", "|", `\|`, ">", `\>`, "<", `\<`,
	"#", `\#`, "-", `\-`, "[", `\[`, "]", `\]`, "(", `\(`, ")", `\)`, "@", `\@`, ":", `\:`,
)

// escapeMarkdown makes a file name show as written.
func escapeMarkdown(name string) string { return markdownEscaper.Replace(name) }
