package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtsandbox/rtsandbox/broker"
)

// upstreamBuckets span a fast loopback answer to the broker's call
// timeout (60 s).
var upstreamBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60}

func (r *Recorder) registerBroker() {
	r.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "broker_calls_total",
		Help: "Broker calls by route class, declared tool or MCP server, status and refusal class (empty when served).",
	}, []string{"route", "tool", "status", "refusal"})
	r.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "broker_upstream_seconds",
		Help:    "Time broker calls waited for the upstream: the model, an MCP server, or a host tool (a webhook's round trip).",
		Buckets: upstreamBuckets,
	}, []string{"route", "tool"})
	r.reflections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "broker_reflection_refusals_total",
		Help: "Upstream answers the broker refused because they echoed the credential.",
	}, []string{"route", "tool"})
	r.reg.MustRegister(r.calls, r.upstream, r.reflections)
}

// BrokerCall records one broker call. It is the broker.Config.Observe of
// a host with metrics on.
func (r *Recorder) BrokerCall(c broker.CallRecord) {
	route, tool := label(c.Route), toolLabel(c.Tool)
	r.calls.WithLabelValues(route, tool, strconv.Itoa(c.Status), refusalLabel(c.Refusal)).Inc()
	if c.Upstream > 0 {
		r.upstream.WithLabelValues(route, tool).Observe(c.Upstream.Seconds())
	}
	if c.Reflection {
		r.reflections.WithLabelValues(route, tool).Inc()
	}
}

// toolLabel keeps "" (the model and other routes) and the shape of a
// declared name.
func toolLabel(s string) string {
	if s == "" {
		return ""
	}
	return label(s)
}

// refusalLabel keeps "" (a served call) and the shape of a class.
func refusalLabel(s string) string {
	if s == "" {
		return ""
	}
	return label(s)
}
