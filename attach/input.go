package attach

import (
	"cmp"
	"fmt"
	"mime"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the pure half of a session turn's attachment collection
// (docs/session.md, "Attachments in, reply files out"): what a file is (Classify, ContentType), which images the model
// sees (ImageBudget), and how the turn words what happened, for the model
// (Block) and for the guest (Notice). Package session downloads and writes.

// Reason says why an attachment was refused, or why a saved image is not
// shown to the model. Each has a fixed guest text (rtsandbox.Attach…Reason).
type Reason int

const (
	ReasonNone       Reason = iota
	ReasonTooMany           // position ≥ rtsandbox.MaxAttachments
	ReasonTooLarge          // declared or counted size over 25 MiB
	ReasonTotal             // the message's bytes passed 50 MiB
	ReasonNotImage          // claims to be an image and is none of the four
	ReasonEmpty             // zero bytes
	ReasonDownload          // the fetch failed (status, network, policy)
	ReasonStore             // the file could not be created (a planted name)
	ReasonImageLimit        // saved; the message's image budget was spent
	ReasonImageSize         // saved; over rtsandbox.MaxImageBytes
	// ReasonNoRoom: the file would pass what the channel's workspace
	// leaves its inputs (the reserve its turns need stays free).
	ReasonNoRoom
)

// GuestText is the reason's fixed text.
func (r Reason) GuestText() string {
	switch r {
	case ReasonTooMany:
		return fmt.Sprintf(rtsandbox.AttachTooManyFormat, rtsandbox.MaxAttachments)
	case ReasonTooLarge:
		return fmt.Sprintf(rtsandbox.AttachTooLargeFormat, rtsandbox.MaxAttachmentBytes>>20)
	case ReasonTotal:
		return fmt.Sprintf(rtsandbox.AttachTotalFormat, rtsandbox.MaxAttachmentsTotal>>20)
	case ReasonNotImage:
		return rtsandbox.AttachNotImageReason
	case ReasonEmpty:
		return rtsandbox.AttachEmptyReason
	case ReasonDownload:
		return rtsandbox.AttachDownloadReason
	case ReasonStore:
		return rtsandbox.AttachStoreReason
	case ReasonImageLimit:
		return fmt.Sprintf(rtsandbox.AttachImageLimitFormat, rtsandbox.MaxImages, rtsandbox.MaxImagesTotal>>20)
	case ReasonImageSize:
		return fmt.Sprintf(rtsandbox.AttachImageSizeFormat, rtsandbox.MaxImageBytes>>20)
	case ReasonNoRoom:
		return rtsandbox.AttachNoRoomReason
	}
	return ""
}

// Ref is where an attachment came from: its 0-based index within its own
// list, and whether that list is the replied-to message's.
type Ref struct {
	Index         int
	FromReference bool
}

// Saved is an attachment written to the channel's attachments directory.
type Saved struct {
	Ref
	// File is its name on disk (FileName), as the worker sees it under
	// wire.SessionAttachments.
	File        string
	ContentType string
	Size        int
	// Image is true when the model sees it as an image part; otherwise
	// NotShown says why an image is not shown (ReasonNone for other files).
	Image    bool
	NotShown Reason
}

// Failure is an attachment that was not saved.
type Failure struct {
	Ref
	// Name is the guest's name, sanitised (SanitizeName).
	Name   string
	Reason Reason
	// Detail is the reference's reason for the model ("larger than 25 MB
	// (27262976 bytes)", "download failed with HTTP 404"); "" means the
	// reason's guest text.
	Detail string
}

// maxContentType bounds a recorded content type, in bytes.
const maxContentType = 127

// octetStream is the content type of a file nobody typed (docs/session.md, "Attachments in, reply files out").
const octetStream = "application/octet-stream"

// ContentType is the type recorded for a file (docs/session.md, "Attachments in, reply files out"): the declared
// type, else the fetched response's, else application/octet-stream. Each
// is reduced to its lowercased media type, without parameters, and taken
// only when it is a well-formed type/subtype of at most 127 bytes: the
// value is the guest's (or a remote server's) and reaches the model.
func ContentType(declared, fetched string) string {
	for _, t := range []string{declared, fetched} {
		if mt := cleanMediaType(t); mt != "" {
			return mt
		}
	}
	return octetStream
}

// cleanMediaType is t's media type when it is well formed, else "".
func cleanMediaType(t string) string {
	mt, _, err := mime.ParseMediaType(t)
	if err != nil || len(mt) > maxContentType || strings.Count(mt, "/") != 1 {
		return ""
	}
	// ParseMediaType lowercases, but its token rule lets separators such
	// as '{' through ("0/{"); a media type's names take only RFC 6838's
	// restricted-name characters.
	for _, r := range mt {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("/!#$&^_.+-", r)) {
			return ""
		}
	}
	return mt
}

// imageExts are the file-name extensions that claim one of the four types.
var imageExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true}

// ClaimsImage reports whether a file says it is one of the four image
// types: by its declared media type or by its name's extension (any case).
func ClaimsImage(name, declared string) bool {
	return wire.ValidImageType(mediaType(declared)) || imageExts[strings.ToLower(path.Ext(name))]
}

// Classify decides what a file's bytes are: the sniffed image type, or ""
// for a file that is no image. A file that claims to be an image
// (ClaimsImage) and sniffs as none is refused with ReasonNotImage: an
// HTML page named x.png, declared image/png or not, never reaches the
// worker. A real image is taken with its sniffed type whatever it was
// labelled (a PNG named x.jpg is a PNG).
func Classify(name, declared string, data []byte) (mimeType string, refused Reason) {
	sniffed, ok := SniffImage(data)
	if ok {
		return sniffed, ReasonNone
	}
	if ClaimsImage(name, declared) {
		return "", ReasonNotImage
	}
	return "", ReasonNone
}

// ImageBudget picks the images of a message the model sees: at most
// rtsandbox.MaxImages, each at most rtsandbox.MaxImageBytes, and
// rtsandbox.MaxImagesTotal in all (docs/protocol.md, "Images and files"). The zero value is an empty
// budget.
type ImageBudget struct {
	count, total int
}

// Take checks one image of its sniffed type and, when it fits, counts it
// and returns it encoded. Otherwise it returns why it is not shown.
func (b *ImageBudget) Take(data []byte, mimeType string) (wire.Image, Reason) {
	if len(data) > rtsandbox.MaxImageBytes {
		return wire.Image{}, ReasonImageSize
	}
	if b.count >= rtsandbox.MaxImages || b.total+len(data) > rtsandbox.MaxImagesTotal {
		return wire.Image{}, ReasonImageLimit
	}
	im, err := CheckImage(data, mimeType)
	if err != nil {
		return wire.Image{}, ReasonNotImage // cannot happen for a sniffed image of ≥ 1 byte
	}
	b.count++
	b.total += len(data)
	return im, ReasonNone
}

// MaxBlock bounds the attachments block in UTF-16 units: 20 file lines
// and 21 failure lines of at most ~300 units each fit well inside it.
const MaxBlock = 16000

// Block is the attachments block the model reads after the guest's text:
// the saved files as the worker finds them in wire.SessionAttachments
// (name, type, size, whether shown as an image) and every failure with
// its reason. "" when there is nothing to say. It is at most MaxBlock
// units. Guest-chosen names appear quoted, so they read as data.
func Block(saved []Saved, failures []Failure) string {
	if len(saved) == 0 && len(failures) == 0 {
		return ""
	}
	var b strings.Builder
	if len(saved) > 0 {
		fmt.Fprintf(&b, "[Attachments of this message, saved in %s; read one with the read_attachment tool:]", wire.SessionAttachments)
		for _, s := range saved {
			fmt.Fprintf(&b, "\n- %s%s: %s, %d bytes", strconv.Quote(s.File), refSuffix(s.Ref), s.ContentType, s.Size)
			switch {
			case s.Image:
				b.WriteString("; shown to you as an image")
			case s.NotShown != ReasonNone:
				b.WriteString("; " + s.NotShown.GuestText())
			}
		}
	}
	if len(failures) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString("[Attachments not saved:]")
		for _, f := range collapse(failures) {
			reason := f.Detail
			if reason == "" {
				reason = f.Reason.GuestText()
			}
			fmt.Fprintf(&b, "\n- %s %s: %s", position(f), strconv.Quote(f.Name), reason)
		}
	}
	return rtsandbox.PrefixUTF16(b.String(), MaxBlock)
}

// refSuffix marks a file of the replied-to message.
func refSuffix(r Ref) string {
	if r.FromReference {
		return " (from the replied-to message)"
	}
	return ""
}

// position names a failure for the model: "attachment 3", or a range.
func position(f failureLine) string {
	of := ""
	if f.FromReference {
		of = rtsandbox.AttachmentOfReference
	}
	if f.last > f.Index {
		return fmt.Sprintf("attachments %d to %d%s", f.Index+1, f.last+1, of)
	}
	return fmt.Sprintf("attachment %d%s", f.Index+1, of)
}

// failureLine is a failure, or a run of ReasonTooMany failures of one
// list collapsed into one line (Index to last).
type failureLine struct {
	Failure
	last int
}

// collapse folds consecutive ReasonTooMany failures of one list into one
// line: past the limit the guest may have sent many, and each says the
// same.
func collapse(failures []Failure) []failureLine {
	var out []failureLine
	for _, f := range failures {
		if n := len(out); n > 0 && f.Reason == ReasonTooMany {
			prev := &out[n-1]
			if prev.Reason == ReasonTooMany && prev.FromReference == f.FromReference && prev.last+1 == f.Index {
				prev.last = f.Index
				continue
			}
		}
		out = append(out, failureLine{Failure: f, last: f.Index})
	}
	return out
}

// Notice is the fixed text that ends the reply when a file was refused or
// a saved image is not shown (rtsandbox.AttachmentsNoticeText, then one
// line per file or run of files, by position and fixed reason); "" when
// there is none. It never quotes a guest-chosen name.
func Notice(saved []Saved, failures []Failure) string {
	type line struct {
		Ref
		last   int
		reason Reason
	}
	var lines []line
	for _, f := range collapse(failures) {
		lines = append(lines, line{f.Ref, f.last, f.Reason})
	}
	for _, s := range saved {
		if !s.Image && s.NotShown != ReasonNone {
			lines = append(lines, line{s.Ref, s.Index, s.NotShown})
		}
	}
	if len(lines) == 0 {
		return ""
	}
	out := []string{rtsandbox.AttachmentsNoticeText}
	slices.SortStableFunc(lines, func(a, b line) int { return byPosition(a.Ref, b.Ref) })
	for _, l := range lines {
		of := ""
		if l.FromReference {
			of = rtsandbox.AttachmentOfReference
		}
		if l.last > l.Index {
			out = append(out, fmt.Sprintf(rtsandbox.AttachmentRangeFormat, l.Index+1, l.last+1, of, l.reason.GuestText()))
			continue
		}
		out = append(out, fmt.Sprintf(rtsandbox.AttachmentLineFormat, l.Index+1, of, l.reason.GuestText()))
	}
	return strings.Join(out, "\n")
}

// byPosition orders refs as the guest attached them: the message's files,
// then the replied-to message's, each by index.
func byPosition(a, b Ref) int {
	if a.FromReference != b.FromReference {
		if a.FromReference {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.Index, b.Index)
}
