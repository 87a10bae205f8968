package host

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

// postedReports records what the pipe hands the router.
type postedReports struct {
	mu  sync.Mutex
	got []string
	err error
}

func (p *postedReports) PostReport(_ context.Context, channel rtsandbox.ChannelKey, text string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, string(channel)+": "+text)
	return p.err
}

// A report sent before the router exists waits for the pipe, then posts;
// the router's answer is the sender's; after the pipe stops a report is
// ended early; a sender whose ctx ends stops waiting.
func TestReportPipe(t *testing.T) {
	p := newReportPipe()
	to := &postedReports{}
	early := make(chan error, 1)
	go func() { early <- p.SendReply(context.Background(), "http:a", "first") }()
	select {
	case err := <-early:
		t.Fatalf("SendReply before the pipe ran = %v; want it to wait", err)
	case <-time.After(50 * time.Millisecond):
	}
	stop := p.pipe(to)
	if err := <-early; err != nil {
		t.Fatalf("early report = %v", err)
	}
	to.err = errors.New("not sandboxed")
	if err := p.SendReply(context.Background(), "http:b", "second"); err == nil || err.Error() != "not sandboxed" {
		t.Errorf("SendReply = %v; want the router's error", err)
	}
	stop()
	stop() // twice is fine
	if err := p.SendReply(context.Background(), "http:c", "late"); !errors.Is(err, rtsandbox.ErrEndedEarly) {
		t.Errorf("SendReply after stop = %v; want ErrEndedEarly", err)
	}
	if diff := cmp.Diff([]string{"http:a: first", "http:b: second"}, to.got); diff != "" {
		t.Errorf("posted (-want +got):\n%s", diff)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := newReportPipe().SendReply(ctx, "http:d", "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("SendReply with an ended ctx = %v; want context.Canceled", err)
	}
}
