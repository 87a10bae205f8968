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

// Why the API queues per channel before the router does: router.Surface
// reports chunks by channel, not by message. With at most one message per
// channel inside the router, everything the router posts to that channel
// between Submit and settlement belongs to that message (turns, their
// failure notices and the router's refusal notices), and a message that
// caused neither typing nor a chunk was dropped. The router still keeps
// its own per-channel order, owner commands included.

// Error classes of submit, mapped to statuses in respond.go.
var (
	errChannelFull = errors.New("httpapi: too many messages held for the channel")
	errHostFull    = errors.New("httpapi: too many messages held")
)

// pending is one message held by the API until the router settles it.
type pending struct {
	id  string
	msg router.Message
	// result receives the outcome once; buffered, so a gone waiter never
	// blocks the lane.
	result chan outcome
	// Guarded by API.mu while the message is in the router.
	chunks []string
	ran    bool // the router started a turn for it (typing was shown)
}

// outcome is what became of a message.
type outcome struct {
	err    error  // a refusal with a status: router.ErrStopping, router.ErrQueueFull
	reason string // a router.Drop* reason when the message was dropped
	chunks []string
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

func (p *pending) settle(o outcome) { p.result <- o }

// lane is one channel's held messages: current is in the router, waiting
// follow in arrival order. A lane exists while it has work.
type lane struct {
	current *pending
	waiting []*pending
}

func (l *lane) size() int {
	n := len(l.waiting)
	if l.current != nil {
		n++
	}
	return n
}

// submit holds m for its channel and returns its pending record. The lane
// goroutine passes it to the router when the channel's previous message is
// settled. Errors: errChannelFull, errHostFull, router.ErrStopping; each
// is reported to the router as a drop (the API decided it, not the router).
func (a *API) submit(m router.Message) (*pending, error) {
	p, err := a.hold(m)
	if err != nil {
		a.router.ReportDrop(m.Channel, dropReason(err))
	}
	return p, err
}

// hold puts m in its channel's lane.
func (a *API) hold(m router.Message) (*pending, error) {
	p := &pending{id: a.opts.NewID(), msg: m, result: make(chan outcome, 1)}
	p.msg.ID = p.id
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.stopping:
		return nil, router.ErrStopping
	case a.pending >= a.opts.MaxPending:
		return nil, errHostFull
	}
	l := a.lanes[m.Channel]
	if l != nil && l.size() >= a.opts.QueueLimit {
		return nil, errChannelFull
	}
	if l == nil {
		l = &lane{}
		a.lanes[m.Channel] = l
		a.wg.Add(1)
		go a.drain(m.Channel, l)
	}
	l.waiting = append(l.waiting, p)
	a.pending++
	return p, nil
}

// drain passes channel's messages to the router one at a time until none
// is left. It exits when the lane is empty; Stop empties the waiting list
// and router.Close settles the current message.
func (a *API) drain(channel rtsandbox.ChannelKey, l *lane) {
	defer a.wg.Done()
	for {
		a.mu.Lock()
		l.current = nil
		if len(l.waiting) == 0 {
			delete(a.lanes, channel)
			a.mu.Unlock()
			return
		}
		p := l.waiting[0]
		l.waiting = l.waiting[1:]
		l.current = p
		a.mu.Unlock()

		err := a.route(p)

		a.mu.Lock()
		o := settled(err, p.chunks)
		a.pending--
		a.mu.Unlock()
		p.settle(o)
		a.hub.publish(doneEvent(channel, p.id, o))
	}
}

// errPanicked settles a message whose routing panicked: a 500 to a
// waiting request, the internal-error text in its done event.
var errPanicked = errors.New("httpapi: routing the message panicked")

// route hands p to the router and waits until it is settled. A panic
// fails p alone; the lane goes on with the next message.
func (a *API) route(p *pending) (err error) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("recovered from a panic", "where", "message lane", "channel", p.msg.Channel,
				"panic", fmt.Sprintf("%T", r), "stack", string(debug.Stack()))
			err = errPanicked
		}
	}()
	return <-a.router.Submit(p.msg)
}

// observe applies f to the message of channel now in the router and
// returns its id ("" when none, which the router does not do for this
// surface's channels).
func (a *API) observe(channel rtsandbox.ChannelKey, f func(*pending)) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.lanes[channel]; l != nil && l.current != nil {
		f(l.current)
		return l.current.id
	}
	return ""
}

// randomID returns "m_" and 16 random hex digits.
func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return "m_" + hex.EncodeToString(b)
}
