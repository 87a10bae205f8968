package host

import (
	"context"
	"sync"

	"github.com/rtsandbox/rtsandbox"
)

// report is one research outcome on its way to the router, with where the
// router's answer goes.
type report struct {
	ctx     context.Context
	channel rtsandbox.ChannelKey
	text    string
	done    chan error // buffered: the pipe never blocks on a gone sender
}

// reportPoster is what posts a report: the router (PostReport).
type reportPoster interface {
	PostReport(ctx context.Context, channel rtsandbox.ChannelKey, text string) error
}

// reportPipe carries research outcomes from the delegation tool to the
// router. The tool is built with the runtime, before the router that needs
// the runtime; the pipe is the one place the two meet, so nothing is
// bound late. A report sent before the pipe runs waits for it (or for its
// own ctx); none can be sent after the pipe stopped.
type reportPipe struct {
	ch   chan report
	quit chan struct{} // closed by the stop function of pipe
}

func newReportPipe() *reportPipe {
	return &reportPipe{ch: make(chan report), quit: make(chan struct{})}
}

// errPipeStopped answers a report sent while the host shuts down.
var errPipeStopped = rtsandbox.ErrEndedEarly

// SendReply implements delegate.Poster: it hands the report to the pipe and
// waits for the router's answer.
func (p *reportPipe) SendReply(ctx context.Context, channel rtsandbox.ChannelKey, text string) error {
	r := report{ctx: ctx, channel: channel, text: text, done: make(chan error, 1)}
	select {
	case p.ch <- r:
	case <-p.quit:
		return errPipeStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pipe posts every report through to until the returned function is
// called; that function waits for the goroutine to end.
func (p *reportPipe) pipe(to reportPoster) (stop func()) {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case r := <-p.ch:
				r.done <- to.PostReport(r.ctx, r.channel, r.text)
			case <-p.quit:
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(p.quit) }); <-ended }
}
