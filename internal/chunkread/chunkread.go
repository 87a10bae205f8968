// Package chunkread is a reader for tests that returns its chunks one per
// Read, as a network might, so that a test can put a cut between any two
// reads (stream filters, scanners that read as a body arrives).
package chunkread

import "io"

// Reader returns the first chunk's bytes on each Read, skipping empty
// chunks, and io.EOF after the last. It is also an io.ReadCloser whose
// Close does nothing, for a fake response body.
type Reader [][]byte

// Read copies as much of the first chunk as p holds.
func (c *Reader) Read(p []byte) (int, error) {
	for len(*c) > 0 && len((*c)[0]) == 0 {
		*c = (*c)[1:]
	}
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	(*c)[0] = (*c)[0][n:]
	return n, nil
}

// Close does nothing.
func (c *Reader) Close() error { return nil }

// Split returns a Reader of b in chunks of n bytes (the last shorter).
func Split(b []byte, n int) *Reader {
	var c Reader
	for len(b) > n {
		c, b = append(c, b[:n]), b[n:]
	}
	c = append(c, b)
	return &c
}
