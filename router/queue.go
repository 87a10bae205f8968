package router

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/rtsandbox/rtsandbox"
)

// queue runs tasks one at a time per channel, in arrival order; channels
// run concurrently (docs/host.md, "Routing rules"). A task starts once the previous task of
// its channel has settled, whatever its outcome. Each channel with work has
// one goroutine, which exits when the channel's list is empty.
type queue struct {
	ctx   context.Context // tasks run under it; cancelled by abort
	limit int             // bounded tasks per channel, running one included
	log   *slog.Logger    // recovered panics

	mu     sync.Mutex
	lanes  map[rtsandbox.ChannelKey]*lane
	closed bool
	// draining: bounded tasks (guest messages) are refused; others are
	// still taken until closed.
	draining bool
	wg       sync.WaitGroup
}

type lane struct {
	waiting []*task
	running bool
}

type task struct {
	bounded bool
	run     func(ctx context.Context) error
	done    chan error // buffered: the runner never blocks on a gone caller
}

func newQueue(ctx context.Context, limit int, log *slog.Logger) *queue {
	return &queue{ctx: ctx, limit: limit, log: log, lanes: map[rtsandbox.ChannelKey]*lane{}}
}

// push appends run to channel's list. A bounded task is refused with
// ErrQueueFull when the channel already has limit tasks; every task is
// refused with ErrStopping once the queue is closed.
func (q *queue) push(channel rtsandbox.ChannelKey, bounded bool, run func(context.Context) error) (*task, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || (bounded && q.draining) {
		return nil, ErrStopping
	}
	l := q.lanes[channel]
	if l == nil {
		l = &lane{}
		q.lanes[channel] = l
		q.wg.Add(1)
		go q.drain(channel, l)
	}
	if bounded && l.size() >= q.limit {
		return nil, ErrQueueFull
	}
	t := &task{bounded: bounded, run: run, done: make(chan error, 1)}
	l.waiting = append(l.waiting, t)
	return t, nil
}

func (l *lane) size() int {
	n := len(l.waiting)
	if l.running {
		n++
	}
	return n
}

// drain runs channel's tasks until none is left. A task's slot is free
// before its caller learns the outcome, so a surface that submits the next
// message as soon as the last one settled never finds the channel full.
func (q *queue) drain(channel rtsandbox.ChannelKey, l *lane) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		if len(l.waiting) == 0 {
			delete(q.lanes, channel)
			q.mu.Unlock()
			return
		}
		t := l.waiting[0]
		l.waiting = l.waiting[1:]
		l.running = true
		q.mu.Unlock()
		err := q.safeRun(channel, t)
		q.mu.Lock()
		l.running = false
		q.mu.Unlock()
		t.done <- err
	}
}

// safeRun turns a panic into an error so one broken task cannot take the
// channel (or the host) down with it.
func (q *queue) safeRun(channel rtsandbox.ChannelKey, t *task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = recovered(q.log, channel, "task", p)
		}
	}()
	return t.run(q.ctx)
}

// size returns running plus waiting tasks of channel.
func (q *queue) size(channel rtsandbox.ChannelKey) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lanes[channel]; l != nil {
		return l.size()
	}
	return 0
}

// depth returns running plus waiting tasks across channels.
func (q *queue) depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, l := range q.lanes {
		n += l.size()
	}
	return n
}

// busy returns the channels with any task, sorted.
func (q *queue) busy() []rtsandbox.ChannelKey {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]rtsandbox.ChannelKey, 0, len(q.lanes))
	for k := range q.lanes {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// drain refuses new bounded tasks and settles every waiting one with
// ErrStopping; running tasks and unbounded ones (owner commands, reports)
// go on.
func (q *queue) refuseBounded() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.draining = true
	for _, l := range q.lanes {
		l.waiting = slices.DeleteFunc(l.waiting, func(t *task) bool {
			if t.bounded {
				t.done <- ErrStopping
			}
			return t.bounded
		})
	}
}

// close refuses new tasks and settles every waiting one with ErrStopping;
// running tasks go on. It reports whether this call closed the queue.
func (q *queue) close() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.closed = true
	for _, l := range q.lanes {
		for _, t := range l.waiting {
			t.done <- ErrStopping
		}
		l.waiting = nil
	}
	return true
}

// wait returns when every channel goroutine has exited or ctx ends.
func (q *queue) wait(ctx context.Context) error {
	q.mu.Lock()
	idle := q.closed && len(q.lanes) == 0
	q.mu.Unlock()
	if idle {
		// Nothing ran or runs: an ended ctx cancelled nothing, so say
		// nil (a failed start closes with an ended ctx). The lanes'
		// goroutines, if any, are only returning.
		q.wg.Wait()
		return nil
	}
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
