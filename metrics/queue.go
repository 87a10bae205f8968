package metrics

import "github.com/prometheus/client_golang/prometheus"

func (r *Recorder) registerQueue() {
	r.drops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "messages_dropped_total",
		Help: "Messages the router dropped, by reason.",
	}, []string{"reason"})
	r.reg.MustRegister(r.drops)
	r.budget = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "budget_spent_total",
		Help: "Daily-budget amounts settled, by kind (calls, tokens, seconds).",
	}, []string{"kind"})
	r.reg.MustRegister(r.budget)
	r.door = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "door_refusals_total",
		Help: "What the door withheld from a guest because it held a credential of the host in some form, by kind (reply, notice, report, preview, command).",
	}, []string{"kind"})
	r.reg.MustRegister(r.door)
	for _, k := range []string{"reply", "notice", "report", "preview", "command"} {
		r.door.WithLabelValues(k) // every kind at zero before its first refusal
	}
	r.gauge(&r.queue, "queue_depth",
		"Work in the router's per-channel queues, running tasks included.")
}

// Drop counts a message the router dropped for reason, a fixed word of the
// router's (a value of another shape counts as "other"). It fits
// router.Options.OnDrop, whose channel argument is not recorded.
func (r *Recorder) Drop(reason string) { r.drops.WithLabelValues(label(reason)).Inc() }

// DropReasons starts the drop counters of reasons at zero, so that every
// reason has a series before its first drop (router.DropReasons()).
func (r *Recorder) DropReasons(reasons ...string) {
	for _, reason := range reasons {
		r.drops.WithLabelValues(label(reason))
	}
}

// QueueDepth binds rtsandbox_queue_depth, typically to
// (*router.Router).QueueDepth.
func (r *Recorder) QueueDepth(f func() int) { r.queue.bind(f) }

// BudgetSpent counts amount settled against the daily budgets of kind
// ("calls", "tokens" or "seconds"; another value counts as "other").
func (r *Recorder) BudgetSpent(kind string, amount int64) {
	if amount > 0 {
		r.budget.WithLabelValues(label(kind)).Add(float64(amount))
	}
}

// DoorRefusal counts what the door withheld of kind (router.DeliveryKind,
// or "command"; another value counts as "other"). It fits
// router.Options.OnDoor, whose channel argument is not recorded.
func (r *Recorder) DoorRefusal(kind string) { r.door.WithLabelValues(label(kind)).Inc() }
