package container

import (
	"bytes"
	"fmt"

	"github.com/rtsandbox/rtsandbox/wire"
)

// Bounds of a sealed worker's output, the same on every engine
// (docs/sealed-turn.md, "The container").
const (
	StdoutLimit    = 2 << 20   // 2 MiB of reply JSON
	StderrLimit    = 128 << 10 // 128 KiB, counted; only the tail is kept
	StderrTailSize = 4 << 10   // the tail of a failed worker's stderr
)

// ReplyBuffer is a sealed worker's stdout sink: it keeps up to StdoutLimit
// bytes and fails the write that would go past them (the engine then kills
// the worker). At the first wire.ReplyEnd it keeps the bytes before it as
// the reply and closes Ended (the early reply): one IndexByte per write,
// so finding the mark costs what the bytes cost. It is written by one
// goroutine; Reply may be read by another once Ended is closed, or once
// the writer is done.
type ReplyBuffer struct {
	buf   bytes.Buffer
	limit int
	ended chan struct{}
	reply []byte
	over  error // the overflow, once a write went past the limit
}

// NewReplyBuffer returns an empty sink bounded at StdoutLimit.
func NewReplyBuffer() *ReplyBuffer {
	return &ReplyBuffer{limit: StdoutLimit, ended: make(chan struct{})}
}

func (b *ReplyBuffer) Write(p []byte) (int, error) {
	if b.over != nil {
		return 0, b.over
	}
	if b.buf.Len()+len(p) > b.limit {
		b.over = fmt.Errorf("%w: stdout over %d bytes", ErrOutputLimit, b.limit)
		return 0, b.over
	}
	before := b.buf.Len()
	b.buf.Write(p)
	if b.reply == nil {
		if i := bytes.IndexByte(p, wire.ReplyEnd); i >= 0 {
			b.reply = bytes.Clone(b.buf.Bytes()[:before+i])
			close(b.ended)
		}
	}
	return len(p), nil
}

// Err is the overflow (ErrOutputLimit) once a write went past the limit,
// nil before: an engine whose stream reports the sink's error in its own
// words (a Kubernetes attach) asks the sink. Read it once the writer is
// done.
func (b *ReplyBuffer) Err() error { return b.over }

// Ended is closed at the end mark.
func (b *ReplyBuffer) Ended() <-chan struct{} { return b.ended }

// Reply is the bytes before the end mark; nil until it came.
func (b *ReplyBuffer) Reply() []byte { return b.reply }

// Bytes is everything written: the reply of a worker whose image writes no
// end mark, which counts only with exit code 0.
func (b *ReplyBuffer) Bytes() []byte { return b.buf.Bytes() }

// TailBuffer counts bytes up to StderrLimit and keeps only the last
// StderrTailSize of them: the worker's stderr is container-controlled
// text, kept for its failure line only (ParseWorkerFailure) and never
// logged.
type TailBuffer struct {
	n, limit int
	ring     []byte
	next     int   // where the next byte goes
	over     error // the overflow, once the count went past the limit
}

// NewTailBuffer returns an empty sink of the stderr bounds.
func NewTailBuffer() *TailBuffer { return newTailBuffer(StderrLimit, StderrTailSize) }

func newTailBuffer(limit, size int) *TailBuffer {
	return &TailBuffer{limit: limit, ring: make([]byte, size)}
}

func (t *TailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	t.n += n
	if t.n > t.limit {
		t.over = fmt.Errorf("%w: stderr over %d bytes", ErrOutputLimit, t.limit)
		return 0, t.over
	}
	if len(p) > len(t.ring) {
		p = p[len(p)-len(t.ring):]
	}
	k := copy(t.ring[t.next:], p)
	copy(t.ring, p[k:])
	t.next = (t.next + len(p)) % len(t.ring)
	return n, nil
}

// Err is the overflow (ErrOutputLimit) once the count went past the
// limit, nil before. Read it once the writer is done.
func (t *TailBuffer) Err() error { return t.over }

// Len counts the bytes written.
func (t *TailBuffer) Len() int { return t.n }

// Tail returns a copy of the kept bytes in order; nil when none were
// written.
func (t *TailBuffer) Tail() []byte {
	if t.n == 0 {
		return nil
	}
	if t.n < len(t.ring) {
		return bytes.Clone(t.ring[:t.n])
	}
	return append(bytes.Clone(t.ring[t.next:]), t.ring[:t.next]...)
}
