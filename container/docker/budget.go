package docker

import (
	"context"
	"math/rand/v2"
	"time"
)

// The deadline budget of a run. A run whose context has a deadline D gives
// up the last part of it for cleanup: the worker is cut at D − reserve,
// where reserve is a quarter of the time left when Run starts, at most
// maxReserve; then kill and removal may run until D + overrun at the
// latest. Whatever is not confirmed removed by then is handed to the
// background remover. So Run never returns later than D + overrun (plus
// local bookkeeping), even when every engine call hangs, and a 120 s turn
// gives its worker 118 s.
const (
	maxReserve = 2 * time.Second
	overrun    = 500 * time.Millisecond
	// cleanupBudget bounds the foreground cleanup of a run that ended
	// well before its deadline, or that has none.
	cleanupBudget = 2 * time.Second
)

// ReturnBound is the latest a Run given a context that ends after timeout
// returns, by the budget above: the deadline plus the overrun that kill
// and removal may take. Tests derive their time bounds from it (plus the
// scheduling slack of a loaded machine) instead of guessing.
func ReturnBound(timeout time.Duration) time.Duration { return timeout + overrun }

// budget is one run's time plan; the zero value (no deadline) cuts nothing
// and bounds the cleanup by cleanupBudget alone.
type budget struct {
	cut  time.Time // the worker's run ends here
	stop time.Time // no engine call of this run outlives this
}

func newBudget(ctx context.Context, now time.Time) budget {
	deadline, ok := ctx.Deadline()
	if !ok {
		return budget{}
	}
	reserve := max(0, min(maxReserve, deadline.Sub(now)/4))
	return budget{cut: deadline.Add(-reserve), stop: deadline.Add(overrun)}
}

// runContext is ctx cut at the budget's cut time.
func (b budget) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.cut.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, b.cut)
}

// bounded is a context that ignores ctx's cancellation (cleanup must run
// after an abort) and ends after d, and at the budget's stop at the latest.
func (b budget) bounded(ctx context.Context, now time.Time, d time.Duration) (context.Context, context.CancelFunc) {
	end := now.Add(d)
	if !b.stop.IsZero() && b.stop.Before(end) {
		end = b.stop
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

// backoff is a capped exponential backoff with jitter: base doubled per
// attempt up to max, then scaled by a random factor in [0.8, 1.2) so that
// removals queued together do not retry in step.
type backoff struct {
	base, max time.Duration
}

// delay is the wait after attempt (0-based) failed; r in [0, 1) is the
// random draw.
func (b backoff) delay(attempt int, r float64) time.Duration {
	d := b.max
	if attempt < 32 && b.base<<attempt < b.max && b.base<<attempt > 0 {
		d = b.base << attempt
	}
	return time.Duration(float64(d) * (0.8 + 0.4*r))
}

// wait sleeps for the attempt's delay, or until ctx ends or wake is
// closed; it reports whether ctx is still live.
func (b backoff) wait(ctx context.Context, attempt int, wake <-chan struct{}) bool {
	t := time.NewTimer(b.delay(attempt, rand.Float64()))
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return false
	}
	return true
}
