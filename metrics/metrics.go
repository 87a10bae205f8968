// Package metrics exports the host's operational metrics in the Prometheus
// exposition format, with github.com/prometheus/client_golang.
//
// The contract:
//
//   - A Recorder has its own registry, never the process-wide default one,
//     and Handler serves it on GET /metrics only. Besides the rtsandbox_*
//     metrics below it holds the Go runtime and process collectors.
//   - Every label value is from a fixed set or an operator-declared name:
//     outcome classes, phases, modes, route classes, statuses, refusal and
//     drop reasons, declared tool and MCP server names. Never a channel, a
//     speaker, a raw path, a guest-chosen name or any content.
//   - The observers (Turn, SessionTurn, BrokerCall, Drop) only update
//     counters and histograms: they never block and are safe for
//     concurrent use, so they may run inside sealed.Options.OnTurn,
//     session.Options.OnTurn and broker.Config.Observe.
//   - The gauges read their sources at scrape time. A source is bound
//     with ActiveTurns, ActiveSessionTurns, PendingRemovals, QueueDepth
//     or Pool, once the component that answers it exists; until then
//     the gauge reads 0.
//
// docs/operations.md lists every metric.
package metrics

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every metric of this host.
const namespace = "rtsandbox"

// scrapeTimeout bounds one scrape; maxScrapes bounds scrapes served at
// once (more get 503), so a scrape storm cannot pile up on the host.
const (
	scrapeTimeout = 10 * time.Second
	maxScrapes    = 4
)

// Recorder holds the host's metrics. Its methods are safe for concurrent
// use.
type Recorder struct {
	reg *prometheus.Registry

	turns       *prometheus.CounterVec   // class, mode
	phases      *prometheus.HistogramVec // phase, mode
	calls       *prometheus.CounterVec   // route, tool, status, refusal
	upstream    *prometheus.HistogramVec // route, tool
	reflections *prometheus.CounterVec   // route, tool
	drops       *prometheus.CounterVec   // reason
	budget      *prometheus.CounterVec   // kind
	door        *prometheus.CounterVec   // kind
	claims      *prometheus.CounterVec   // served
	refill      prometheus.Histogram

	active, sessionActive, pending, queue, poolSize, poolIdle source
}

// New returns a Recorder with every metric registered: the counters of
// every known turn class at zero, the gauges reading 0 until bound.
func New() *Recorder {
	r := &Recorder{reg: prometheus.NewRegistry()}
	r.registerTurns()
	r.registerBroker()
	r.registerQueue()
	r.registerPool()
	r.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return r
}

// Handler serves the metrics on GET (and HEAD) /metrics; any other path
// is 404 and any other method 405.
func (r *Recorder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		MaxRequestsInFlight: maxScrapes,
		Timeout:             scrapeTimeout,
	}))
	return mux
}

// Gatherer is the Recorder's registry, for tests and other exporters.
func (r *Recorder) Gatherer() prometheus.Gatherer { return r.reg }

// gauge registers a gauge that reads s at scrape time.
func (r *Recorder) gauge(s *source, name, help string) {
	r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: name, Help: help,
	}, s.read))
}

// gaugeMode registers the series of a gauge whose mode label is mode,
// reading s at scrape time.
func (r *Recorder) gaugeMode(s *source, name, help, mode string) {
	r.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: name, Help: help, ConstLabels: prometheus.Labels{"mode": mode},
	}, s.read))
}

// source is a gauge's value function, bound once its component exists.
type source struct{ f atomic.Pointer[func() int] }

func (s *source) bind(f func() int) { s.f.Store(&f) }

func (s *source) read() float64 {
	if f := s.f.Load(); f != nil {
		return float64((*f)())
	}
	return 0
}

// label returns s when it is a plain lower-case word of at most 48
// characters ([a-z][a-z0-9_]*, the shape of every class, reason and
// declared tool name), else "other": a value from outside the fixed sets
// can never grow the label space or carry content.
func label(s string) string {
	if len(s) == 0 || len(s) > 48 || s[0] < 'a' || s[0] > 'z' {
		return "other"
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return "other"
		}
	}
	return s
}
