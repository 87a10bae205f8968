package worker

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is a turn's outbox, /workspace/outbox/<turnId>/ (session spec
// docs/architecture.md, "The request path"; docs/session.md, "Process" runTurn steps 10–13, docs/session.md, "read_attachment and image_generate references"): the reply files of the
// turn. The worker creates it when the turn starts, saves a host tool's
// image there, and reads it when the turn ends: at most ten entries, each
// a safe name and a regular file of 1 byte to 10 MiB, 50 MiB in all, read
// through the directory's descriptor without following a link. An empty
// outbox is removed. Files are not deleted after reading, as in the
// reference. A host tool's image and the write_file tool (writefile.go)
// fill it.

// resultText is a turn failure whose text is the reference's result
// text, sent as the ok:false error.
type resultText string

func (t resultText) Error() string { return string(t) }

// Outbox errors, with the reference's result texts.
const (
	errOutputBounds = resultText("Output file bounds exceeded")
	errWorkerOutput = resultText("Worker output failed")
)

// errNoRoom refuses a file the channel's workspace has no room for: it
// would pass the turn's wire.SessionRoom, which keeps the reserve
// the channel's later turns need. The model is told; the turn goes on.
var errNoRoom = errors.New("the channel's workspace has no room for the file")

// outbox is one turn's outbox directory.
type outbox struct {
	dir string
	// room is what the turn's files may still take (the turn's
	// SessionRoom less what create wrote); nil bounds nothing.
	room *wire.SessionRoom
}

// bound makes the outbox keep within room (nil: no bound).
func (b *outbox) bound(room *wire.SessionRoom) {
	if room != nil {
		left := *room
		b.room = &left
	}
}

// fits reports errNoRoom when a file of n bytes would pass the room.
func (b *outbox) fits(n int) error {
	if b.room != nil && (wire.FileCost(int64(n)) > b.room.Bytes || b.room.Files < 1) {
		return errNoRoom
	}
	return nil
}

// took counts a file of n bytes that was created against the room.
func (b *outbox) took(n int) {
	if b.room != nil {
		b.room.Bytes -= wire.FileCost(int64(n))
		b.room.Files--
	}
}

// createOutbox creates workspace/outbox/<turnID>/ (turnID is a validated
// safe name); an existing one is reused.
func createOutbox(workspace, turnID string) (*outbox, error) {
	root := filepath.Join(workspace, "outbox")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	dir := filepath.Join(root, turnID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return &outbox{dir: dir}, nil
}

// openDir opens the outbox directory itself without following a link.
func (b *outbox) openDir() (*os.File, error) {
	fd, err := syscall.Open(b.dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: b.dir, Err: err}
	}
	return os.NewFile(uintptr(fd), b.dir), nil
}

// collect reads the reply files: errOutputBounds for more than ten
// entries or an unsafe name, errWorkerOutput for an entry that is not a
// regular file of 1 byte–10 MiB (a link included) or a total over 50 MiB.
// An empty outbox is removed and gives no files.
func (b *outbox) collect() ([]wire.ReplyFile, error) {
	d, err := b.openDir()
	if err != nil {
		return nil, errors.Join(errWorkerOutput, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(rtsandbox.MaxReplyFiles + 1)
	if err != nil && err != io.EOF {
		return nil, errors.Join(errWorkerOutput, err)
	}
	if len(names) > rtsandbox.MaxReplyFiles || slices.ContainsFunc(names, func(n string) bool { return !wire.ValidSafeName(n) }) {
		return nil, errOutputBounds
	}
	if len(names) == 0 {
		_ = os.Remove(b.dir)
		return []wire.ReplyFile{}, nil
	}
	slices.Sort(names)
	files := make([]wire.ReplyFile, 0, len(names))
	total := 0
	for _, name := range names {
		data, err := readAt(d, name, rtsandbox.MaxReplyFileBytes)
		if err != nil {
			return nil, errors.Join(errWorkerOutput, err)
		}
		if total += len(data); total > rtsandbox.MaxReplyFilesTotal {
			return nil, errWorkerOutput
		}
		files = append(files, wire.ReplyFile{Name: name, Data: base64.StdEncoding.EncodeToString(data)})
	}
	return files, nil
}

// readAt reads the regular file name in directory d, opened without
// following a link and without blocking on a fifo: 1 byte to limit bytes,
// and exactly the size it had when opened ("File changed while reading").
func readAt(d *os.File, name string, limit int) ([]byte, error) {
	f, size, err := openRegularAt(int(d.Fd()), name, int64(limit))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readWhole(f, size)
}

// openRegularAt opens name in the directory dirfd without following a
// link and without blocking on a fifo, and requires a regular file of 1
// byte to limit (the reference's boundedFile, docs/session.md, "read_attachment and image_generate references"). It returns the file
// and its size.
func openRegularAt(dirfd int, name string, limit int64) (*os.File, int64, error) {
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	info, err := f.Stat()
	switch {
	case err != nil:
	case !info.Mode().IsRegular():
		err = fmt.Errorf("%s: not a regular file", name)
	case info.Size() < 1 || info.Size() > limit:
		err = fmt.Errorf("%s: size %d out of bounds", name, info.Size())
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, info.Size(), nil
}

// readWhole reads an opened file from its start: exactly the size it had
// when opened, else "file changed while reading".
func readWhole(f *os.File, size int64) ([]byte, error) {
	data := make([]byte, size+1)
	n, err := f.ReadAt(data, 0)
	if err != io.EOF || int64(n) != size {
		return nil, fmt.Errorf("%s: file changed while reading", f.Name())
	}
	return data[:n], nil
}

// outboxExt is the rule for a saved file's extension (docs/session.md, "read_attachment and image_generate references").
var outboxExt = regexp.MustCompile(`^[a-z0-9]{1,10}$`)

// save writes data as stem.ext, or stem-2.ext, stem-3.ext … when taken
// (docs/session.md, "read_attachment and image_generate references" saveToOutbox): a host tool's image. ext follows outboxExt.
func (b *outbox) save(stem string, data []byte, ext string) (string, error) {
	if !outboxExt.MatchString(ext) {
		return "", errOutputBounds
	}
	return b.create(stem, ext, data)
}

// create writes data as stem.ext (stem alone when ext is ""), or
// stem-2.ext, stem-3.ext … when taken, created exclusively through the
// directory's descriptor so that a planted link is never written
// through. Every name tried must be a safe name. A file the turn's room
// cannot take is errNoRoom, before anything is written.
func (b *outbox) create(stem, ext string, data []byte) (string, error) {
	if len(data) < 1 || len(data) > rtsandbox.MaxReplyFileBytes {
		return "", errOutputBounds
	}
	if err := b.fits(len(data)); err != nil {
		return "", err
	}
	d, err := b.openDir()
	if err != nil {
		return "", err
	}
	defer d.Close()
	for n := 1; n <= rtsandbox.MaxReplyFiles+1; n++ {
		name := outboxName(stem, n, ext)
		if !wire.ValidSafeName(name) {
			return "", errOutputBounds
		}
		fd, err := syscall.Openat(int(d.Fd()), name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if errors.Is(err, syscall.EEXIST) {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "create", Path: name, Err: err}
		}
		b.took(len(data)) // created: it takes room even if the write fails
		f := os.NewFile(uintptr(fd), name)
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return name, err
	}
	return "", errOutputBounds
}

// outboxName is the n-th name create tries: stem[.ext], then
// stem-n[.ext].
func outboxName(stem string, n int, ext string) string {
	name := stem
	if n > 1 {
		name += "-" + strconv.Itoa(n)
	}
	if ext != "" {
		name += "." + ext
	}
	return name
}

// usage counts the outbox's entries (up to one past the file bound) and
// the bytes of its regular files, without following a link: what a new
// file must still fit beside (docs/protocol.md, "Images and files").
func (b *outbox) usage() (files int, size int64, err error) {
	d, err := b.openDir()
	if err != nil {
		return 0, 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(rtsandbox.MaxReplyFiles + 1)
	if err != nil && err != io.EOF {
		return 0, 0, err
	}
	for _, name := range names {
		n, err := regularSizeAt(int(d.Fd()), name)
		if err != nil {
			return 0, 0, err
		}
		size += n
	}
	return len(names), size, nil
}

// regularSizeAt is the size of name in the directory dirfd when it is a
// regular file, else 0: opened without following a link (a link is not
// regular) and without blocking on a fifo.
func regularSizeAt(dirfd int, name string) (int64, error) {
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return 0, nil
	}
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, nil
	}
	return st.Size, nil
}
