package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/router"
)

// Event types of the event stream (the SSE "event:" field).
const (
	// EventReply carries one chunk posted to a channel.
	EventReply = "reply"
	// EventTyping says the assistant is working on a message.
	EventTyping = "typing"
	// EventDone says a message is settled: answered, dropped or refused.
	EventDone = "done"
	// EventDelta carries text added to a message's preview while its
	// answer streams (Options.Preview), in Chunk.
	EventDelta = "delta"
)

// Event is one server-sent event; its JSON is the SSE "data:" field.
type Event struct {
	Type      string               `json:"-"`
	Channel   rtsandbox.ChannelKey `json:"channel"`
	MessageID string               `json:"message_id,omitempty"`
	Chunk     string               `json:"chunk,omitempty"`
	// Done events only. Dropped and Reason (a router.Drop* reason) say the
	// message did not run; Error is the fixed text of a refusal (a full
	// queue, a shutdown, an internal failure).
	Dropped bool   `json:"dropped,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Error   string `json:"error,omitempty"`
	// Files are a reply event's files, on the last chunk of a reply
	// that has them.
	Files []File `json:"files,omitempty"`

	// wire is the event's JSON, encoded once when it is published and
	// shared by every stream; files counts an event with files against
	// the hub's bound.
	wire  []byte
	files *payload
}

// payload is one published event with files: its encoded size and the
// streams holding it (in their buffer or writing it), under hub.mu.
type payload struct {
	size int64
	refs int
}

func doneEvent(channel rtsandbox.ChannelKey, id string, o outcome) Event {
	e := Event{Type: EventDone, Channel: channel, MessageID: id, Dropped: o.reason != "", Reason: o.reason}
	if o.err != nil {
		e.Error = refusalText(o.err)
	}
	return e
}

// hub fans events out to subscribers. publish never blocks: a subscriber
// whose buffer is full is dropped (its channel closed, overflow set).
//
// Memory: an event is encoded once, when it is published; every stream
// writes that one encoding. The encodings of events with files that some
// stream still holds (buffered, or being written) are counted once each
// in live, bounded by maxFiles: before publishing one that would pass
// it, the hub drops the streams holding such events in their buffers,
// the one holding the most first, until it fits or none is left (the
// events being written are freed when their write ends, within its
// deadline).
type hub struct {
	buffer, max int
	maxFiles    int64
	now         func() time.Time
	// unheard receives the held events that expired or were pushed out
	// untaken (keep); it must not block.
	unheard func(Event)

	mu     sync.Mutex
	subs   map[*subscriber]bool
	closed bool
	live   int64 // encoded bytes of the payloads held
	// kept are events no stream took when they were published, waiting
	// for the first stream of their channel (keep), oldest first.
	kept []keptEvent
}

// keptEvent is an event kept for a later stream, until its expiry.
type keptEvent struct {
	e       Event
	expires time.Time
}

// Bounds of the events kept for later streams (hub.keep): the restart
// notices of the messages an earlier process left unanswered, which a
// client can only read once it has reconnected its stream.
const (
	maxKept = 1024
	keptTTL = DefaultWaitTimeout
)

type subscriber struct {
	channel  rtsandbox.ChannelKey // "" = every http: channel
	events   chan Event
	overflow bool  // set before events is closed for falling behind
	queued   int64 // encoded bytes of payloads in events, under hub.mu
}

var errTooManySubscribers = errors.New("httpapi: too many event subscribers")

func newHub(buffer, max int, maxFiles int64) *hub {
	return &hub{buffer: buffer, max: max, maxFiles: maxFiles, subs: map[*subscriber]bool{}, now: time.Now, unheard: func(Event) {}}
}

// keep publishes events (without files) of one channel, in order, and
// when no stream took them keeps them for the first stream of their
// channel that opens within keptTTL (subscribe), at most maxKept events,
// the oldest going first. An event that goes untaken is handed to
// unheard.
func (h *hub) keep(events ...Event) {
	for i := range events {
		events[i].wire, _ = json.Marshal(events[i])
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.expireLocked()
	taken := false
	for _, e := range events {
		taken = h.sendLocked(e) || taken
	}
	if taken {
		return
	}
	for _, e := range events {
		if len(h.kept) >= maxKept {
			h.unheard(h.kept[0].e)
			h.kept = h.kept[1:]
		}
		h.kept = append(h.kept, keptEvent{e: e, expires: h.now().Add(keptTTL)})
	}
}

// expireLocked lets go of the kept events past their expiry.
func (h *hub) expireLocked() {
	now := h.now()
	for len(h.kept) > 0 && !now.Before(h.kept[0].expires) {
		h.unheard(h.kept[0].e)
		h.kept = h.kept[1:]
	}
}

// sendLocked sends e (no files) to every matching subscriber and
// reports whether one took it; a slow one is dropped, as in publish.
func (h *hub) sendLocked(e Event) bool {
	taken := false
	for s := range h.subs {
		if s.channel != "" && s.channel != e.Channel {
			continue
		}
		select {
		case s.events <- e:
			taken = true
		default:
			s.overflow = true
			delete(h.subs, s)
			close(s.events)
		}
	}
	return taken
}

func (h *hub) subscribe(channel rtsandbox.ChannelKey) (*subscriber, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, router.ErrStopping
	case len(h.subs) >= h.max:
		return nil, errTooManySubscribers
	}
	s := &subscriber{channel: channel, events: make(chan Event, h.buffer)}
	h.subs[s] = true
	h.handKeptLocked(s)
	return s, nil
}

// handKeptLocked gives a new subscriber the kept events of its
// channels, as many as its buffer takes, and forgets them.
func (h *hub) handKeptLocked(s *subscriber) {
	h.expireLocked()
	left := h.kept[:0]
	for _, k := range h.kept {
		if (s.channel == "" || s.channel == k.e.Channel) && len(s.events) < cap(s.events) {
			s.events <- k.e
			continue
		}
		left = append(left, k)
	}
	clear(h.kept[len(left):])
	h.kept = left
}

// unsubscribe ends s and lets go of what its buffer still holds.
func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[s] {
		delete(h.subs, s)
		close(s.events)
	}
	h.drainLocked(s)
}

// publish encodes e once and sends it to every matching subscriber.
func (h *hub) publish(e Event) {
	e.wire, _ = json.Marshal(e) // strings and bytes only: cannot fail
	if len(e.Files) > 0 {
		e.files = &payload{size: int64(len(e.wire))}
	}
	e.Files = nil // the wire has them; the buffers need not
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.files != nil {
		h.roomLocked(e.files.size)
	}
	for s := range h.subs {
		if s.channel != "" && s.channel != e.Channel {
			continue
		}
		select {
		case s.events <- e:
			if e.files != nil {
				e.files.refs++
				s.queued += e.files.size
			}
		default: // slow: drop the subscriber, never wait for it
			s.overflow = true
			delete(h.subs, s)
			close(s.events)
		}
	}
	if e.files != nil && e.files.refs > 0 {
		h.live += e.files.size
	}
}

// roomLocked drops subscribers holding payloads in their buffers, the
// one holding the most first, until size more fits under maxFiles or no
// such subscriber is left.
func (h *hub) roomLocked(size int64) {
	for h.live+size > h.maxFiles {
		var worst *subscriber
		for s := range h.subs {
			if s.queued > 0 && (worst == nil || s.queued > worst.queued) {
				worst = s
			}
		}
		if worst == nil {
			return
		}
		worst.overflow = true
		delete(h.subs, worst)
		close(worst.events)
		h.drainLocked(worst)
	}
}

// drainLocked lets go of the events left in a closed subscriber's buffer;
// its stream, if still reading, ends sooner.
func (h *hub) drainLocked(s *subscriber) {
	for e := range s.events {
		h.releaseLocked(s, e)
	}
}

// taken marks e as out of s's buffer (its stream writes it now).
func (h *hub) taken(s *subscriber, e Event) {
	if e.files == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s.queued -= e.files.size
}

// written lets go of e once s's stream wrote it (or gave up).
func (h *hub) written(e Event) {
	if e.files == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unrefLocked(e.files)
}

func (h *hub) releaseLocked(s *subscriber, e Event) {
	if e.files != nil {
		s.queued -= e.files.size
		h.unrefLocked(e.files)
	}
}

func (h *hub) unrefLocked(p *payload) {
	if p.refs--; p.refs == 0 {
		h.live -= p.size
	}
}

// held returns the encoded bytes of the payloads held (tests).
func (h *hub) held() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live
}

// close ends every stream; later subscriptions are refused. The streams
// still write what their buffers hold, then end.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, k := range h.kept {
		h.unheard(k.e)
	}
	h.kept = nil
	for s := range h.subs {
		delete(h.subs, s)
		close(s.events)
	}
}

// handleEvents streams events of every http: channel, or of the one named
// by the "channel" query parameter. A stream ends when the client goes,
// the API closes, or the client falls behind (a final "overflow" event
// says so, when it can still be written).
func handleEvents(a *API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var channel rtsandbox.ChannelKey
		if q := r.URL.Query(); q.Has("channel") {
			c, msg := checkChannel(q.Get("channel"))
			if msg != "" {
				writeError(w, http.StatusBadRequest, "channel: "+msg)
				return
			}
			channel = c
		}
		s, err := a.hub.subscribe(channel)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		defer a.hub.unsubscribe(s)
		rc := http.NewResponseController(w)
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		if !writeSSE(rc, w, ": stream open\n\n") {
			return
		}
		tick := time.NewTicker(heartbeat)
		defer tick.Stop()
		var seq uint64
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				if !writeSSE(rc, w, ": keepalive\n\n") {
					return
				}
			case e, ok := <-s.events:
				if !ok {
					if s.overflow {
						a.log.Warn("event subscriber dropped: it fell behind", "remote", r.RemoteAddr)
						writeSSE(rc, w, "event: overflow\ndata: {}\n\n")
					}
					return
				}
				a.hub.taken(s, e)
				seq++
				ok = writeEvent(rc, w, seq, e)
				a.hub.written(e)
				if !ok {
					return
				}
			}
		}
	})
}

// writeSSE writes and flushes one block under a write deadline, so a
// client that stops reading cannot hold the handler.
func writeSSE(rc *http.ResponseController, w http.ResponseWriter, block string) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := w.Write([]byte(block)); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// writeEvent writes e as one SSE block: its shared encoding is written
// as it is, never copied per stream; the deadline grows with its size.
func writeEvent(rc *http.ResponseController, w http.ResponseWriter, seq uint64, e Event) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(writeDeadline(len(e.wire))))
	head := "id: " + strconv.FormatUint(seq, 10) + "\nevent: " + e.Type + "\ndata: "
	for _, b := range [][]byte{[]byte(head), e.wire, []byte("\n\n")} {
		if _, err := w.Write(b); err != nil {
			return false
		}
	}
	return rc.Flush() == nil
}
