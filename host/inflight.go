package host

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox/inflight"
	"github.com/rtsandbox/rtsandbox/router"
)

// noticeTimeout bounds telling one message of an earlier process that
// the host restarted.
const noticeTimeout = 30 * time.Second

// restartNotices tells the messages an earlier process left in flight
// (inflight.Open) that the host restarted, one after another, in the
// background; stop ends it (the ones not told yet stay recorded for the
// next start) and waits for it.
func restartNotices(r *router.Router, prev []inflight.Entry, log *slog.Logger) (stop func()) {
	if len(prev) == 0 {
		return func() {}
	}
	log.Info("telling the messages in flight at the last stop that the host restarted", "messages", len(prev))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, e := range prev {
			if ctx.Err() != nil {
				return
			}
			notifyRestarted(ctx, r, e, log)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// notifyRestarted tells one message; a message its surface cannot reach
// is logged, never retried.
func notifyRestarted(ctx context.Context, r *router.Router, e inflight.Entry, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, noticeTimeout)
	defer cancel()
	err := r.NotifyRestarted(ctx, e.Channel, e.ID)
	switch {
	case err == nil:
		log.Info("restart notice posted for a message in flight at the last stop", "channel", e.Channel, "message", e.ID)
	case errors.Is(err, router.ErrNoSurface):
		log.Warn("message in flight at the last stop not told: no surface serves its channel now", "channel", e.Channel, "message", e.ID)
	default:
		log.Warn("message in flight at the last stop not told: its surface refused the notice", "channel", e.Channel, "message", e.ID, "err", err)
	}
}
