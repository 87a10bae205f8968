package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// How the API answers a message: it submits the message to the router at
// once (the router alone keeps per-channel order and bounds) and keeps a
// pending record under the message's id until the router settles it.
// Every chunk and typing call the router delivers names the message it
// answers (router.Delivery.InReplyTo), so the record collects the
// message's replies for a waiting request and its events carry its id.

// errHostFull refuses a message beyond Options.MaxPending, mapped to a
// status in respond.go.
var errHostFull = errors.New("httpapi: too many messages held")

// errPanicked settles a message whose routing panicked: a 500 to a
// waiting request, the internal-error text in its done event.
var errPanicked = errors.New("httpapi: routing the message panicked")

// pending is one message the router has not settled yet.
type pending struct {
	id  string
	msg router.Message
	// result receives the outcome once; buffered, so a gone waiter never
	// blocks the settling goroutine.
	result chan outcome
	chunks []string // guarded by API.mu
	// files are the reply's files (its last chunk's); guarded by API.mu.
	files []rtsandbox.File
	// previewed is the preview text already sent as delta events, in
	// bytes; guarded by API.mu.
	previewed int
	// held is the decoded attachment bytes of msg, given back to
	// API.attached when the message is settled.
	held int64
}

// outcome is what became of a message.
type outcome struct {
	err    error  // a refusal with a status: router.ErrStopping, router.ErrQueueFull
	reason string // a router.Drop* reason when the message was dropped
	chunks []string
	files  []rtsandbox.File
}

// settled is the outcome of a message the router settled with err.
func settled(err error, chunks []string) outcome {
	o := outcome{reason: dropReason(err), chunks: chunks}
	if errors.Is(err, router.ErrDropped) && !errors.Is(err, router.ErrStopping) && !errors.Is(err, router.ErrQueueFull) {
		err = nil // a plain drop answers 200 with its reason, not an error status
	}
	o.err = err
	return o
}

// submit hands m to the router. It returns the pending record of a
// queued message, or the outcome of one the router did not take
// (dropped at once, or refused: queue full, shutting down, errHostFull).
// The pending record takes res's bytes, the message's attachments, until
// it is settled; a message not taken leaves them to res.
func (a *API) submit(m router.Message, res *reservation) (*pending, *outcome) {
	p, err := a.hold(m)
	if err != nil {
		a.router.ReportDrop(m.Channel, dropReason(err)) // the API's own drop
		o := outcome{err: err, reason: dropReason(err)}
		return nil, &o
	}
	done, err := a.route(p)
	if err != nil {
		a.release(p)
		a.wg.Done() // added by hold
		o := settled(err, nil)
		return nil, &o
	}
	p.held = res.move() // before settle can run
	go func() {
		defer a.wg.Done() // added by hold
		a.settle(p, done)
	}()
	return p, nil
}

// hold registers a pending record for m under a fresh id, before the
// router sees m, so that no delivery for it can come first. It counts the
// record in a.wg under a.mu, where Stop marks the API stopping: so a
// record is either counted before Close waits, or refused (the router
// would refuse it too once Stop was called).
func (a *API) hold(m router.Message) (*pending, error) {
	p := &pending{id: a.opts.NewID(), msg: m, result: make(chan outcome, 1)}
	p.msg.ID = p.id
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopping:
		return nil, router.ErrStopping
	case len(a.pending) >= a.opts.MaxPending:
		return nil, errHostFull
	}
	a.pending[p.id] = p
	a.wg.Add(1)
	return p, nil
}

// release forgets p and returns its chunks and files.
func (a *API) release(p *pending) ([]string, []rtsandbox.File) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pending, p.id)
	return p.chunks, p.files
}

// settle settles p once the router has: its attachments' bytes are given
// back, its waiter gets the outcome and subscribers the done event, after
// every event of the message itself (done events of different messages
// may interleave).
func (a *API) settle(p *pending, done <-chan error) {
	o := settled(<-done, nil)
	a.attached.give(p.held)
	o.chunks, o.files = a.release(p)
	p.result <- o
	a.hub.publish(doneEvent(p.msg.Channel, p.id, o))
}

// route submits p to the router. A panic fails p alone.
func (a *API) route(p *pending) (done <-chan error, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("recovered from a panic", "where", "message submit", "channel", p.msg.Channel,
				"panic", fmt.Sprintf("%T", r), "stack", string(debug.Stack()))
			done, err = nil, errPanicked
		}
	}()
	return a.router.Submit(p.msg)
}

// record files a delivered chunk under the message it answers, when the
// API still holds that message.
func (a *API) record(d router.Delivery) {
	if d.InReplyTo == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.pending[d.InReplyTo]; p != nil && p.msg.Channel == d.Channel {
		p.chunks = append(p.chunks, d.Chunk)
		if len(d.Files) > 0 {
			p.files = d.Files
		}
	}
}

// delta returns the preview text of d not yet sent as a delta event for
// its message, and records it as sent. A router preview only grows; one
// for a message the API does not hold, or that does not extend what was
// sent, yields "".
func (a *API) delta(d router.Delivery) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pending[d.InReplyTo]
	if p == nil || p.msg.Channel != d.Channel || len(d.Chunk) <= p.previewed {
		return ""
	}
	next := d.Chunk[p.previewed:]
	p.previewed = len(d.Chunk)
	return next
}

// heldIn returns the messages the API holds for channel.
func (a *API) heldIn(channel rtsandbox.ChannelKey) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, p := range a.pending {
		if p.msg.Channel == channel {
			n++
		}
	}
	return n
}

// randomID returns "m_" and 16 random hex digits.
func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return "m_" + hex.EncodeToString(b)
}
