package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is what the session worker does with a message's attachments
// (docs/session.md, "Process"; docs/session.md, "read_attachment and image_generate references"): the read_attachment tool, which
// reads a file the host saved in /workspace/attachments (by safe basename,
// no-follow, bounded: text as text, a PNG, JPEG, GIF or WebP image as an
// image the model sees), image_generate's reference_images, and the
// turn's image budget that the turn's own images and the ones
// read_attachment shows share (docs/protocol.md, "Images and files": at most 8, 64 MiB in all).

// Bounds of read_attachment.
const (
	// maxAttachmentRead bounds the file read_attachment opens: the host
	// saves nothing larger.
	maxAttachmentRead = rtsandbox.MaxAttachmentBytes
	// textWindow is how many bytes of text one call returns; the result
	// stays within the session's tool-result budget.
	textWindow = 32 << 10
	// sniffBytes is how much of a file decides image or text.
	sniffBytes = 8 << 10
	// maxReferences bounds image_generate's reference_images (docs/session.md, "read_attachment and image_generate references").
	maxReferences = 4
)

// The model-facing results of read_attachment and image_generate's
// reference check: the reference's texts where it has them.
const (
	errInvalidAttachment = resultText("Invalid attachment name")
	errNotImageRef       = resultText("Not an image attachment")
	errTooManyRefs       = resultText("At most four references")
)

// readAttachmentSpec is read_attachment as the model sees it.
var readAttachmentSpec = rtsandbox.ToolSpec{
	Name: "read_attachment",
	Description: "Read a file a guest attached, from " + wire.SessionAttachments + " (use the names the message's attachments list gives). " +
		"A PNG, JPEG, GIF or WebP image is shown to you as an image; text comes back as text, 32 KiB at a time from offset (bytes).",
	Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The file name, without a directory."},` +
		`"offset":{"type":"integer","minimum":0,"description":"Where to start reading text, in bytes; 0 by default."}},"required":["name"],"additionalProperties":false}`),
}

// shownImages is a turn's image budget (docs/protocol.md, "Images and files"): the turn's own images and
// those read_attachment shows share rtsandbox.MaxImages and
// rtsandbox.MaxImagesTotal, so no model request carries more than the
// broker's image rule admits. pending holds what the running tool call
// showed until the agent files it under the call.
type shownImages struct {
	count, bytes int
	pending      []wire.Image
}

// newShownImages starts the budget with the turn's own images.
func newShownImages(turn []wire.Image) *shownImages {
	s := &shownImages{count: len(turn)}
	for _, im := range turn {
		s.bytes += base64.StdEncoding.DecodedLen(len(im.Data))
	}
	return s
}

// show adds an image of data when the budget allows.
func (s *shownImages) show(data []byte, mimeType string) bool {
	if s.count >= rtsandbox.MaxImages || s.bytes+len(data) > rtsandbox.MaxImagesTotal {
		return false
	}
	s.count++
	s.bytes += len(data)
	s.pending = append(s.pending, wire.Image{Data: base64.StdEncoding.EncodeToString(data), MIMEType: mimeType})
	return true
}

// take returns and forgets the pending images.
func (s *shownImages) take() []wire.Image {
	out := s.pending
	s.pending = nil
	return out
}

// attachmentsDir is the directory read_attachment reads.
func attachmentsDir(workspace string) string { return filepath.Join(workspace, "attachments") }

// attachmentName is a file name of the attachments directory as the model
// gives it: a safe name that is its own basename, else
// errInvalidAttachment.
func attachmentName(raw json.RawMessage) (string, error) {
	name, ok := baseName(raw)
	if !ok {
		return "", errInvalidAttachment
	}
	return name, nil
}

// openAttachment opens name in dir without following a link at either
// step and without blocking on a fifo, and requires a regular file of 1
// byte to limit (boundedFile of docs/session.md, "read_attachment and image_generate references").
func openAttachment(dir, name string, limit int64) (*os.File, int64, error) {
	dfd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer syscall.Close(dfd)
	return openRegularAt(dfd, name, limit)
}

// readAttachment is the read_attachment tool of one turn.
func (w *sessionWorker) readAttachment(shown *shownImages) *function {
	dir := attachmentsDir(w.o.Workspace)
	return &function{spec: readAttachmentSpec, run: func(_ context.Context, in toolInput) (string, error) {
		name, err := attachmentName(in.fields["name"])
		if err != nil {
			return string(errInvalidAttachment) + ": give a file name from " + wire.SessionAttachments + ", without a directory.", nil
		}
		offset := int64(0)
		if raw, ok := in.fields["offset"]; ok {
			if err := json.Unmarshal(raw, &offset); err != nil || offset < 0 {
				return "Invalid offset: give a whole number of bytes, 0 or more.", nil
			}
		}
		f, size, err := openAttachment(dir, name, maxAttachmentRead)
		if err != nil {
			w.log.Info(logToolFailed, "tool", readAttachmentSpec.Name, "error", rtsandbox.PrefixUTF16(err.Error(), 2000))
			return fmt.Sprintf("No readable attachment named %q: it is missing, not a regular file, empty or larger than 25 MB.", name), nil
		}
		defer f.Close()
		return readOpened(f, name, size, offset, shown)
	}}
}

// readOpened is read_attachment on an opened file of size bytes: an image
// is shown when the turn's budget allows; text is returned from offset, a
// window at a time; anything else is named as binary.
func readOpened(f *os.File, name string, size, offset int64, shown *shownImages) (string, error) {
	head := make([]byte, min(size, sniffBytes))
	if _, err := io.ReadFull(f, head); err != nil {
		return "", err
	}
	if mimeType, ok := rtsandbox.SniffImage(head); ok {
		return showImage(f, name, size, mimeType, shown)
	}
	if !looksText(head, int64(len(head)) == size) {
		return fmt.Sprintf("%s is a binary file of %d bytes; it cannot be shown as text.", name, size), nil
	}
	if offset >= size {
		return fmt.Sprintf("%s has %d bytes; offset %d is past its end.", name, size, offset), nil
	}
	buf := make([]byte, min(textWindow, size-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && err != io.EOF {
		return "", err
	}
	text := strings.ToValidUTF8(string(buf[:n]), "\uFFFD")
	end := offset + int64(n)
	out := fmt.Sprintf("%s: bytes %d to %d of %d.\n\n%s", name, offset, end, size, text)
	if end < size {
		out += fmt.Sprintf("\n\n[%d bytes more: call read_attachment with offset %d.]", size-end, end)
	}
	return out, nil
}

// looksText reports whether the start of a file reads as UTF-8 text: no
// NUL byte and valid UTF-8, but for a character the cut of a partial head
// split at its end.
func looksText(head []byte, whole bool) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	for i := 0; i < utf8.UTFMax-1 && !whole && len(head) > 0 && !utf8.Valid(head); i++ {
		head = head[:len(head)-1]
	}
	return utf8.Valid(head)
}

// showImage reads a whole image (at most 20 MiB, exactly its size) and
// shows it when the turn's image budget allows.
func showImage(f *os.File, name string, size int64, mimeType string, shown *shownImages) (string, error) {
	if size > rtsandbox.MaxImageBytes {
		return fmt.Sprintf("%s is an image (%s, %d bytes) larger than 20 MB: it cannot be shown.", name, mimeType, size), nil
	}
	data, err := readWhole(f, size)
	if err != nil {
		return "", err
	}
	if !shown.show(data, mimeType) {
		return fmt.Sprintf("%s is an image (%s, %d bytes); it cannot be shown: this turn already shows %d images or %d MB.", name, mimeType, size, rtsandbox.MaxImages, rtsandbox.MaxImagesTotal>>20), nil
	}
	return fmt.Sprintf("%s is an image (%s, %d bytes); it is shown to you with this result.", name, mimeType, size), nil
}

// referenceImages is image_generate's special case (docs/session.md, "read_attachment and image_generate references"): each
// name of reference_images (at most four; safe basenames with an image
// extension) is read from the attachments directory (at most 20 MiB,
// no-follow), must be a real image, and is replaced by {data, mimeType}.
// Input without reference_images is returned as it is. A refusal is a
// resultText the model reads.
func referenceImages(workspace string, in toolInput) (json.RawMessage, error) {
	raw, present := in.fields["reference_images"]
	if !present {
		return in.raw, nil
	}
	items, ok := array(raw)
	if !ok || len(items) > maxReferences {
		return nil, errTooManyRefs
	}
	images := make([]wire.Image, 0, len(items))
	for _, item := range items {
		name, err := attachmentName(item)
		if err != nil {
			return nil, err
		}
		switch strings.ToLower(path.Ext(name)) {
		case ".png", ".jpg", ".jpeg", ".webp", ".gif":
		default:
			return nil, errNotImageRef
		}
		data, err := readReference(workspace, name)
		if err != nil {
			return nil, err
		}
		mimeType, ok := rtsandbox.SniffImage(data)
		if !ok {
			return nil, errNotImageRef
		}
		images = append(images, wire.Image{Data: base64.StdEncoding.EncodeToString(data), MIMEType: mimeType})
	}
	if err := wire.ValidateImages(images); err != nil {
		return nil, errNotImageRef
	}
	fields := make(map[string]any, len(in.fields))
	for k, v := range in.fields {
		fields[k] = v
	}
	fields["reference_images"] = images
	return json.Marshal(fields)
}

// readReference reads one reference image whole: 1 byte to 20 MiB,
// regular, no-follow. A file that cannot be read is errInvalidAttachment.
func readReference(workspace, name string) ([]byte, error) {
	f, size, err := openAttachment(attachmentsDir(workspace), name, rtsandbox.MaxImageBytes)
	if err != nil {
		return nil, errors.Join(errInvalidAttachment, err)
	}
	defer f.Close()
	data, err := readWhole(f, size)
	if err != nil {
		return nil, errors.Join(errInvalidAttachment, err)
	}
	return data, nil
}

// imageGenerate is the broker tool whose reference_images are attachments.
const imageGenerate = "image_generate"

// refusal turns a resultText into the tool's answer to the model; any
// other error fails the call.
func refusal(err error) (string, error) {
	var rt resultText
	if errors.As(err, &rt) {
		return string(rt), nil
	}
	return "", err
}
