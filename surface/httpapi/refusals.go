package httpapi

import (
	"sync"
	"time"
)

// The refusal log's bound: at most refusalLines lines per refusalWindow,
// so a client that floods the API with bad tokens cannot flood the log.
const (
	refusalLines  = 20
	refusalWindow = time.Minute
)

// refusalLimiter counts refusals into windows; the zero value is ready.
type refusalLimiter struct {
	mu       sync.Mutex
	start    time.Time
	logged   int
	unlogged int
}

// allow reports whether a refusal at now is logged, and how many refusals
// went unlogged since the last line (reported once, on the next line).
func (l *refusalLimiter) allow(now time.Time) (unloggedBefore int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= refusalWindow {
		l.start, l.logged = now, 0
	}
	if l.logged >= refusalLines {
		l.unlogged++
		return 0, false
	}
	l.logged++
	unloggedBefore, l.unlogged = l.unlogged, 0
	return unloggedBefore, true
}
