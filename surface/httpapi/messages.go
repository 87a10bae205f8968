package httpapi

import (
	"context"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// messageRequest is POST /api/v1/messages.
type messageRequest struct {
	Channel       string
	Author        authorRequest
	Text          string
	MentionsBot   bool
	RepliesToBot  bool
	IsDirect      bool
	ReferenceText string
	Wait          bool
	// Attachments are the decoded "attachments" (attachments.go).
	Attachments []rtsandbox.Attachment
}

type authorRequest struct {
	ID   string
	Name string
	Bot  bool
}

// acceptedResponse answers a message taken without waiting.
type acceptedResponse struct {
	ID      string `json:"id"`
	Channel string `json:"channel"`
}

// waitResponse answers a message with "wait": true once it is settled.
type waitResponse struct {
	ID      string  `json:"id"`
	Channel string  `json:"channel"`
	Dropped bool    `json:"dropped,omitempty"`
	Reason  string  `json:"reason,omitempty"` // a router.Drop* reason when dropped
	Replies []reply `json:"replies"`
}

// dropResponse answers a message the router dropped at once.
type dropResponse struct {
	Channel string `json:"channel"`
	Dropped bool   `json:"dropped"`
	Reason  string `json:"reason"`
}

type reply struct {
	Chunks []string `json:"chunks"`
	// Files are the reply's files, on the reply that has them.
	Files []File `json:"files,omitempty"`
}

// File is a reply file on the wire: its safe name and its bytes, which
// encoding/json writes as standard padded base64.
type File struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// filesSize is about the bytes files take on the wire (base64).
func filesSize(files []rtsandbox.File) int {
	n := 0
	for _, f := range files {
		n += len(f.Name) + (len(f.Data)+2)/3*4
	}
	return n
}

// wireFiles returns files as the wire's; nil for none.
func wireFiles(files []rtsandbox.File) []File {
	var out []File
	for _, f := range files {
		out = append(out, File{Name: f.Name, Data: f.Data})
	}
	return out
}

// decodeMessage reads a message strictly; the returned text names the key
// at fault. The decoded bytes of its attachments are reserved in res.
// Everything outside attachment data is bounded by MaxBodyBytes, checked
// before each key.
func decodeMessage(d *decoder, res *reservation) (messageRequest, string) {
	var m messageRequest
	var sawAuthor bool
	msg := d.object("", func(key string) string {
		if d.outside() > MaxBodyBytes {
			d.big = true
			return textBodyTooLarge
		}
		switch key {
		case "attachments":
			return d.attachments(&m.Attachments, res)
		case "channel":
			return d.str(key, &m.Channel)
		case "author":
			sawAuthor = true
			return d.object("author", func(k string) string {
				switch k {
				case "id":
					return d.str("author.id", &m.Author.ID)
				case "name":
					return d.str("author.name", &m.Author.Name)
				case "bot":
					return d.boolean("author.bot", &m.Author.Bot)
				}
				return unknown("author." + k)
			})
		case "text":
			return d.str(key, &m.Text)
		case "mentions_bot":
			return d.boolean(key, &m.MentionsBot)
		case "replies_to_bot":
			return d.boolean(key, &m.RepliesToBot)
		case "is_direct":
			return d.boolean(key, &m.IsDirect)
		case "reference_text":
			return d.str(key, &m.ReferenceText)
		case "wait":
			return d.boolean(key, &m.Wait)
		}
		return unknown(key)
	})
	if msg != "" {
		return m, msg
	}
	if d.outside() > MaxBodyBytes {
		d.big = true
		return m, textBodyTooLarge
	}
	if !sawAuthor {
		return m, "author: required"
	}
	return m, ""
}

// validate checks m and builds the router message.
func (m messageRequest) validate() (router.Message, string) {
	channel, msg := checkChannel(m.Channel)
	if msg != "" {
		return router.Message{}, "channel: " + msg
	}
	switch {
	case m.Author.ID == "":
		return router.Message{}, "author.id: required"
	case !validAuthorID(m.Author.ID):
		return router.Message{}, "author.id: must be printable without whitespace, not start with \"role:\", and make http:<id> at most 256 characters"
	case !validName(m.Author.Name):
		return router.Message{}, "author.name: at most 256 characters without control characters"
	case strings.TrimSpace(m.Text) == "" && len(m.Attachments) == 0:
		return router.Message{}, "text: required and not blank"
	case !validText(m.Text):
		return router.Message{}, "text: at most 32000 characters of valid UTF-8"
	case !validText(m.ReferenceText):
		return router.Message{}, "reference_text: at most 32000 characters of valid UTF-8"
	}
	name := m.Author.Name
	if name == "" {
		name = m.Author.ID
	}
	return router.Message{
		Channel:       channel,
		Author:        router.Author{ID: m.Author.ID, Name: name, Bot: m.Author.Bot},
		Text:          strings.TrimSpace(m.Text),
		MentionsBot:   m.MentionsBot,
		RepliesToBot:  m.RepliesToBot,
		IsDirect:      m.IsDirect,
		ReferenceText: m.ReferenceText,
		Attachments:   len(m.Attachments),
		Files:         slices.Clip(m.Attachments),
	}, ""
}

// roomRE is the part after "http:": room names of bridges (Matrix room ids,
// UUIDs, slugs) fit; slashes, spaces and escapes do not, so a key is one
// clean path segment.
var roomRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@!+=~-]{0,199}$`)

// checkChannel checks an "http:<room>" key.
func checkChannel(s string) (rtsandbox.ChannelKey, string) {
	room, ok := strings.CutPrefix(s, Prefix+":")
	if !ok || !roomRE.MatchString(room) {
		return "", `must be "http:<room>", the room 1 to 200 of A-Z a-z 0-9 . _ : @ ! + = ~ - starting with a letter or digit`
	}
	return rtsandbox.ChannelKey(s), ""
}

func validAuthorID(id string) bool { return router.ValidAuthorID(Prefix, id) }

func validName(s string) bool {
	return utf8.ValidString(s) && rtsandbox.UTF16Len(s) <= rtsandbox.MaxSpeakerField &&
		strings.IndexFunc(s, unicode.IsControl) < 0
}

func validText(s string) bool {
	return utf8.ValidString(s) && rtsandbox.UTF16Len(s) <= rtsandbox.MaxTextLen
}

// handlePostMessage takes a message for the router: 202 with its id, or
// with "wait": true the replies once it is settled; a message the router
// drops at once answers 200 {"channel","dropped":true,"reason"} in both
// modes.
func handlePostMessage(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		meter := &uploadMeter{slots: a.uploads, extend: func() { _ = rc.SetReadDeadline(time.Now().Add(uploadTimeout)) }}
		defer meter.release()
		res := &reservation{b: a.attached}
		defer res.release() // unless a pending message took the bytes
		d, status, text := newBoundedDecoder(w, r, a.opts.MaxRequestBytes, meter)
		if d == nil {
			writeError(w, status, text)
			return
		}
		req, msg := decodeMessage(d, res)
		if msg == "" {
			msg = d.end()
		}
		meter.release() // the body is read: a waiting request holds no slot
		if status, text := d.refusal(); status != 0 {
			if status == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "30")
			}
			writeError(w, status, text)
			return
		}
		var m router.Message
		if msg == "" {
			m, msg = req.validate()
		}
		if msg != "" {
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		p, o := a.submit(m, res)
		switch {
		case o != nil && o.err != nil: // refused: queue full, shutting down
			a.failWith(w, r, o.err, o.reason)
			return
		case o != nil:
			// Dropped at once (not sandboxed, not addressed, a DM, a bot,
			// an unresolved author): nothing is queued, so no id.
			writeJSON(w, http.StatusOK, dropResponse{Channel: string(m.Channel), Dropped: true, Reason: o.reason})
			return
		}
		if !req.Wait {
			writeJSON(w, http.StatusAccepted, acceptedResponse{ID: p.id, Channel: string(m.Channel)})
			return
		}
		a.await(w, r, p)
	})
}

// await answers a waiting request when its message is settled, the wait
// bound passes or the client goes.
func (a *API) await(w http.ResponseWriter, r *http.Request, p *pending) {
	ctx, cancel := context.WithTimeout(r.Context(), a.opts.WaitTimeout)
	defer cancel()
	select {
	case o := <-p.result:
		if o.err != nil {
			a.failMessage(w, r, o.err)
			return
		}
		resp := waitResponse{ID: p.id, Channel: string(p.msg.Channel), Dropped: o.reason != "", Reason: o.reason, Replies: []reply{}}
		if len(o.chunks) > 0 {
			resp.Replies = append(resp.Replies, reply{Chunks: o.chunks, Files: wireFiles(o.files)})
		}
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(writeDeadline(filesSize(o.files))))
		writeJSON(w, http.StatusOK, resp)
	case <-ctx.Done():
		if r.Context().Err() != nil {
			return // the client went; the reply still becomes events
		}
		a.fail(w, r, context.DeadlineExceeded)
	}
}

// checkJSON wants an application/json body.
func checkJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}
