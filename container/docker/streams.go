package docker

import (
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// streams owns one attach connection: a demultiplexer goroutine that reads
// stdout and stderr into bounded in-memory sinks (stderr keeps only its
// tail), and a writer goroutine
// that sends the turn JSON. Neither sink ever blocks, so the worker can never
// stall on a full pipe; a sink that overflows fails the read, and the caller
// kills the container.
type streams struct {
	hr     client.HijackedResponse
	stdout *rtcontainer.ReplyBuffer
	stderr *rtcontainer.TailBuffer
	done   chan error // the demultiplexer's result; buffered so it never blocks
	wg     sync.WaitGroup
}

func startStreams(hr client.HijackedResponse) *streams {
	s := &streams{
		hr:     hr,
		stdout: rtcontainer.NewReplyBuffer(),
		stderr: rtcontainer.NewTailBuffer(),
		done:   make(chan error, 1),
	}
	s.wg.Go(func() {
		_, err := stdcopy.StdCopy(s.stdout, s.stderr, hr.Reader)
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
