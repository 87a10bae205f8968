package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/attach"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/wire"
	"golang.org/x/sys/unix"
)

// This file is the host-side collection of a message's attachments
// (docs/session.md, "Attachments in, reply files out"): each is fetched through safefetch or taken from the
// surface's bytes, bounded, named after its message, written exclusively
// and without following a link into the channel's attachments directory,
// and, when it is a real image within the docs/protocol.md, "Images and files" budget, handed to the
// model as an image part. The model's prompt gets a block naming what was
// saved and what was refused; the guest's reply gets a fixed notice of
// what was refused (attach.Block, attach.Notice).

// attachmentFetchTimeout bounds one attachment's download (the turn's
// deadline bounds them all).
const attachmentFetchTimeout = safefetch.DefaultTimeout

// refPrefixSuffix ends the file-name prefix of the replied-to message's
// attachments (docs/session.md, "Attachments in, reply files out").
const refPrefixSuffix = "-ref"

// collected is what a message's attachments give its turn.
type collected struct {
	saved    []attach.Saved
	failures []attach.Failure
	images   []wire.Image
}

var _ rtsandbox.Runtime = (*Runtime)(nil)

// Run runs a turn of the message's input (rtsandbox.Runtime): RunInput,
// whose reply files the answer carries. The session worker streams no
// text to the host yet, so onText is never called.
func (r *Runtime) Run(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, _ func(answer int, delta string)) (rtsandbox.Answer, error) {
	res, err := r.RunInput(ctx, b, in)
	if err != nil {
		return rtsandbox.Answer{}, err
	}
	return rtsandbox.Answer{Reply: rtsandbox.Reply{OK: true, Text: res.Text}, Files: res.Files}, nil
}

// RunInput runs the turn of one guest message with its attachments (docs/session.md, "Attachments in, reply files out")
// and returns the text and the reply files. After the channel is taken,
// and before its worker is started, the attachments are collected: the
// saved ones are named in a block after the message's text (the whole at
// most 100,000 units; the guest's text is cut to make room), real images
// within the docs/protocol.md, "Images and files" budget go as the turn's images. When a file was refused
// (or a saved image is not shown), the reply ends with the fixed notice
// of attach.Notice, which the model cannot leave out; a message with no
// text of its own and no saved file gets that notice alone, without a
// model call. Errors are Turn's; a failure to prepare the attachments
// directory fails the turn like any other.
func (r *Runtime) RunInput(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput) (TurnResult, error) {
	req := TurnRequest{Binding: b, Text: in.Text}
	if len(in.Attachments) == 0 {
		return r.Turn(ctx, req)
	}
	var notice string
	res, err := r.turnWith(ctx, req, func(t *turn, req *TurnRequest) (bool, error) {
		c, err := r.collect(t, in)
		if err != nil {
			return false, err
		}
		notice = attach.Notice(c.saved, c.failures)
		if strings.TrimSpace(in.Text) == "" && len(c.saved) == 0 {
			return false, nil
		}
		req.Text, req.Images = withBlock(in.Text, attach.Block(c.saved, c.failures)), c.images
		return true, nil
	})
	if err != nil {
		return TurnResult{}, err
	}
	switch {
	case notice == "":
	case res.Text == "":
		res.Text = notice
	default:
		res.Text += "\n\n" + notice
	}
	return res, nil
}

// withBlock is text, a blank line and block, at most
// rtsandbox.MaxSessionText units: the block is bounded (attach.MaxBlock),
// so the guest's text is what gets cut, with a marker.
func withBlock(text, block string) string {
	const sep, cut = "\n\n", " […]"
	if block == "" {
		return text
	}
	room := rtsandbox.MaxSessionText - rtsandbox.UTF16Len(sep+block)
	if rtsandbox.UTF16Len(text) > room {
		text = rtsandbox.PrefixUTF16(text, room-rtsandbox.UTF16Len(cut)) + cut
	}
	if strings.TrimSpace(text) == "" {
		return block
	}
	return text + sep + block
}

// collect is docs/session.md, "Attachments in, reply files out" for the admitted turn t: the attachments directory is
// owned and opened without following a link, then every reference is
// taken in order. Only the turn ending and the directory failing are
// errors; each file's problem is a failure of its own.
func (r *Runtime) collect(t *turn, in rtsandbox.TurnInput) (collected, error) {
	dirfd, err := r.attachmentsDir(t.ctx, t.channel)
	if err != nil {
		return collected{}, fmt.Errorf("attachments directory: %w", err)
	}
	defer unix.Close(dirfd)
	room, err := r.inputRoom(t.channel)
	if err != nil {
		return collected{}, fmt.Errorf("attachments directory: %w", err)
	}
	prefix := r.attachmentPrefix(t, in.MessageID)
	c := &collection{r: r, t: t, dirfd: dirfd, room: inputBudget{room}}
	refs := referenceList(in.Attachments)
	for pos, ref := range refs {
		if t.ctx.Err() != nil {
			return collected{}, context.Cause(t.ctx)
		}
		p := prefix
		if ref.at.FromReference {
			p += refPrefixSuffix
		}
		if err := c.take(pos, p, ref); err != nil {
			return collected{}, err
		}
	}
	return c.out, nil
}

// reference is one attachment with its place (docs/session.md, "Attachments in, reply files out").
type reference struct {
	at attach.Ref
	rtsandbox.Attachment
}

// referenceList is the message's attachments, then the referenced
// message's, each with its index within its own list.
func referenceList(all []rtsandbox.Attachment) []reference {
	out := make([]reference, 0, len(all))
	for _, fromRef := range []bool{false, true} {
		i := 0
		for _, a := range all {
			if a.FromReference == fromRef {
				out = append(out, reference{attach.Ref{Index: i, FromReference: fromRef}, a})
				i++
			}
		}
	}
	return out
}

// attachmentPrefix is the message id when it makes a valid prefix, also
// with refPrefixSuffix (^[a-zA-Z0-9_-]{1,160}$, docs/session.md, "Attachments in, reply files out"); otherwise a
// fresh id of the runtime's, which the operator log records.
func (r *Runtime) attachmentPrefix(t *turn, messageID string) string {
	if attach.ValidPrefix(messageID + refPrefixSuffix) {
		return messageID
	}
	fresh := "m" + newTurnID()
	r.s.Logger.Info("attachment message id replaced", "channel", string(t.channel), "turn_id", t.id,
		"message_id", r.scrub(strconv.Quote(messageID), 200), "prefix", fresh)
	return fresh
}

// attachmentsDir makes <workspace>/attachments a real directory of the
// worker's (docs/session.md, "Directories and defences" ownDirectory: a planted link or file is replaced, never
// followed) and opens it through the workspace's descriptor, without
// following a link at either step.
func (r *Runtime) attachmentsDir(ctx context.Context, channel rtsandbox.ChannelKey) (int, error) {
	d, err := r.s.prepare(ctx, channel)
	if err != nil {
		return -1, err
	}
	wsfd, err := openDir(d.workspace)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(wsfd)
	if err := r.s.ownDirectoryAt(wsfd, attachmentName); err != nil {
		return -1, r.s.disk.classify(err)
	}
	fd, err := openAt(wsfd, attachmentName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	return fd, nil
}

// collection is one message's collection in progress.
type collection struct {
	r      *Runtime
	t      *turn
	dirfd  int
	total  int // bytes downloaded, refused ones included (docs/session.md, "Attachments in, reply files out")
	room   inputBudget
	budget attach.ImageBudget
	out    collected
}

// take is docs/session.md, "Attachments in, reply files out" for the reference at overall position pos. It
// returns an error only when the turn ended.
func (c *collection) take(pos int, prefix string, ref reference) error {
	fail := func(reason attach.Reason, detail string) {
		c.out.failures = append(c.out.failures, attach.Failure{Ref: ref.at, Name: attach.SanitizeName(ref.Name), Reason: reason, Detail: detail})
	}
	switch {
	case pos >= rtsandbox.MaxAttachments:
		fail(attach.ReasonTooMany, "too many attachments")
		return nil
	case ref.Size > rtsandbox.MaxAttachmentBytes:
		fail(attach.ReasonTooLarge, tooLarge(ref.Size))
		return nil
	}
	data, fetchedType, err := c.download(ref.Attachment)
	if err != nil {
		if c.t.ctx.Err() != nil {
			return context.Cause(c.t.ctx)
		}
		reason, detail := downloadFailure(err)
		c.r.s.Logger.Info("attachment not downloaded", "channel", string(c.t.channel), "turn_id", c.t.id,
			"position", pos, "err", c.r.scrub(err.Error(), maxLogMessage))
		fail(reason, detail)
		return nil
	}
	c.total += len(data)
	switch {
	case len(data) > rtsandbox.MaxAttachmentBytes:
		fail(attach.ReasonTooLarge, tooLarge(int64(len(data))))
		return nil
	case c.total > rtsandbox.MaxAttachmentsTotal:
		fail(attach.ReasonTotal, "attachments exceed 50 MB in total")
		return nil
	case len(data) == 0:
		fail(attach.ReasonEmpty, "the file is empty")
		return nil
	}
	mimeType, refused := attach.Classify(ref.Name, ref.ContentType, data)
	if refused != attach.ReasonNone {
		fail(refused, "")
		return nil
	}
	if !c.room.take(len(data)) {
		c.r.s.Logger.Warn("attachment refused: the workspace keeps its reserve for the channel's turns", "channel", string(c.t.channel),
			"turn_id", c.t.id, "position", pos, "size", len(data), "room_bytes", c.room.room.Bytes, "room_files", c.room.room.Files)
		fail(attach.ReasonNoRoom, "")
		return nil
	}
	file, err := attach.FileName(prefix, ref.at.Index, ref.Name)
	if err == nil {
		err = c.r.s.writeAttachment(c.dirfd, file, data)
	}
	if err != nil {
		c.r.s.Logger.Warn("attachment not stored", "channel", string(c.t.channel), "turn_id", c.t.id,
			"position", pos, "file", c.r.scrub(file, 300), "err", err)
		if c.r.s.disk.workspaceFull(err) {
			fail(attach.ReasonNoRoom, "")
		} else {
			fail(attach.ReasonStore, "")
		}
		return nil
	}
	c.keep(ref.at, file, attach.ContentType(ref.ContentType, fetchedType), mimeType, data)
	return nil
}

// keep records a saved file and, for an image within the budget, its
// image part (docs/session.md, "Attachments in, reply files out"; the bytes held, never the path reopened).
func (c *collection) keep(ref attach.Ref, file, contentType, mimeType string, data []byte) {
	s := attach.Saved{Ref: ref, File: file, ContentType: contentType, Size: len(data)}
	if mimeType != "" {
		s.ContentType = mimeType
		im, notShown := c.budget.Take(data, mimeType)
		if notShown == attach.ReasonNone {
			c.out.images = append(c.out.images, im)
			s.Image = true
		}
		s.NotShown = notShown
	}
	c.out.saved = append(c.out.saved, s)
}

// tooLarge is the reference's reason for a file over 25 MiB.
func tooLarge(n int64) string {
	return fmt.Sprintf("larger than 25 MB (%d bytes)", n)
}

// errHTTPStatus is a download answered with a status outside 2xx.
type errHTTPStatus int

func (e errHTTPStatus) Error() string { return "download failed with HTTP " + strconv.Itoa(int(e)) }

// download returns an attachment's bytes: the surface's own (the HTTP
// API's decoded base64), or a fetch of its URL through safefetch (public
// addresses only, no credentials, at most 25 MiB) and the response's
// content type.
func (c *collection) download(a rtsandbox.Attachment) ([]byte, string, error) {
	if a.URL == "" {
		return a.Data, "", nil
	}
	opts := safefetch.Options{
		MaxBytes: rtsandbox.MaxAttachmentBytes, Timeout: attachmentFetchTimeout,
		MaxRedirects: safefetch.DefaultMaxRedirects, Header: http.Header{"Accept": {"*/*"}},
	}
	res, err := c.r.s.Fetcher.Fetch(c.t.ctx, a.URL, opts)
	if err != nil {
		return nil, "", err
	}
	if res.Status < 200 || res.Status > 299 {
		return nil, "", errHTTPStatus(res.Status)
	}
	return res.Body, res.Header.Get("Content-Type"), nil
}

// downloadFailure is the reason of a failed download: a body over the
// bound is too large; a status is named; anything else failed.
func downloadFailure(err error) (attach.Reason, string) {
	var status errHTTPStatus
	switch {
	case errors.As(err, &status):
		return attach.ReasonDownload, status.Error()
	case errors.Is(err, safefetch.ErrTooLarge), errors.Is(err, safefetch.ErrBodyTooLarge), errors.Is(err, safefetch.ErrWireTooLarge):
		return attach.ReasonTooLarge, "larger than 25 MB"
	}
	return attach.ReasonDownload, "download failed"
}

// writeAttachment creates dirfd/name exclusively (0600) without following
// a link (docs/session.md, "Attachments in, reply files out": a name planted beforehand fails, whatever it is)
// and writes data; a service running as root hands the file to the
// worker user first, as it does the directories. A file it could not
// write in full is removed.
func (s *settings) writeAttachment(dirfd int, name string, data []byte) error {
	if !validEntry(name) {
		return fmt.Errorf("invalid directory entry %q", name)
	}
	fd, err := openAt(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(attachmentName, name))
	if s.hostRoot {
		err = f.Chown(s.UID, s.GID)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, name, 0)
	}
	return err
}
