package worker

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox/brokerclient"
)

// statusOverloaded is the Anthropic API's "overloaded" status.
const statusOverloaded = 529

// retryPolicy bounds the retries of one model call after an upstream rate
// limit (429) or overload (529): at most max retries, each after the wait
// the answer's retry-after names (or backoff, doubled per retry, without
// one), never a single wait over maxWait nor waits over maxTotal in all,
// and never a wait that would outlast the turn's context. A wait the
// policy cannot honour ends the call at once: retrying before the
// upstream asked would only spend the turn's broker budget.
type retryPolicy struct {
	max      int
	maxWait  time.Duration
	maxTotal time.Duration
	backoff  time.Duration
	sleep    func(ctx context.Context, d time.Duration) error
}

// defaultRetry keeps a turn's waits well inside the default 120 s turn
// deadline, with room left for the answer.
var defaultRetry = retryPolicy{max: 3, maxWait: 20 * time.Second, maxTotal: 40 * time.Second, backoff: time.Second, sleep: sleep}

// retryState is what one call has spent on retries so far.
type retryState struct {
	retries int
	waited  time.Duration
}

// wait sleeps before the next retry, or returns errModelOverloaded when
// the policy allows none. after is the answer's retry-after, negative
// when it named none.
func (p retryPolicy) wait(ctx context.Context, s *retryState, after time.Duration) error {
	d := after
	if d < 0 {
		d = p.backoff << s.retries
	}
	if s.retries >= p.max || d > p.maxWait || s.waited+d > p.maxTotal {
		return errModelOverloaded
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= d {
		return errModelOverloaded
	}
	s.retries++
	s.waited += d
	return p.sleep(ctx, d)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// retryable is a 429 or 529 answer worth retrying after the wait it
// names (negative: none named).
type retryable struct {
	status *brokerclient.StatusError
	after  time.Duration
}

func (r *retryable) Error() string { return "retryable " + r.status.Error() }

// retryableAnswer classifies a 429 or 529 answer: 529 is the upstream's
// overload; a 429 is the upstream's rate limit only when it names a
// retry-after or carries a rate_limit_error, since the broker's own 429
// (its call budget or slots) does neither and a retry would not help.
// x-should-retry: false forbids a retry either way.
func retryableAnswer(resp *brokerclient.Response) error {
	status := &brokerclient.StatusError{Status: resp.Status}
	after := retryAfter(resp.Header)
	upstream := resp.Status == statusOverloaded || after >= 0 || errorType(resp.Body) == "rate_limit_error"
	if !upstream || strings.EqualFold(resp.Header.Get("X-Should-Retry"), "false") {
		return status
	}
	return &retryable{status: status, after: after}
}

// maxRetryAfter caps a parsed retry-after so that it converts to a
// Duration without overflow; any such wait is over maxWait anyway.
const maxRetryAfter = 24 * time.Hour

// retryAfter reads the retry-after header: seconds (the API sends whole
// ones; a fraction is accepted) or an HTTP date. It returns -1 when the
// header is missing or unreadable.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return -1
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs < 0 {
			return -1
		}
		return time.Duration(min(secs, maxRetryAfter.Seconds()) * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), maxRetryAfter)
	}
	return -1
}

// errorType is the error.type of an Anthropic error body, or "".
func errorType(r io.Reader) string {
	data, _ := io.ReadAll(io.LimitReader(r, maxErrorBody))
	var body struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &body)
	return body.Error.Type
}
