// serve's Prometheus listener (config metrics:) and the per-turn "turn"
// log record that every sealed runtime writes.

package host

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/metrics"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/sealed"
	"github.com/rtsandbox/rtsandbox/session"
)

// hostMetrics is serve's metrics: a Recorder and the listener that serves
// it. With metrics off, rec is nil and every method does nothing.
type hostMetrics struct {
	rec *metrics.Recorder
	ln  *listener
}

// startMetrics listens on metrics.listen and serves /metrics, or returns
// a hostMetrics that does nothing when the config has no metrics section.
// A listener that stops on its own is logged; the chat host goes on.
func startMetrics(cfg *config.Config, log *slog.Logger) (*hostMetrics, error) {
	h := &hostMetrics{}
	c := cfg.Metrics
	if c == nil {
		return h, nil
	}
	if !c.Loopback {
		log.Warn("metrics.listen is not a loopback address: the metrics are readable from other machines; put a firewall in front of it", "listen", c.Listen)
	}
	rec := metrics.New()
	ln, err := listen("metrics", "metrics.listen", c.Listen, &http.Server{
		Handler:           rec.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, log, nil)
	if err != nil {
		return nil, err
	}
	h.rec, h.ln = rec, ln
	return h, nil
}

// stop closes the listener, letting a scrape in flight finish.
func (h *hostMetrics) stop() { h.ln.shutdown() }

// onTurn is the sandbox's OnTurn with metrics on; nil when off.
func (h *hostMetrics) onTurn() func(sealed.TurnStats) {
	if h.rec == nil {
		return nil
	}
	return h.rec.Turn
}

// onSessionTurn is the session runtime's OnTurn with metrics on; nil
// when off.
func (h *hostMetrics) onSessionTurn() func(session.TurnStats) {
	if h.rec == nil {
		return nil
	}
	return h.rec.SessionTurn
}

// watchSessions binds the session runtime's active turns; nil when
// metrics are off.
func (h *hostMetrics) watchSessions() func(func() int) {
	if h.rec == nil {
		return nil
	}
	return h.rec.ActiveSessionTurns
}

// observe is the broker's Observe with metrics on; nil when off, so the
// broker does no work for it.
func (h *hostMetrics) observe() func(broker.CallRecord) {
	if h.rec == nil {
		return nil
	}
	return h.rec.BrokerCall
}

// watchSandbox binds the gauges the runtime and the driver answer.
func (h *hostMetrics) watchSandbox(rt *sealed.Runtime, pending func() int) {
	if h.rec == nil {
		return
	}
	h.rec.ActiveTurns(func() int { return len(rt.Busy()) })
	h.rec.PendingRemovals(pending)
}

// watchPool binds the warm pool's gauges.
func (h *hostMetrics) watchPool(rt *sealed.Runtime) {
	if h.rec == nil {
		return
	}
	h.rec.Pool(func() int { return rt.PoolStats().Size }, func() int { return rt.PoolStats().Idle })
}

// onPoolRefill records warm worker starts; nil when metrics are off.
func (h *hostMetrics) onPoolRefill() func(time.Duration) {
	if h.rec == nil {
		return nil
	}
	return h.rec.PoolRefill
}

// onSettle counts settled budget amounts; nil when metrics are off.
func (h *hostMetrics) onSettle() func(budget.Kind, int64) {
	if h.rec == nil {
		return nil
	}
	return func(k budget.Kind, n int64) { h.rec.BudgetSpent(string(k), n) }
}

// onDrop is the router's OnDrop with metrics on; nil when off. The
// channel is not recorded.
func (h *hostMetrics) onDrop() func(rtsandbox.ChannelKey, string) {
	if h.rec == nil {
		return nil
	}
	return func(_ rtsandbox.ChannelKey, reason string) { h.rec.Drop(reason) }
}

// onDoor is the router's OnDoor with metrics on; nil when off. The
// channel is not recorded.
func (h *hostMetrics) onDoor() func(rtsandbox.ChannelKey, router.DeliveryKind) {
	if h.rec == nil {
		return nil
	}
	return func(_ rtsandbox.ChannelKey, kind router.DeliveryKind) { h.rec.DoorRefusal(string(kind)) }
}

// watchRouter binds the queue gauge and starts every drop reason at zero.
// The gauge counts the router's queues, which hold every surface's
// messages (the HTTP API hands each to the router at once).
func (h *hostMetrics) watchRouter(r *router.Router) {
	if h.rec == nil {
		return
	}
	h.rec.DropReasons(router.DropReasons()...)
	h.rec.QueueDepth(r.QueueDepth)
}

// logTurn returns the runtime's OnTurn: it writes the turn's one Info
// record, "turn", then calls next when set. The record names the channel,
// the outcome class, the broker call count and each phase in
// milliseconds; never content. The sandbox itself logs a failure's error
// at Warn.
func logTurn(log *slog.Logger, next func(sealed.TurnStats)) func(sealed.TurnStats) {
	return func(s sealed.TurnStats) {
		if log.Enabled(context.Background(), slog.LevelInfo) {
			log.LogAttrs(context.Background(), slog.LevelInfo, "turn", turnAttrs(s)...)
		}
		if next != nil {
			next(s)
		}
	}
}

func turnAttrs(s sealed.TurnStats) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("channel", string(s.Channel)),
		slog.String("class", s.Class),
		slog.Int("calls", s.Calls),
	}
	if s.Warm {
		attrs = append(attrs, slog.Bool("warm", true))
	}
	for _, p := range metrics.Phases(s) {
		attrs = append(attrs, slog.Int64(p.Name+"_ms", p.Duration.Milliseconds()))
	}
	if s.CleanupPending {
		attrs = append(attrs, slog.Bool("cleanup_pending", true))
	}
	return attrs
}
