package docker

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// streams owns one attach connection: a demultiplexer goroutine that reads
// stdout and stderr into bounded in-memory sinks (stderr keeps only its
// tail), and a writer goroutine
// that sends the turn JSON. Neither sink ever blocks, so the worker can never
// stall on a full pipe; a sink that overflows fails the read, and the caller
// kills the container.
type streams struct {
	hr     client.HijackedResponse
	stdout limitedBuffer
	stderr tailBuffer
	done   chan error // the demultiplexer's result; buffered so it never blocks
	wg     sync.WaitGroup
}

func startStreams(hr client.HijackedResponse) *streams {
	s := &streams{
		hr:     hr,
		stdout: limitedBuffer{limit: stdoutLimit, ended: make(chan struct{})},
		stderr: tailBuffer{limit: stderrLimit, ring: make([]byte, stderrTailSize)},
		done:   make(chan error, 1),
	}
	s.wg.Go(func() {
		_, err := stdcopy.StdCopy(&s.stdout, &s.stderr, hr.Reader)
		s.done <- err
	})
	return s
}

// send writes stdin and closes the write side, which (with StdinOnce) gives
// the worker EOF. It runs in its own goroutine because a worker that does not
// read its stdin must not block the driver. Write errors are ignored: a
// worker may exit without reading, and its exit code decides the turn.
func (s *streams) send(stdin []byte) {
	s.wg.Go(func() {
		if _, err := s.hr.Conn.Write(stdin); err == nil {
			_ = s.hr.CloseWrite()
		}
	})
}

// close ends both goroutines: closing the connection unblocks any pending
// read or write. It is safe to call once, after which s is done.
func (s *streams) close() {
	s.hr.Close()
	s.wg.Wait()
}

// limitedBuffer keeps up to limit bytes and fails the write that would go
// past it. At the first wire.ReplyEnd it keeps the bytes before it as the
// reply and closes ended (the early reply): one IndexByte per write, so
// finding the mark costs what the bytes cost.
type limitedBuffer struct {
	buf   bytes.Buffer
	limit int
	ended chan struct{} // closed at the end mark; reply is set before
	reply []byte        // the bytes before the end mark; nil until it came
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.limit {
		return 0, fmt.Errorf("%w: stdout over %d bytes", rtcontainer.ErrOutputLimit, b.limit)
	}
	before := b.buf.Len()
	b.buf.Write(p)
	if b.reply == nil && b.ended != nil {
		if i := bytes.IndexByte(p, wire.ReplyEnd); i >= 0 {
			b.reply = bytes.Clone(b.buf.Bytes()[:before+i])
			close(b.ended)
		}
	}
	return len(p), nil
}

// tailBuffer counts bytes up to limit and keeps only the last len(ring) of
// them: the worker's stderr is container-controlled text, kept for its
// failure line only (see container.ParseWorkerFailure) and never logged.
type tailBuffer struct {
	n, limit int
	ring     []byte
	next     int // where the next byte goes
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	t.n += n
	if t.n > t.limit {
		return 0, fmt.Errorf("%w: stderr over %d bytes", rtcontainer.ErrOutputLimit, t.limit)
	}
	if len(p) > len(t.ring) {
		p = p[len(p)-len(t.ring):]
	}
	k := copy(t.ring[t.next:], p)
	copy(t.ring, p[k:])
	t.next = (t.next + len(p)) % len(t.ring)
	return n, nil
}

// tail returns a copy of the kept bytes in order; nil when none were
// written.
func (t *tailBuffer) tail() []byte {
	if t.n == 0 {
		return nil
	}
	if t.n < len(t.ring) {
		return bytes.Clone(t.ring[:t.n])
	}
	return append(bytes.Clone(t.ring[t.next:]), t.ring[:t.next]...)
}
