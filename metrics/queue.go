package metrics

import "github.com/prometheus/client_golang/prometheus"

func (r *Recorder) registerQueue() {
	r.drops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "messages_dropped_total",
		Help: "Messages the router dropped, by reason.",
	}, []string{"reason"})
	r.reg.MustRegister(r.drops)
	r.gauge(&r.queue, "queue_depth",
		"Work in the router's per-channel queues, running tasks included.")
}

// Drop counts a message the router dropped for reason, a fixed word of the
// router's (a value of another shape counts as "other"). It fits
// router.Options.OnDrop, whose channel argument is not recorded.
func (r *Recorder) Drop(reason string) { r.drops.WithLabelValues(label(reason)).Inc() }

// DropReasons starts the drop counters of reasons at zero, so that every
// reason has a series before its first drop (router.DropReasons).
func (r *Recorder) DropReasons(reasons ...string) {
	for _, reason := range reasons {
		r.drops.WithLabelValues(label(reason))
	}
}

// QueueDepth binds rtsandbox_queue_depth, typically to
// (*router.Router).QueueDepth.
func (r *Recorder) QueueDepth(f func() int) { r.queue.bind(f) }
