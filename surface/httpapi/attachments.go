package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
)

// Attachments in (docs/session.md, "Attachments in, reply files out"): a message may carry
//
//	"attachments": [{"name": string, "mime_type": string, "data": base64}]
//
// with data in standard padded base64. The bounds hold before anything is
// decoded: at most rtsandbox.MaxAttachments (20) entries, each at most
// rtsandbox.MaxAttachmentBytes (25 MiB) decoded, rtsandbox.MaxAttachmentsTotal
// (50 MiB) in all, each checked on the base64 text's length and alphabet
// before it is decoded. The name and the declared type are the guest's:
// the name passes untouched (the runtime sanitises it, docs/session.md, "Attachments in, reply files out"; the
// surface never builds a path from it) and the type is sniffed again by
// the runtime. They become router.Message.Files with Data set.
//
// Memory and time: a body may reach Options.MaxRequestBytes only while it
// holds one of Options.MaxUploads upload slots (taken once the body passes
// MaxBodyBytes; none free → 503), which also gives it uploadTimeout to
// arrive instead of the server's 30 s; the decoded bytes of every message
// the API holds, decoding or waiting in a channel's queue, are bounded by
// Options.MaxHeldAttachmentBytes (passing it → 503).

// Bounds of the attachments JSON.
const (
	// maxAttachmentName bounds a name, in UTF-16 units (a safe name's
	// length, docs/protocol.md, "The session protocol"; the runtime keeps the last 120 units).
	maxAttachmentName = rtsandbox.MaxSafeNameLen
	// maxMIMEType bounds a declared type, in bytes.
	maxMIMEType = 255
	// maxAttachmentChars is the base64 length of MaxAttachmentBytes.
	maxAttachmentChars = (rtsandbox.MaxAttachmentBytes + 2) / 3 * 4
	// uploadTimeout is how long a body holding an upload slot may take
	// to arrive, counted from when it took the slot: the largest body at
	// about 240 KiB/s.
	uploadTimeout = 5 * time.Minute
)

// errUploadsBusy ends the read of a body past MaxBodyBytes when every
// upload slot is taken: 503, not the guest's input at fault.
var errUploadsBusy = errors.New("httpapi: every upload slot is taken")

// attachmentRequest is one entry of "attachments".
type attachmentRequest struct {
	name, mimeType string
	data           []byte
	sawName        bool
	sawType        bool
	sawData        bool
}

// attachments reads the "attachments" array into dst, checking every
// bound before it decodes an entry's data; each entry's decoded bytes
// are reserved in res first.
func (d *decoder) attachments(dst *[]rtsandbox.Attachment, res *reservation) string {
	tok, err := d.dec.Token()
	if err != nil {
		return d.syntax(err)
	}
	if tok != json.Delim('[') {
		return "attachments: must be an array"
	}
	total := 0
	for i := 0; d.dec.More(); i++ {
		if i == rtsandbox.MaxAttachments {
			return "attachments: at most " + strconv.Itoa(rtsandbox.MaxAttachments) + " entries"
		}
		path := "attachments[" + strconv.Itoa(i) + "]"
		var a attachmentRequest
		msg := d.object(path, func(key string) string {
			switch key {
			case "name":
				a.sawName = true
				return d.str(path+".name", &a.name)
			case "mime_type":
				a.sawType = true
				return d.str(path+".mime_type", &a.mimeType)
			case "data":
				a.sawData = true
				return d.attachmentData(path+".data", &a.data, &total, res)
			}
			return unknown(path + "." + key)
		})
		if msg == "" {
			msg = a.check(path)
		}
		if msg != "" {
			return msg
		}
		*dst = append(*dst, rtsandbox.Attachment{Name: a.name, ContentType: a.mimeType, Size: int64(len(a.data)), Data: a.data})
	}
	if _, err := d.dec.Token(); err != nil { // the closing bracket
		return d.syntax(err)
	}
	return ""
}

// check wants every key of an entry and a sound name and type.
func (a *attachmentRequest) check(path string) string {
	switch {
	case !a.sawName || a.name == "" || !utf8.ValidString(a.name) || rtsandbox.UTF16Len(a.name) > maxAttachmentName:
		return path + ".name: required, 1 to 255 characters of valid UTF-8"
	case !a.sawType || !validMIMEType(a.mimeType):
		return path + ".mime_type: required, a MIME type such as image/png (type/subtype, at most 255 characters)"
	case !a.sawData:
		return path + ".data: required"
	}
	return ""
}

// validMIMEType wants type/subtype, with parameters if any.
func validMIMEType(s string) bool {
	if len(s) > maxMIMEType {
		return false
	}
	mt, _, err := mime.ParseMediaType(s)
	typ, sub, ok := strings.Cut(mt, "/")
	return err == nil && ok && typ != "" && sub != ""
}

// attachmentData reads one entry's base64 data into dst: the text is
// bounded (the entry's size, the running total) and checked before it is
// decoded, and its decoded size is reserved in res before decoding.
func (d *decoder) attachmentData(path string, dst *[]byte, total *int, res *reservation) string {
	before := d.dec.InputOffset()
	tok, err := d.dec.Token()
	if err != nil {
		return d.syntax(err)
	}
	d.data += d.dec.InputOffset() - before
	s, ok := tok.(string)
	if !ok {
		return path + ": must be a string"
	}
	n, ok := rtsandbox.Base64Size(s, rtsandbox.MaxAttachmentBytes)
	switch {
	case len(s) > maxAttachmentChars || (!ok && n > 0):
		return path + ": at most 25 MiB decoded"
	case !ok:
		return path + ": must be standard base64 with padding (A-Z a-z 0-9 + /, a multiple of 4 characters, = only at the end)"
	case n == 0:
		return path + ": must not be empty"
	case *total+n > rtsandbox.MaxAttachmentsTotal:
		return "attachments: at most 50 MiB decoded in total"
	case !res.take(int64(n)):
		d.held = true
		return textAttachmentsHeld
	}
	*total += n
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil { // the alphabet and length were checked: cannot happen
		return path + ": must be standard base64 with padding (A-Z a-z 0-9 + /, a multiple of 4 characters, = only at the end)"
	}
	*dst = data
	return ""
}

// budget bounds bytes held across requests.
type budget struct {
	mu        sync.Mutex
	used, max int64
}

func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

// inUse returns the bytes held (tests).
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// reservation is one request's share of a budget, given back by release
// unless handed on (moved to a pending message).
type reservation struct {
	b *budget
	n int64
}

func (r *reservation) take(n int64) bool {
	if !r.b.take(n) {
		return false
	}
	r.n += n
	return true
}

// move hands the reserved bytes on: the caller gives them back later.
func (r *reservation) move() int64 {
	n := r.n
	r.n = 0
	return n
}

func (r *reservation) release() { r.b.give(r.move()) }

// uploadMeter passes a body through and, once more than MaxBodyBytes of
// it were read, takes an upload slot and calls extend (which gives the
// body uploadTimeout to arrive); when no slot is free the read fails
// with errUploadsBusy. release frees the slot.
type uploadMeter struct {
	r      io.Reader
	slots  chan struct{}
	extend func()
	n      int64
	held   bool
	err    error
}

func (m *uploadMeter) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	n, err := m.r.Read(p)
	m.n += int64(n)
	if m.n > MaxBodyBytes && !m.held {
		select {
		case m.slots <- struct{}{}:
			m.held = true
			if m.extend != nil {
				m.extend()
			}
		default:
			m.err = errUploadsBusy
			return n, m.err
		}
	}
	return n, err
}

func (m *uploadMeter) release() {
	if m.held {
		<-m.slots
		m.held = false
	}
}
