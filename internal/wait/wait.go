// Package wait holds the one cancellable sleep the host's retry loops
// share (container removals, upstream retries).
package wait

import (
	"context"
	"time"
)

// Sleep waits d unless ctx ends first; it reports whether the whole wait
// passed with ctx still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
