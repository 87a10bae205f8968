package upstream

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/wait"
)

// Retries: an upstream that answers 429 or 503, or that refuses the
// connection, has not acted on the call, so any call is tried again. A
// call marked Idempotent (a model completion: a repeat costs tokens, never
// a second side effect) is also tried again after 500, 502, 504 and a
// connection reset or cut before the answer. Each call makes at most
// MaxAttempts attempts. The wait before a retry is the answer's
// Retry-After (or retry-after-ms) when it gives one, else an exponential
// backoff with jitter; a wait over MaxRetryWait, or one that would not
// leave the call's deadline room, ends the call with the last error
// instead: a retry never stretches a turn past its deadline.
const (
	MaxAttempts  = 3
	MaxRetryWait = 30 * time.Second
	// firstBackoff doubles per retry, with up to half of it as jitter.
	firstBackoff = 500 * time.Millisecond
)

// retryable reports whether an attempt that ended with status (0 when no
// answer came) and transport error err may be made again.
func retryable(idempotent bool, status int, err error) bool {
	switch {
	case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable:
		return true
	case status == http.StatusInternalServerError, status == http.StatusBadGateway, status == http.StatusGatewayTimeout:
		return idempotent
	case status != 0: // any other answer is final
		return false
	case errors.Is(err, syscall.ECONNREFUSED):
		return true
	}
	// No answer: a reset, a cut body, a dial failure other than refused.
	return idempotent && !errors.Is(err, ErrRedirect) && !errors.Is(err, ErrCanceled) && !errors.Is(err, ErrTooLarge)
}

// retryWait is how long to wait before attempt (1-based count of attempts
// made): the upstream's own Retry-After when it sent one, else backoff.
// ok is false when the upstream asks for more than MaxRetryWait.
func (c *Client) retryWait(attempt int, h http.Header) (time.Duration, bool) {
	if d, ok := retryAfter(h, time.Now()); ok {
		return d, d <= MaxRetryWait
	}
	return c.backoff(attempt), true
}

// backoff is firstBackoff·2^(attempt−1), less up to half of it at random.
func backoff(attempt int) time.Duration {
	d := firstBackoff << (attempt - 1)
	return d - time.Duration(rand.Int64N(int64(d/2)+1))
}

// retryAfter reads retry-after-ms (milliseconds, as some model APIs send)
// or Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, 24*time.Hour), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// sleep waits d unless ctx ends first or its deadline would pass before
// d does; it reports whether the wait was completed.
func sleep(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	return wait.Sleep(ctx, d)
}
