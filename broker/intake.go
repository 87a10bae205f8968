package broker

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/rtsandbox/rtsandbox"
)

// Intake is the host's budget of request bodies being read and decoded
// (issue 21): a call holds rtsandbox.DecodeFactor times its body's size
// from before the body is read until its rebuilt request has left, and
// waits, first come first served, while the bodies of other calls hold
// the rest. So however many channels send large bodies at once, their
// decoding holds at most the Intake's size (rtsandbox.DecodeBudget of the
// host's memory limit); a call waits at most as long as its context lets
// it. One Intake serves every broker of a host (Config.Intake).
//
// A session channel also has its own share, one largest body's worth
// (Session), taken before the host's: a worker that sends its largest
// bodies back to back waits on its own channel's share and never holds
// more than that of the host's.
type Intake struct{ p *pool }

// NewIntake returns an Intake of size bytes.
func NewIntake(size int64) *Intake { return &Intake{newPool(size)} }

// Size is the Intake's size in bytes.
func (in *Intake) Size() int64 { return in.p.size }

// pool is the Intake's pool, nil for a nil Intake.
func (in *Intake) pool() *pool {
	if in == nil {
		return nil
	}
	return in.p
}

// pool is one budget a hold takes a share of: the host's (Intake) or a
// channel's (Session.intake). waiting counts the calls waiting for it and
// held the bytes its holds have.
type pool struct {
	sem     *semaphore.Weighted
	size    int64
	waiting atomic.Int32
	held    atomic.Int64
}

func newPool(size int64) *pool { return &pool{sem: semaphore.NewWeighted(size), size: size} }

// share is what a hold has of one pool.
type share struct {
	p *pool
	n int64
}

// hold is what one call holds while its body is read and decoded: a
// share of each of its pools, taken in order (the channel's, then the
// host's). A body's weight is rtsandbox.DecodeFactor times its bytes,
// capped at each pool's size: a body that could never fit waits for all
// of it.
type hold struct {
	shares [2]share
}

// newHold waits for bytes of body at each of pools (nil ones skipped).
func newHold(ctx context.Context, bytes int64, pools ...*pool) (*hold, error) {
	h := &hold{}
	for i, p := range pools[:min(len(pools), len(h.shares))] {
		if p == nil {
			continue
		}
		n := min(weight(bytes), p.size)
		if !p.sem.TryAcquire(n) {
			p.waiting.Add(1)
			err := p.sem.Acquire(ctx, n)
			p.waiting.Add(-1)
			if err == nil && ctx.Err() != nil {
				// Acquire may win its race with a ctx that ended as the
				// share came free (the ended turn's own body let go of
				// it): a call whose turn ended never takes its share.
				p.sem.Release(n)
				err = ctx.Err()
			}
			if err != nil {
				h.release()
				return nil, err
			}
		}
		p.held.Add(n)
		h.shares[i] = share{p: p, n: n}
	}
	return h, nil
}

// weight is what a body of bytes holds while it is decoded.
func weight(bytes int64) int64 { return rtsandbox.DecodeFactor * max(bytes, 0) }

// shrink lowers the hold to what a body of bytes holds: once the body is
// read (its real size), or once its rebuilt request has left (what stays
// until the answer ends: the body and the request sent).
func (h *hold) shrink(bytes int64) {
	if h == nil {
		return
	}
	for i := range h.shares {
		s := &h.shares[i]
		if n := min(weight(bytes), s.n); s.p != nil && n < s.n {
			s.p.held.Add(n - s.n)
			s.p.sem.Release(s.n - n)
			s.n = n
		}
	}
}

// release gives the whole hold back, the host's share first.
func (h *hold) release() {
	if h == nil {
		return
	}
	for i := len(h.shares) - 1; i >= 0; i-- {
		if s := &h.shares[i]; s.p != nil && s.n > 0 {
			s.p.held.Add(-s.n)
			s.p.sem.Release(s.n)
			s.n = 0
		}
	}
}

// sentBytes is what a call holds once its rebuilt request has left: its
// body and the request, about the body's size again, until the answer
// ends.
func sentBytes(body int) int64 { return 2 * int64(body) / rtsandbox.DecodeFactor }

// readBody reads r's body, at most limit bytes (more is errTooLarge),
// into a buffer of its declared length when it has one, so that a large
// body is not copied as it grows; a body declared larger is read to its
// limit and dropped, so that the answer reaches a worker still sending
// it. The read is cut off when ctx ends: the connection's read deadline
// moves to now, so a worker that sends a body slowly cannot hold the
// reader past its turn, and no chunk is asked for after ctx ended
// (cutReader), so one that keeps sending cannot either.
func readBody(ctx context.Context, w http.ResponseWriter, r *http.Request, limit int) ([]byte, error) {
	rc := http.NewResponseController(w)
	stop := context.AfterFunc(ctx, func() { _ = rc.SetReadDeadline(time.Now()) })
	defer stop()
	src := cutReader{ctx: ctx, r: r.Body}
	var body []byte
	var err error
	switch {
	case r.ContentLength > int64(limit):
		if _, err = io.CopyN(io.Discard, src, int64(limit)+1); err == nil {
			err = errTooLarge
		}
	case r.ContentLength >= 0:
		body = make([]byte, r.ContentLength)
		var n int
		n, err = io.ReadFull(src, body)
		body = body[:n]
	default:
		body, err = readLimited(src, limit)
	}
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return body, err
}

// cutReader reads r until ctx ends, and not one chunk after. The read
// deadline readBody moves to now when ctx ends is not enough alone: the
// session listener's silence limit (silentBody) re-arms the deadline
// after every chunk that arrives, so a chunk that arrived as the turn
// ended undid the cut, and a worker still sending kept its body read, and
// the host's intake share held, until it stopped: every other channel's
// call waited for it.
type cutReader struct {
	ctx context.Context
	r   io.Reader
}

func (c cutReader) Read(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}
