package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/chunk"
)

// turnPort is the Port of one admitted message: what its turn posts
// answers it.
type turnPort struct {
	r       *Router
	channel rtsandbox.ChannelKey
	id      string
}

func (p turnPort) Reply(ctx context.Context, text string) error {
	return p.ReplyFiles(ctx, text, nil)
}

func (p turnPort) ReplyFiles(ctx context.Context, text string, files []rtsandbox.File) error {
	return p.r.deliver(ctx, Delivery{Channel: p.channel, InReplyTo: p.id, Kind: KindReply, Files: files}, text)
}

func (p turnPort) StartTyping(ctx context.Context) (stop func()) {
	return p.r.startTyping(ctx, p.channel, p.id)
}

func (p turnPort) StartPreview(ctx context.Context) (func(int, string), func()) {
	return p.r.startPreview(ctx, p.channel, p.id)
}

func (r *Router) surface(channel rtsandbox.ChannelKey) Surface {
	prefix, _, _ := strings.Cut(string(channel), ":")
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.surfaces[prefix]
}

// refused posts (blocking; call it off the caller's goroutine) the fixed
// notice for an admitted message that will not run: once per channel
// while the host stops, once per run of refusals while the queue is full.
// Bots and integrations get no notice. The drop itself is recorded by the
// caller.
func (r *Router) refused(m Message, err error) {
	var text string
	r.mu.Lock()
	switch {
	case errors.Is(err, ErrStopping):
		if !r.stopNotice[m.Channel] {
			r.stopNotice[m.Channel] = true
			text = rtsandbox.RestartingText
		}
	case errors.Is(err, ErrQueueFull):
		if !r.fullNotice[m.Channel] {
			r.fullNotice[m.Channel] = true
			text = rtsandbox.QueueFullText
		}
	}
	r.mu.Unlock()
	if text == "" || m.Author.Bot || m.Author.Integration {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), noticeTimeout)
	defer cancel()
	d := Delivery{Channel: m.Channel, InReplyTo: m.ID, Kind: KindNotice}
	if err := r.deliver(ctx, d, text); err != nil {
		r.log.Error("could not post a notice", "channel", m.Channel, "err", err)
	}
}

// NotifyRestarted posts the restarting notice (rtsandbox.RestartingText,
// a KindRestarted delivery naming id) about a message an earlier process
// of the host took in channel and never answered, through the door and
// within the delivery bounds, and forgets it in the ledger
// (Options.InFlight) whatever the outcome: a message is told at most
// once. It fails with ErrNoSurface when no surface serves the channel now
// (the message is then only logged by the caller), or with the
// surface's error. ctx bounds the post.
func (r *Router) NotifyRestarted(ctx context.Context, channel rtsandbox.ChannelKey, id string) error {
	defer r.inFlight.End(channel, id)
	return r.deliver(ctx, Delivery{Channel: channel, InReplyTo: id, Kind: KindRestarted}, rtsandbox.RestartingText)
}

// deliver passes text and d.Files through the door (door.go), cuts what
// may leave into chunks and posts them as deliveries like d, in order,
// within the delivery bounds: at most chunk.MaxChunks chunks (a longer
// text ends with rtsandbox.ReplyCutNotice), each call within SendTimeout,
// all within ReplyTimeout. The files go on the last chunk only (one empty
// chunk when there is none), whose call and the whole reply may take
// SendTimeout more per file. It fails with ErrNoSurface when no surface
// serves the channel.
func (r *Router) deliver(ctx context.Context, d Delivery, text string) error {
	s := r.surface(d.Channel)
	if s == nil {
		return fmt.Errorf("%s to %s: %w", d.Kind, d.Channel, ErrNoSurface)
	}
	text, files := r.guard(d, text, d.Files)
	chunks, cut := chunk.Bounded(text, chunk.ChunkLimit, chunk.MaxChunks)
	if cut {
		r.log.Info("reply cut: too long to post in full", "channel", d.Channel, "kind", string(d.Kind),
			"units", rtsandbox.UTF16Len(text), "max_chunks", chunk.MaxChunks)
	}
	if len(files) > 0 && len(chunks) == 0 {
		chunks = []string{""} // the files still go out
	}
	what := "send"
	if d.Kind == KindReport {
		what = "report"
	}
	upload := time.Duration(len(files)) * r.sendTO
	ctx, cancel := context.WithTimeout(ctx, r.replyTO+upload)
	defer cancel()
	for i, c := range chunks {
		d.Chunk, d.Files = c, nil
		extra := time.Duration(0)
		if i == len(chunks)-1 {
			d.Files, extra = files, upload
		}
		err := r.call(ctx, d.Channel, what, extra, func(ctx context.Context) error { return s.Deliver(ctx, d) })
		if err != nil {
			return fmt.Errorf("%s chunk %d of %d to %s: %w", what, i+1, len(chunks), d.Channel, err)
		}
	}
	return nil
}

// call makes one surface call with SendTimeout plus extra; a panic in it
// is recovered, logged and returned as an error wrapping ErrPanicked.
func (r *Router) call(ctx context.Context, channel rtsandbox.ChannelKey, what string, extra time.Duration, f func(context.Context) error) (err error) {
	ctx, cancel := context.WithTimeout(ctx, r.sendTO+extra)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = recovered(r.log, channel, "surface "+what, p)
		}
	}()
	return f(ctx)
}

// ErrNotSandboxed marks a report for a channel that is no longer
// sandboxed; it is dropped, not posted.
var ErrNotSandboxed = errors.New("router: the channel is no longer sandboxed")

// PostReport posts a background report (a research result) to channel as
// KindReport deliveries tied to no message, on the channel's queue, so it
// never interleaves with a turn's replies, and only while the channel is
// still sandboxed, through the door and within the delivery bounds of a
// reply (the router cuts text into chunks after the door). ctx bounds
// only the wait.
func (r *Router) PostReport(ctx context.Context, channel rtsandbox.ChannelKey, text string) error {
	return r.inQueue(ctx, channel, func(ctx context.Context) error {
		if !r.channels.Enabled(channel) {
			r.log.Warn("report dropped: the channel is no longer sandboxed", "channel", channel)
			return ErrNotSandboxed
		}
		return r.deliver(ctx, Delivery{Channel: channel, Kind: KindReport}, text)
	})
}

// startTyping shows typing for message id now and every TypingInterval
// until the returned stop is called.
func (r *Router) startTyping(ctx context.Context, channel rtsandbox.ChannelKey, id string) (stop func()) {
	s := r.surface(channel)
	if s == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.typing)
		defer t.Stop()
		for {
			err := r.call(ctx, channel, "typing", 0, func(ctx context.Context) error { return s.Typing(ctx, channel, id) })
			if errors.Is(err, ErrPanicked) {
				return // logged; a broken surface is not asked again
			}
			if err != nil && ctx.Err() == nil {
				r.log.Warn("typing indicator failed", "channel", channel, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
