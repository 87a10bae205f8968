package worker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// This file reads a session file from its end, by whole lines, within
// bounds, and keeps the file whole for the next append (issue 22 item 3):
//
//   - Only the header line and whole lines after it are parsed: a tail
//     without its newline (a write cut by a crash or a full disk) is torn
//     and never read; the next write cuts it off first (cutTornTail), so
//     it is never merged with the record appended after it.
//   - Lines are read newest first until maxSessionRead bytes of them are
//     held; a line longer than maxSessionLine is skipped unread, so one
//     huge line (or garbage without newlines) costs only itself, never
//     the exchanges before it.
//   - Every line dropped on the way is counted, for the worker's log and
//     the ready handshake's report to the host (wire.SessionLoad).

// Bounds of a session file read.
const (
	// maxSessionRead bounds the lines the worker reads of a session
	// file, newest first. Exchanges before them are on disk only; the
	// model would not see them anyway (sessionHistoryBudget).
	maxSessionRead = 32 << 20
	// maxSessionLine bounds one line: a longer one could not be held
	// within maxSessionRead, so it is skipped unread.
	maxSessionLine = maxSessionRead
	maxHeaderLine  = 64 << 10
	// scanChunk is what one backward read of the newline scan takes.
	scanChunk = 64 << 10
)

// sessionFile is what readSessionFile found: the header line, the whole
// lines read after it (oldest first), whether older lines were left
// unread for the bound (cut), and the lines dropped before parsing: a
// torn tail and lines over maxSessionLine.
type sessionFile struct {
	header []byte
	lines  [][]byte
	cut    bool
	torn   bool
	long   int
}

// dropped counts the lines the read dropped.
func (f sessionFile) dropped() int {
	n := f.long
	if f.torn {
		n++
	}
	return n
}

// readSessionFile reads a regular file without following a link: its
// header line (at most maxHeaderLine bytes, ended by a newline), then its
// whole lines from the end, newest first, within maxSessionRead bytes.
func readSessionFile(path string) (sessionFile, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return sessionFile{}, fmt.Errorf("%w: %w", errSessionFile, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return sessionFile{}, fmt.Errorf("%w: not a regular file", errSessionFile)
	}
	head := make([]byte, min(info.Size(), maxHeaderLine))
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return sessionFile{}, fmt.Errorf("%w: %w", errSessionFile, err)
	}
	header, _, found := bytes.Cut(head[:n], []byte("\n"))
	if !found {
		return sessionFile{}, fmt.Errorf("%w: header line torn or too long", errSessionFile)
	}
	out := sessionFile{header: header}
	err = out.readLines(f, int64(len(header))+1, info.Size())
	return out, err
}

// readLines reads the lines of [start, end) from the end, a chunk at a
// time, as the file doc says: a chunk is scanned for newlines once; a
// kept line is copied from it, or read again whole when it began in an
// earlier chunk.
func (s *sessionFile) readLines(f *os.File, start, end int64) error {
	r := lineReader{file: s, f: f, tail: true, to: end}
	buf := make([]byte, scanChunk)
	for pos := end; pos > start && !s.cut; {
		lo := max(start, pos-scanChunk)
		chunk := buf[:pos-lo]
		if _, err := f.ReadAt(chunk, lo); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: %w", errSessionFile, err)
		}
		r.chunk, r.lo = chunk, lo
		for j := len(chunk); j >= 0 && !s.cut; {
			i := bytes.LastIndexByte(chunk[:j], '\n')
			if i < 0 {
				r.from = lo // the line goes on in the chunk before
				break
			}
			r.from = lo + int64(i) + 1
			if err := r.end(); err != nil {
				return err
			}
			j = i
		}
		pos = lo
	}
	if s.cut {
		s.reverse()
		return nil
	}
	r.from = start
	err := r.end() // the first line after the header
	s.reverse()
	return err
}

// lineReader keeps the lines readLines meets, newest first.
type lineReader struct {
	file *sessionFile
	f    *os.File
	tail bool  // the line being read is the file's last
	from int64 // the line being read starts here as far as seen
	to   int64 // and ends here (its newline, or the end of the file)
	held int   // bytes of the lines kept
	// chunk is the bytes read last, from file offset lo.
	chunk []byte
	lo    int64
}

// end closes the line [from, to): the last line of the file is torn
// unless it is empty (the file ends with a newline); an empty line is
// skipped, a line past maxSessionLine counted, one that does not fit the
// read bound ends the read; any other is read and kept. The next line
// ends before this one's newline.
func (r *lineReader) end() error {
	s, size, tail, from := r.file, r.to-r.from, r.tail, r.from
	r.tail, r.to = false, r.from-1
	switch {
	case tail && size > 0:
		s.torn = true
	case size <= 0:
	case size > maxSessionLine:
		s.long++
	case r.held+int(size) > maxSessionRead:
		s.cut = true
	case from >= r.lo && from+size <= r.lo+int64(len(r.chunk)): // the line is in the chunk
		s.lines = append(s.lines, bytes.Clone(r.chunk[from-r.lo:from-r.lo+size]))
		r.held += int(size)
	default:
		line := make([]byte, size)
		if _, err := r.f.ReadAt(line, from); err != nil {
			return fmt.Errorf("%w: %w", errSessionFile, err)
		}
		s.lines = append(s.lines, line)
		r.held += int(size)
	}
	return nil
}

// reverse puts the lines, read newest first, in file order.
func (s *sessionFile) reverse() {
	for i, j := 0, len(s.lines)-1; i < j; i, j = i+1, j-1 {
		s.lines[i], s.lines[j] = s.lines[j], s.lines[i]
	}
}

// endsLine reports whether the byte before end is a newline (a file
// whose body is empty has no torn tail).
func endsLine(f *os.File, end, start int64) bool {
	if end <= start {
		return true
	}
	var b [1]byte
	_, err := f.ReadAt(b[:], end-1)
	return err == nil && b[0] == '\n'
}

// lastNewline returns the offset of the last newline in [start, pos),
// or start-1 when there is none, reading backwards a chunk at a time.
func lastNewline(f *os.File, start, pos int64, buf []byte) (int64, error) {
	for hi := pos; hi > start; {
		lo := max(start, hi-int64(len(buf)))
		chunk := buf[:hi-lo]
		if _, err := f.ReadAt(chunk, lo); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return lo + int64(i), nil
		}
		hi = lo
	}
	return start - 1, nil
}
