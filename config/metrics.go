package config

import "go.yaml.in/yaml/v3"

// DefaultMetricsListen is metrics.listen when the section leaves it out
// (9464 is the port commonly given to Prometheus exporters).
const DefaultMetricsListen = "127.0.0.1:9464"

// Metrics is the Prometheus listener of serve. A nil *Metrics means off.
type Metrics struct {
	// Listen is host:port as written (default DefaultMetricsListen).
	Listen string
	// Loopback reports whether Listen's host is a loopback address or
	// "localhost"; serve warns when it is not.
	Loopback bool
}

// metrics parses "metrics". Absent or empty means off. The listener may
// not share http.listen.
func (p *parser) metrics(n *yaml.Node, c *Config) *Metrics {
	if n == nil {
		return nil
	}
	o, ok := p.object(n, "metrics", "listen")
	if !ok {
		return nil
	}
	m := &Metrics{Listen: DefaultMetricsListen, Loopback: true}
	if v, ok := p.text(o, "listen", false, listenRule); ok {
		m.Listen, m.Loopback = v, loopback(v)
	}
	if c.HTTP != nil && c.HTTP.Listen == m.Listen {
		p.fail(n, o.at("listen"), "must differ from http.listen (%s)", c.HTTP.Listen)
	}
	return m
}
