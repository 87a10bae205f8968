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
//   - A message may carry attachments as base64 JSON, every bound checked
//     before any is decoded, the memory they take bounded across requests
//     (attachments.go). A reply's files go out as base64 on its last reply
//     event and in the wait answer; an event is encoded once for every
//     stream, and the events with files held for streams are bounded
//     (events.go).
//   - The author of a message is the identity "http:<author.id>", resolved
//     by the router's access rules like any other surface's author.
//   - A message is submitted to the router at once and admitted there,
//     once; the router alone keeps each channel's order and queue bound.
//     Every chunk and typing call the router delivers names the message it
//     answers (router.Delivery.InReplyTo), which is how a reply reaches the
//     request waiting for it and the events carry the message's id.
//     Background reports are reply events of no message. Options.MaxPending
//     bounds the messages the API awaits across channels.
//   - Owner actions go through the router's owner commands: on, off,
//     status and fresh run on the channel's queue behind every message
//     accepted before them; stop acts at once.
//   - Every message that does not run names its reason (router.DropReasons()):
//     200 {"channel","dropped":true,"reason"} when the router drops it at
//     once; "dropped" and "reason" in the done event and the wait answer
//     when it is dropped later; "reason" beside the error of a 429 (queue
//     full) or 503 (shutting down). Drops the API decides itself are
//     reported to the router (router.ReportDrop), so all are counted once.
//   - A message's events come in order: typing, replies, then done. Events
//     of different messages, done events included, may interleave.
//   - With Options.Preview, while a message's model answer streams, "delta"
//     events carry the text added to its preview since the previous delta
//     of that message, at most one per router.PreviewInterval; joined in
//     order they are the preview so far (the turn's streamed answers, one
//     blank line between two). They come before the message's replies and
//     never replace them: the reply events are the worker's answer, which
//     may differ. Without Preview (the default) no delta is sent.
//   - Events fan out to subscribers through bounded buffers; a subscriber
//     that falls behind is dropped, never waited for.
//   - The restarting notice about a message an earlier process of the host
//     took and never answered (router.KindRestarted) is a reply event and a
//     done event (dropped, shutting_down) naming it; when no stream of its
//     channel is open, they are kept for the first one that opens (at most
//     1,024 events, 15 minutes), and the log names a message whose notice
//     no stream took.
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
	// DefaultMaxPending bounds the messages awaited (queued or running)
	// across all channels, so a flood of fresh room names cannot grow
	// memory.
	DefaultMaxPending = 4096
	// DefaultWaitTimeout bounds a "wait": true request: the longest turn
	// (10 minutes) plus time in the channel's queue.
	DefaultWaitTimeout = 15 * time.Minute
	// MaxBodyBytes bounds a request body outside attachment data (all
	// of a body without attachments): two 32,000-unit texts, fully
	// escaped, fit.
	MaxBodyBytes = 512 << 10
	// DefaultMaxRequestBytes bounds a message body with attachments:
	// MaxBodyBytes and the base64 of rtsandbox.MaxAttachmentsTotal
	// (50 MiB decoded), 70,429,356 bytes.
	DefaultMaxRequestBytes = MaxBodyBytes + (rtsandbox.MaxAttachmentsTotal+2)/3*4
	// DefaultMaxUploads bounds the message bodies past MaxBodyBytes read
	// at once: each buffers up to about four times its largest
	// attachment's base64 while it is decoded (about 133 MiB).
	DefaultMaxUploads = 2
	// DefaultMaxHeldAttachmentBytes bounds the decoded attachment bytes
	// of the messages the API holds (decoding, queued or running): four
	// messages at the 50 MiB bound.
	DefaultMaxHeldAttachmentBytes = 4 * rtsandbox.MaxAttachmentsTotal
	// DefaultMaxEventFileBytes bounds the reply events with files held
	// for event streams (events.go), each counted once however many
	// streams hold it: two replies at the 50 MiB bound, encoded.
	DefaultMaxEventFileBytes = 2 * maxFilesEvent
	// maxFilesEvent is about the largest reply event with files: the
	// base64 of 50 MiB, ten names fully escaped, a chunk.
	maxFilesEvent = (rtsandbox.MaxReplyFilesTotal+2)/3*4 + rtsandbox.MaxReplyFiles*2048 + 64<<10
	// MaxHeaderBytes bounds request headers (see NewServer).
	MaxHeaderBytes = 16 << 10
	// heartbeat keeps idle event streams (and proxies) alive.
	heartbeat = 15 * time.Second
	// writeTimeout bounds one write to a client.
	writeTimeout = 10 * time.Second
)

// Options configure an API. Router, Token are required.
type Options struct {
	// Router receives messages and owner commands. The wiring registers
	// the API as its surface for Prefix (router.AddSurface).
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
	// MaxPending bounds awaited messages across channels; 0 means
	// DefaultMaxPending. A channel's own bound is the router's.
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
	// Preview emits delta events while a message's answer streams (see
	// the package doc). Off by default.
	Preview bool
	// MaxRequestBytes bounds a message body with attachments, from
	// MaxBodyBytes to DefaultMaxRequestBytes; 0 means
	// DefaultMaxRequestBytes. A smaller bound refuses large attachments
	// with 413 before they are read.
	MaxRequestBytes int64
	// MaxUploads bounds message bodies past MaxBodyBytes read at once; 0
	// means DefaultMaxUploads. One more is refused with 503.
	MaxUploads int
	// MaxHeldAttachmentBytes bounds the decoded attachments of the
	// messages the API holds; 0 means DefaultMaxHeldAttachmentBytes, and
	// at least rtsandbox.MaxAttachmentsTotal. A message past it is
	// refused with 503.
	MaxHeldAttachmentBytes int64
	// MaxEventFileBytes bounds the encoded reply events with files held
	// for event streams, each counted once (events.go); 0 means
	// DefaultMaxEventFileBytes. Streams that hold such events when a new
	// one would pass it are dropped, the slowest first.
	MaxEventFileBytes int64
}

// API is the HTTP chat surface. It implements router.Surface for Prefix.
type API struct {
	router  *router.Router
	opts    Options
	log     *slog.Logger
	origins map[string]bool
	hub     *hub
	// uploads holds a token per body past MaxBodyBytes being read;
	// attached is the decoded attachment bytes held (attachments.go).
	uploads  chan struct{}
	attached *budget
	// refusals bounds the log of refused tokens (refusals.go).
	refusals refusalLimiter

	mu       sync.Mutex
	pending  map[string]*pending // by message id, until the router settles it
	stopping bool
	wg       sync.WaitGroup // one goroutine per pending message
}

var _ router.PreviewSurface = (*API)(nil)

// New checks opts and returns the API; register it with the router for
// Prefix before serving. Errors wrap rtsandbox.ErrInvalid.
func New(opts Options) (*API, error) {
	if opts.Router == nil || opts.Token == nil {
		return nil, fmt.Errorf("httpapi: Router and Token are required: %w", rtsandbox.ErrInvalid)
	}
	if opts.MaxPending < 0 || opts.EventBuffer < 0 || opts.MaxSubscribers < 0 || opts.WaitTimeout < 0 ||
		opts.MaxUploads < 0 || opts.MaxEventFileBytes < 0 {
		return nil, fmt.Errorf("httpapi: negative limit: %w", rtsandbox.ErrInvalid)
	}
	opts.MaxRequestBytes = cmp.Or(opts.MaxRequestBytes, DefaultMaxRequestBytes)
	if opts.MaxRequestBytes < MaxBodyBytes || opts.MaxRequestBytes > DefaultMaxRequestBytes {
		return nil, fmt.Errorf("httpapi: MaxRequestBytes %d outside %d to %d: %w", opts.MaxRequestBytes, MaxBodyBytes, DefaultMaxRequestBytes, rtsandbox.ErrInvalid)
	}
	opts.MaxHeldAttachmentBytes = cmp.Or(opts.MaxHeldAttachmentBytes, DefaultMaxHeldAttachmentBytes)
	if opts.MaxHeldAttachmentBytes < rtsandbox.MaxAttachmentsTotal {
		return nil, fmt.Errorf("httpapi: MaxHeldAttachmentBytes below one message's %d: %w", rtsandbox.MaxAttachmentsTotal, rtsandbox.ErrInvalid)
	}
	opts.MaxUploads = cmp.Or(opts.MaxUploads, DefaultMaxUploads)
	opts.MaxEventFileBytes = cmp.Or(opts.MaxEventFileBytes, DefaultMaxEventFileBytes)
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
		hub:     newHub(opts.EventBuffer, opts.MaxSubscribers, opts.MaxEventFileBytes),
		pending: map[string]*pending{},

		uploads:  make(chan struct{}, opts.MaxUploads),
		attached: &budget{max: opts.MaxHeldAttachmentBytes},
	}
	for _, o := range opts.AllowedOrigins {
		a.origins[o] = true
	}
	a.hub.unheard = func(e Event) {
		if e.Type == EventDone {
			a.log.Warn("restart notice not delivered: no event stream of its channel opened in time",
				"channel", e.Channel, "message", e.MessageID, "kept_for", keptTTL.String())
		}
	}
	return a, nil
}

// Deliver implements router.Surface: the chunk becomes a reply event
// naming the message it answers ("" for a report) and part of that
// message's waiting answer; a preview becomes a delta event of the text
// it adds. It never blocks.
func (a *API) Deliver(_ context.Context, d router.Delivery) error {
	if d.Kind == router.KindRestarted {
		a.restarted(d)
		return nil
	}
	if d.Kind == router.KindPreview {
		if text := a.delta(d); text != "" && a.opts.Preview {
			a.hub.publish(Event{Type: EventDelta, Channel: d.Channel, MessageID: d.InReplyTo, Chunk: text})
		}
		return nil
	}
	a.record(d)
	a.hub.publish(Event{Type: EventReply, Channel: d.Channel, MessageID: d.InReplyTo, Chunk: d.Chunk, Files: wireFiles(d.Files)})
	return nil
}

// restarted posts the restarting notice about a message an earlier
// process took and never answered (router.KindRestarted): a reply event
// with the notice, then a done event saying the message was dropped for
// the shutdown, both kept for the first stream of the channel when no
// stream is open to take them (hub.keep): the client reconnects after the
// restart. A notice no stream took is logged.
func (a *API) restarted(d router.Delivery) {
	a.hub.keep(
		Event{Type: EventReply, Channel: d.Channel, MessageID: d.InReplyTo, Chunk: d.Chunk},
		doneEvent(d.Channel, d.InReplyTo, outcome{reason: router.DropShuttingDown, err: router.ErrStopping}))
}

// Previews implements router.PreviewSurface: Options.Preview.
func (a *API) Previews() bool { return a.opts.Preview }

// Typing implements router.Surface: it becomes a typing event for the
// message. It never blocks.
func (a *API) Typing(_ context.Context, channel rtsandbox.ChannelKey, inReplyTo string) error {
	a.hub.publish(Event{Type: EventTyping, Channel: channel, MessageID: inReplyTo})
	return nil
}

// Stop marks the API draining: /readyz answers 503 from now on. The
// messages the router holds are the router's to settle: router.Drain
// refuses those still waiting (each then answers 503, dropped for
// router.DropShuttingDown) and router.Close the rest. Call Stop, then
// router.Drain, before router.Close.
func (a *API) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopping = true
}

// Held returns the messages the API awaits across channels: each is
// queued or running in the router, so router.QueueDepth counts them too.
func (a *API) Held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

// draining reports whether Stop was called: readiness is false from then.
func (a *API) draining() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopping
}

// Close stops the API (see Stop), ends every event stream and waits until
// every pending message is settled (router.Close guarantees it) or ctx
// ends.
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
