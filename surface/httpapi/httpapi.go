// Package httpapi is the HTTP chat surface for bridges and tests: JSON
// messages in, replies and typing out as server-sent events, and the
// owner's actions (sandbox on, off, status, fresh, stop), all for channel
// keys "http:<room>".
//
// The contract:
//
//   - Every /api/ request carries "Authorization: Bearer <token>". The guest
//     token (messages, events) and the owner token (sandbox switch) are read
//     through Options on every request and compared in constant time; an
//     empty or unset token refuses every request it would authorise.
//   - Requests that carry an Origin header are refused unless the origin is
//     listed in Options.AllowedOrigins; there is no CORS. With
//     Options.LoopbackHosts the Host header must name a loopback host.
//   - Bodies are bounded and decoded strictly: an unknown or duplicate key,
//     a value of the wrong type or trailing data is a 400 naming the key.
//     Every error body is {"error": fixed text}; details go to the log.
//   - The author of a message is the identity "http:<author.id>", resolved
//     by the router's access rules like any other surface's author.
//   - Messages of one channel reach the router one at a time, in arrival
//     order: the API holds the next until the previous one is settled, so
//     every reply chunk and typing event is attributed to exactly one
//     message. Options.QueueLimit bounds the messages held per channel.
//   - Every message that does not run names its reason (router.DropReasons):
//     200 {"channel","dropped":true,"reason"} when the router drops it at
//     once; "dropped" and "reason" in the done event and the wait answer
//     when it is dropped later; "reason" beside the error of a 429 (queue
//     full) or 503 (shutting down). Drops the API decides itself are
//     reported to the router (router.ReportDrop), so all are counted once.
//   - Events fan out to subscribers through bounded buffers; a subscriber
//     that falls behind is dropped, never waited for.
//   - A panic fails one request (its response is aborted) or one message
//     (settled as an internal error); it is logged with the stack, never
//     with the request's text, and the API goes on.
package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Prefix is the channel key prefix this surface serves.
const Prefix = "http"

// Defaults and bounds.
const (
	// DefaultEventBuffer is a subscriber's event buffer: a burst of 250
	// messages (typing, reply and done each) across channels fits.
	DefaultEventBuffer = 1024
	// DefaultMaxSubscribers bounds concurrent event streams.
	DefaultMaxSubscribers = 64
	// DefaultMaxPending bounds the messages held or running across all
	// channels, so a flood of fresh room names cannot grow memory.
	DefaultMaxPending = 4096
	// DefaultWaitTimeout bounds a "wait": true request: the longest turn
	// (10 minutes) plus time in the channel's queue.
	DefaultWaitTimeout = 15 * time.Minute
	// MaxBodyBytes bounds a request body: two 32,000-unit texts, fully
	// escaped, fit.
	MaxBodyBytes = 512 << 10
	// MaxHeaderBytes bounds request headers (see NewServer).
	MaxHeaderBytes = 16 << 10
	// MaxTextUnits bounds text and reference_text, in UTF-16 units: the
	// sealed runtime's limit of one turn's text.
	MaxTextUnits = 32000
	// heartbeat keeps idle event streams (and proxies) alive.
	heartbeat = 15 * time.Second
	// writeTimeout bounds one write to a client.
	writeTimeout = 10 * time.Second
)

// Options configure an API. Router, Token are required.
type Options struct {
	// Router receives messages and owner commands; New registers the API
	// as its surface for Prefix.
	Router *router.Router
	// Token returns the guest bearer token, on every request; "" refuses
	// every guest request.
	Token func() string
	// OwnerToken returns the owner's bearer token, on every request; nil
	// or "" refuses every owner request.
	OwnerToken func() string
	// OwnerID is the subject the owner token speaks as: the router's
	// owner guard resolves "http:<OwnerID>" and must find an owner. ""
	// refuses owner requests with 403.
	OwnerID string
	// AllowedOrigins lists Origin header values that may call the API (a
	// browser page the operator trusts). Empty refuses every request with
	// an Origin header.
	AllowedOrigins []string
	// LoopbackHosts requires the Host header to name localhost or a
	// loopback address, which defeats DNS rebinding against a loopback
	// listener.
	LoopbackHosts bool
	// Logger receives operator records; nil discards them.
	Logger *slog.Logger
	// Ready, when set, is the host's readiness check behind /readyz (the
	// container engine answers, say); an error makes the host not ready.
	Ready func(context.Context) error
	// QueueLimit bounds one channel's held messages, the one in the
	// router included; 0 means router.DefaultQueueLimit.
	QueueLimit int
	// MaxPending bounds held messages across channels; 0 means
	// DefaultMaxPending.
	MaxPending int
	// EventBuffer is each subscriber's buffer; 0 means DefaultEventBuffer.
	EventBuffer int
	// MaxSubscribers bounds event streams; 0 means DefaultMaxSubscribers.
	MaxSubscribers int
	// WaitTimeout bounds a waiting request; 0 means DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Usage, when set, returns today's budget usage of a channel and of
	// the installation as a JSON-encodable report (GET
	// /api/v1/channels/{key}/usage, owner token); nil answers 404.
	Usage func(ctx context.Context, channel rtsandbox.ChannelKey) (any, error)
	// NewID returns a fresh message id; nil means random "m_" + 16 hex.
	NewID func() string
}

// API is the HTTP chat surface. It implements router.Surface for Prefix.
type API struct {
	router  *router.Router
	opts    Options
	log     *slog.Logger
	origins map[string]bool
	hub     *hub

	mu       sync.Mutex
	lanes    map[rtsandbox.ChannelKey]*lane
	pending  int
	stopping bool
	wg       sync.WaitGroup // lane goroutines
}

var _ router.Surface = (*API)(nil)

// New checks opts, registers the API with the router for Prefix and
// returns it. Errors wrap rtsandbox.ErrInvalid or come from AddSurface.
func New(opts Options) (*API, error) {
	if opts.Router == nil || opts.Token == nil {
		return nil, fmt.Errorf("httpapi: Router and Token are required: %w", rtsandbox.ErrInvalid)
	}
	if opts.QueueLimit < 0 || opts.MaxPending < 0 || opts.EventBuffer < 0 || opts.MaxSubscribers < 0 || opts.WaitTimeout < 0 {
		return nil, fmt.Errorf("httpapi: negative limit: %w", rtsandbox.ErrInvalid)
	}
	opts.QueueLimit = cmp.Or(opts.QueueLimit, router.DefaultQueueLimit)
	opts.MaxPending = cmp.Or(opts.MaxPending, DefaultMaxPending)
	opts.EventBuffer = cmp.Or(opts.EventBuffer, DefaultEventBuffer)
	opts.MaxSubscribers = cmp.Or(opts.MaxSubscribers, DefaultMaxSubscribers)
	opts.WaitTimeout = cmp.Or(opts.WaitTimeout, DefaultWaitTimeout)
	if opts.NewID == nil {
		opts.NewID = randomID
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &API{
		router:  opts.Router,
		opts:    opts,
		log:     log.With("surface", Prefix),
		origins: map[string]bool{},
		hub:     newHub(opts.EventBuffer, opts.MaxSubscribers),
		lanes:   map[rtsandbox.ChannelKey]*lane{},
	}
	for _, o := range opts.AllowedOrigins {
		a.origins[o] = true
	}
	if err := opts.Router.AddSurface(Prefix, a); err != nil {
		return nil, err
	}
	return a, nil
}

// Send implements router.Surface: the chunk becomes a reply event and
// part of the waiting request's answer. It never blocks.
func (a *API) Send(_ context.Context, channel rtsandbox.ChannelKey, chunk string) error {
	id := a.observe(channel, func(p *pending) { p.chunks = append(p.chunks, chunk) })
	a.hub.publish(Event{Type: EventReply, Channel: channel, MessageID: id, Chunk: chunk})
	return nil
}

// SendReport implements router.ReportSurface: a background report becomes
// a reply event of no message, and is never filed under the message the
// router is running.
func (a *API) SendReport(_ context.Context, channel rtsandbox.ChannelKey, chunk string) error {
	a.hub.publish(Event{Type: EventReply, Channel: channel, Chunk: chunk})
	return nil
}

// Typing implements router.Surface: it becomes a typing event. It never
// blocks.
func (a *API) Typing(_ context.Context, channel rtsandbox.ChannelKey) error {
	id := a.observe(channel, func(p *pending) { p.ran = true })
	a.hub.publish(Event{Type: EventTyping, Channel: channel, MessageID: id})
	return nil
}

// Stop makes the API take no new messages (503) and settles the messages
// it still holds as refused (dropped for router.DropShuttingDown, each
// reported to the router); the one already in the router is the router's
// to finish. Call it before router.Close.
func (a *API) Stop() {
	for _, p := range a.release() {
		a.router.ReportDrop(p.msg.Channel, router.DropShuttingDown)
		o := settled(router.ErrStopping, nil)
		p.settle(o)
		a.hub.publish(doneEvent(p.msg.Channel, p.id, o))
	}
}

// release marks the API stopping and takes every held message that is
// not in the router out of its lane.
func (a *API) release() []*pending {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopping = true
	var out []*pending
	for _, l := range a.lanes {
		out = append(out, l.waiting...)
		a.pending -= len(l.waiting)
		l.waiting = nil
	}
	return out
}

// Held returns the messages the API holds across channels, those in the
// router included (metrics gauge, beside router.QueueDepth: the API hands
// the router one message per channel at a time).
func (a *API) Held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending
}

// draining reports whether Stop was called: readiness is false from then.
func (a *API) draining() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopping
}

// Close stops the API (see Stop), ends every event stream and waits until
// the channel goroutines have exited (each exits once the router settles
// its message, which router.Close guarantees) or ctx ends.
func (a *API) Close(ctx context.Context) error {
	a.Stop()
	a.hub.close()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("httpapi: close: %w", ctx.Err())
	}
}
