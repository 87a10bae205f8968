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
type hub struct {
	buffer, max int

	mu     sync.Mutex
	subs   map[*subscriber]bool
	closed bool
}

type subscriber struct {
	channel  rtsandbox.ChannelKey // "" = every http: channel
	events   chan Event
	overflow bool // set before events is closed for falling behind
}

var errTooManySubscribers = errors.New("httpapi: too many event subscribers")

func newHub(buffer, max int) *hub {
	return &hub{buffer: buffer, max: max, subs: map[*subscriber]bool{}}
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
	return s, nil
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[s] {
		delete(h.subs, s)
		close(s.events)
	}
}

func (h *hub) publish(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.channel != "" && s.channel != e.Channel {
			continue
		}
		select {
		case s.events <- e:
		default: // slow: drop the subscriber, never wait for it
			s.overflow = true
			delete(h.subs, s)
			close(s.events)
		}
	}
}

// close ends every stream; later subscriptions are refused.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
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
				seq++
				data, _ := json.Marshal(e) // strings only: cannot fail
				if !writeSSE(rc, w, "id: "+strconv.FormatUint(seq, 10)+"\nevent: "+e.Type+"\ndata: "+string(data)+"\n\n") {
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
