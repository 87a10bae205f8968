package broker

// The startup window's accounting (issue 21). Between turns the window
// (docs/session-mode.md, "Between turns: the startup window") lets the worker reach its MCP servers with the host's MCP
// credentials, and the worker re-arms it with every /worker/ready. So
// that this costs what the operator allowed, a window's calls are charged
// to the daily call budgets of its channel and of the installation (no
// speaker asked for them), and the windows a channel's workers re-arm are
// capped per UTC day (WindowQuota). A refused window call gets what an
// exhausted window answers (docs/session.md, "Routes and statuses"): 429 "Broker budget exhausted".

import (
	"net/http"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
)

// refWindowCap is the audit and metrics class of a window call refused
// because its channel used its re-armed windows of the day.
const refWindowCap = "window_cap"

// WindowQuota counts, per channel and UTC day, the re-armed startup
// windows that a channel's workers used. A window counts at its first
// call, so an idle worker's ready loop, which re-arms a window about
// every 90 s and calls nothing in it, spends none; the window a new
// broker opens (NewSession) never counts, so a container the host
// recreates can always start.
//
// The host keeps one quota for all its session brokers, so a channel's
// count outlives its brokers (a recreated container, a changed profile,
// a fresh start). It starts afresh at 00:00 UTC and when the host
// process restarts, which a worker cannot cause. It is safe for
// concurrent use; it holds one counter per channel that used a window
// today.
type WindowQuota struct {
	max int
	now func() time.Time

	mu   sync.Mutex
	day  string
	used map[rtsandbox.ChannelKey]int // max+1 once refused today
}

// NewWindowQuota returns a quota of max windows per channel per day on
// the clock now. max < 1 means rtsandbox.StartupWindowsPerDay, and nil
// now means time.Now.
func NewWindowQuota(max int, now func() time.Time) *WindowQuota {
	if max < 1 {
		max = rtsandbox.StartupWindowsPerDay
	}
	if now == nil {
		now = time.Now
	}
	return &WindowQuota{max: max, now: now, used: map[rtsandbox.ChannelKey]int{}}
}

// take counts one window of ch today. ok is false, and nothing more is
// counted, when ch has used all of today's; first is true on the day's
// first refusal, the one the operator log records.
func (q *WindowQuota) take(ch rtsandbox.ChannelKey) (ok, first bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if day := budget.Day(q.now()); day != q.day {
		q.day, q.used = day, map[rtsandbox.ChannelKey]int{}
	}
	n := q.used[ch]
	switch {
	case n < q.max:
		q.used[ch] = n + 1
		return true, false
	case n == q.max:
		q.used[ch] = n + 1
		return false, true
	}
	return false, false
}

// openWindow applies the quota to a call in the startup window sc: a
// re-armed window takes one of its channel's windows of the day at its
// first call, and every call of a window the quota refused gets 429.
func (s *Session) openWindow(sc *scope) (outcome, bool) {
	s.mu.Lock()
	first := false
	if !sc.opened {
		sc.opened = true
		if sc.rearmed {
			var ok bool
			ok, first = s.windows.take(s.cfg.Channel)
			sc.capped = !ok
		}
	}
	capped := sc.capped
	s.mu.Unlock()
	if first {
		s.b.log.Warn("session worker used its startup windows of the day; later ones are refused until 00:00 UTC",
			"channel", string(s.cfg.Channel), "windows", s.windows.max)
	}
	if capped {
		o := sessRefuse(http.StatusTooManyRequests, sessBudget, refWindowCap)
		o.detail = "startup windows of the day used"
		return o, false
	}
	return outcome{}, true
}

// chargeCall reserves one call of the daily budgets for a call under sc:
// a bound turn's speaker, channel and installation, the window's channel
// and installation. A window call over a daily budget gets what an
// exhausted window answers. settle is nil without a ledger.
func (s *Session) chargeCall(r *http.Request, sc *scope) (settle func(), o outcome, ok bool) {
	if s.b.cfg.Budget == nil {
		return nil, outcome{}, true
	}
	res, o, ok := sc.turn.reserve(r.Context(), budget.Calls, 1)
	if !ok {
		if sc.startup && o.class == refDailyBudget.class {
			o.body = []byte(sessBudget)
		}
		return nil, o, false
	}
	return func() { sc.turn.settle(res, 1) }, outcome{}, true
}
