package router

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
)

// Previews (issue 11 item 4): while a sandbox turn's model answer streams,
// a surface that opted in (PreviewSurface) sees the text so far as
// KindPreview deliveries for the message, at most one per PreviewInterval,
// the first as soon as there is text. The text of the turn's answers is
// joined with a blank line (an answer before a tool call, then the next),
// so a preview only ever grows; it keeps the first MaxPreviewBytes. The
// observer only appends under a lock and wakes one goroutine per message,
// which delivers; the broker's relay never waits for a surface.

const (
	// PreviewInterval is the least time between two previews of one
	// message: Discord edits a message at most so often.
	PreviewInterval = 1500 * time.Millisecond
	// MaxPreviewBytes bounds the preview text a message's turn keeps: the
	// reply's own bound (UTF-8 bytes are never fewer than UTF-16 units).
	MaxPreviewBytes = rtsandbox.MaxReplyText
	// answerSeparator joins the text of a turn's answers.
	answerSeparator = "\n\n"
)

// preview is one message's preview text and its waker.
type preview struct {
	mu     sync.Mutex
	text   []byte
	answer int
	dirty  bool // text changed since the last delivery
	wake   chan struct{}
}

// add appends delta of answer to the text, up to MaxPreviewBytes (cut at
// a rune boundary), and wakes the deliverer. It never blocks.
func (p *preview) add(answer int, delta string) {
	p.mu.Lock()
	if answer != p.answer && len(p.text) > 0 {
		delta = answerSeparator + delta
	}
	p.answer = answer
	if room := MaxPreviewBytes - len(p.text); len(delta) > room {
		delta = delta[:room]
		for len(delta) > 0 { // drop a rune the cut split
			if r, size := utf8.DecodeLastRuneInString(delta); r != utf8.RuneError || size > 1 {
				break
			}
			delta = delta[:len(delta)-1]
		}
	}
	if delta != "" {
		p.text, p.dirty = append(p.text, delta...), true
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns the text when it changed since the last take and is not
// blank.
func (p *preview) take() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dirty || strings.TrimSpace(string(p.text)) == "" {
		return "", false
	}
	p.dirty = false
	return string(p.text), true
}

// startPreview starts the previews of message id, when its surface takes
// them; see Port.StartPreview.
func (r *Router) startPreview(ctx context.Context, channel rtsandbox.ChannelKey, id string) (func(int, string), func()) {
	s, ok := r.surface(channel).(PreviewSurface)
	if !ok || !s.Previews() {
		return nil, func() {}
	}
	p := &preview{wake: make(chan struct{}, 1)}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		r.previewLoop(ctx, quit, s, p, Delivery{Channel: channel, InReplyTo: id, Kind: KindPreview})
	}()
	return p.add, func() { close(quit); <-done }
}

// previewLoop delivers p's text whenever it changed, at most once per
// PreviewInterval, until quit is closed or ctx ends. Quitting does not
// cancel a preview in flight (at most SendTimeout): a surface that posted
// it must learn so, or it could not take it down when the reply comes. A
// failed preview is logged and the next one tried; a panicking surface is
// not asked again.
func (r *Router) previewLoop(ctx context.Context, quit <-chan struct{}, s Surface, p *preview, d Delivery) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-quit:
			return
		case <-p.wake:
		}
		if wait := PreviewInterval - time.Since(last); !last.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-quit:
				t.Stop()
				return
			case <-t.C:
			}
		}
		text, ok := p.take()
		if !ok {
			continue
		}
		if !r.passes(d.Channel, KindPreview, text) {
			return // the reply, checked at the door too, still follows
		}
		d.Chunk = text
		err := r.call(ctx, d.Channel, "preview", 0, func(ctx context.Context) error { return s.Deliver(ctx, d) })
		last = time.Now()
		if errors.Is(err, ErrPanicked) {
			return
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("preview failed", "channel", d.Channel, "err", err)
		}
	}
}
