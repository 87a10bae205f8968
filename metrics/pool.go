package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtsandbox/rtsandbox/sealed"
)

// The served label of rtsandbox_pool_claims_total: how a sealed turn got
// its worker.
const (
	ServedWarm = "warm" // a warm pool's worker, started before the turn
	ServedCold = "cold" // created and started for the turn
)

// refillBuckets span a container start under runc (~0.2 s) and gVisor to
// a slow engine's.
var refillBuckets = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func (r *Recorder) registerPool() {
	r.claims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "pool_claims_total",
		Help: "Sealed turns that reached the engine, by how they got their worker: warm (from the pool) or cold.",
	}, []string{"served"})
	r.refill = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace, Name: "pool_refill_seconds",
		Help:    "Time the warm pool took to start one worker (run dir, create, start).",
		Buckets: refillBuckets,
	})
	r.claims.WithLabelValues(ServedWarm)
	r.claims.WithLabelValues(ServedCold)
	r.reg.MustRegister(r.claims, r.refill)
	r.gauge(&r.poolSize, "pool_size", "Warm sealed workers the pool keeps (sandbox.pool.size or its derived default); 0 when off.")
	r.gauge(&r.poolIdle, "pool_idle", "Warm sealed workers started and waiting for a turn.")
}

// claim counts how a sealed turn that reached the engine got its worker.
func (r *Recorder) claim(s sealed.TurnStats) {
	if s.Began.IsZero() {
		return
	}
	served := ServedCold
	if s.Warm {
		served = ServedWarm
	}
	r.claims.WithLabelValues(served).Inc()
}

// Pool binds rtsandbox_pool_size and rtsandbox_pool_idle, typically to
// (*sealed.Runtime).PoolStats.
func (r *Recorder) Pool(size, idle func() int) {
	r.poolSize.bind(size)
	r.poolIdle.bind(idle)
}

// PoolRefill records one warm worker's start; it is the
// sealed.Options.OnPoolRefill of a host with metrics on.
func (r *Recorder) PoolRefill(d time.Duration) { r.refill.Observe(d.Seconds()) }
