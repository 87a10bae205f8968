package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want *Metrics
	}{
		{"absent-is-off", "", nil},
		{"empty-is-off", "metrics:\n", nil},
		{"empty-mapping-takes-the-default", "metrics: {}\n", &Metrics{Listen: DefaultMetricsListen, Loopback: true}},
		{"loopback", "metrics: {listen: '127.0.0.1:9100'}\n", &Metrics{Listen: "127.0.0.1:9100", Loopback: true}},
		{"ipv6-loopback", "metrics: {listen: '[::1]:9100'}\n", &Metrics{Listen: "[::1]:9100", Loopback: true}},
		{"localhost", "metrics: {listen: 'localhost:9100'}\n", &Metrics{Listen: "localhost:9100", Loopback: true}},
		{"all-interfaces-recorded", "metrics: {listen: ':9464'}\n", &Metrics{Listen: ":9464"}},
		{"other-address-recorded", "metrics: {listen: '10.0.0.5:9464'}\n", &Metrics{Listen: "10.0.0.5:9464"}},
		{"beside-http", "http: {token_env: T}\nmetrics: {listen: '127.0.0.1:9464'}\n", &Metrics{Listen: "127.0.0.1:9464", Loopback: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(minimal + tt.in))
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, c.Metrics); diff != "" {
				t.Errorf("Metrics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMetricsErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"not-a-mapping", "metrics: on\n", "metrics: must be a mapping"},
		{"unknown-key", "metrics: {path: /metrics}\n", "metrics.path: unknown key"},
		{"port-zero", "metrics: {listen: '127.0.0.1:0'}\n", "metrics.listen: must be host:port with a port from 1 to 65535"},
		{"no-port", "metrics: {listen: '127.0.0.1'}\n", "metrics.listen: must be host:port"},
		{"not-a-string", "metrics: {listen: 9464}\n", "metrics.listen: must be a string"},
		{"same-as-http", "http: {listen: '127.0.0.1:8787', token_env: T}\nmetrics: {listen: '127.0.0.1:8787'}\n", "metrics.listen: must differ from http.listen (127.0.0.1:8787)"},
		{"default-same-as-http", "http: {listen: '127.0.0.1:9464', token_env: T}\nmetrics: {}\n", "metrics.listen: must differ from http.listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantOneProblem(t, minimal+tt.in, tt.want) })
	}
}
