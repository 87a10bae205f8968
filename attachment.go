package rtsandbox

import (
	"bytes"
	"strings"
)

// Files that cross the host's surfaces (docs/protocol.md, "Images and files"; docs/session.md, "Attachments in, reply files out"): what
// a guest attached to a message on the way in, and the files a turn's
// reply carries on the way out. The surfaces fill an Attachment and post a
// File; the runtime fetches, checks and writes the one and validates the
// other (package attach), so no surface decides what is safe.

// Attachment is one file a guest attached to a message (or to the message
// it replies to), as the surface received it. Every field is untrusted:
// the name and the declared type and size are the guest's; the runtime
// sniffs the real type and measures the real size before it uses any.
type Attachment struct {
	// Name is the guest's file name, unsanitised.
	Name string
	// ContentType is the declared MIME type; "" when none was declared.
	ContentType string
	// Size is the declared size in bytes; 0 when unknown.
	Size int64
	// URL is where the host fetches the bytes (Discord's CDN), always
	// through package safefetch: public addresses only, bounded, no
	// credentials. "" when Data holds the bytes.
	URL string
	// Data holds the bytes when the surface received them inline (the
	// HTTP API's base64 attachments, decoded and bounded by the surface).
	Data []byte
	// FromReference marks an attachment of the replied-to message.
	FromReference bool
}

// TurnInput is what one admitted guest message gives a turn.
type TurnInput struct {
	// MessageID is the surface's id of the message; attachment files are
	// named after it (docs/session.md, "Attachments in, reply files out": ^[a-zA-Z0-9_-]{1,160}$, or the runtime
	// uses a fresh id of its own).
	MessageID string
	// Text is the model input: the untrusted quote prefix and the
	// message text. It never carries the sealed mode's attachments
	// notice; a runtime that cannot take attachments adds it.
	Text string
	// Attachments are the message's files, then the replied-to
	// message's; nil for none.
	Attachments []Attachment
	// Attached counts the message's own files as the surface counted them
	// (router.Message.Attachments); Attachments may hold fewer, when the
	// surface cannot hand them over. SealedText reads it.
	Attached int
}

// File is one decoded reply file: a safe name (ValidSafeName) and its
// bytes, within the bounds of docs/protocol.md, "Images and files" (MaxReplyFiles, MaxReplyFileBytes,
// MaxReplyFilesTotal).
type File struct {
	Name string
	Data []byte
}

// Bounds of a message's attachments (docs/session.md, "Attachments in, reply files out"): at most
// MaxAttachments files (the message's and the replied-to message's
// together), each at most MaxAttachmentBytes, MaxAttachmentsTotal in all.
// A surface that receives the bytes inline (the HTTP API) refuses more
// before decoding; the runtime checks them again on what it fetched.
const (
	MaxAttachments      = 20
	MaxAttachmentBytes  = 25 << 20
	MaxAttachmentsTotal = 50 << 20
)

// Base64Size returns the decoded size of data when data is standard
// padded base64 (the form of docs/protocol.md, "Images and files": a multiple of 4 characters of the
// standard alphabet, at most two '=' at the end) of at most maxDecoded
// bytes; ok is false otherwise. It reads the text only, so a caller can
// refuse oversized or malformed input before decoding any of it. A table
// loop rather than a regexp: reply files reach 50 MiB and are checked
// twice, and a regexp is ~100 MB/s.
func Base64Size(data string, maxDecoded int) (n int, ok bool) {
	maxLen := (maxDecoded + 2) / 3 * 4
	if len(data) > maxLen || len(data)%4 != 0 {
		return 0, false
	}
	body := strings.TrimSuffix(strings.TrimSuffix(data, "="), "=")
	for i := 0; i < len(body); i++ {
		if !base64Alphabet[body[i]] {
			return 0, false
		}
	}
	n = len(data)/4*3 - (len(data) - len(body))
	return n, n <= maxDecoded
}

// base64Alphabet marks the bytes of the standard base64 alphabet.
var base64Alphabet = func() (t [256]bool) {
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" {
		t[c] = true
	}
	return t
}()

// SniffImage returns the image type of data from its magic bytes alone,
// and ok false when data starts like none of the four types of docs/protocol.md, "Images and files"
// (PNG, JPEG, GIF 87a/89a, WebP RIFF…WEBP). A file name or a declared
// type never decides it. The host's checks (package attach) and the
// worker's read_attachment share it.
func SniffImage(data []byte) (mimeType string, ok bool) {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return MIMEPNG, true
	case bytes.HasPrefix(data, []byte{0xFF, 0xD8, 0xFF}):
		return MIMEJPEG, true
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return MIMEGIF, true
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return MIMEWebP, true
	}
	return "", false
}
