package deploy

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/metrics"
	"github.com/rtsandbox/rtsandbox/session"
)

const (
	rulesPath     = "prometheus/rtsandbox-alerts.yaml"
	dashboardPath = "grafana/rtsandbox.json"
)

// TestAlertRulesPromtool runs `promtool check rules` on the rules and
// `promtool test rules` on their unit tests (each alert fires on the
// series it is for; the failure-rate alert ignores stopped turns and a
// quiet host).
func TestAlertRulesPromtool(t *testing.T) {
	tool := requireTool(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "rtsandbox-alerts.yaml"},
		{"test", "rules", "rtsandbox-alerts_test.yaml"},
	} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// registered returns every metric name a query may use, from what
// metrics.New registers (each vector given one series, so that it is
// gathered): a histogram's _bucket (with le), _sum and _count, and up,
// which Prometheus adds for each target.
func registered(t *testing.T) map[string][]string {
	t.Helper()
	r := metrics.New()
	now := time.Now()
	r.SessionTurn(session.TurnStats{Class: "ok", Admitted: now, Ended: now.Add(time.Second)})
	r.BrokerCall(broker.CallRecord{Route: broker.RouteModel, Status: 200, Upstream: time.Second, Reflection: true})
	r.Drop("queue_full")
	r.BudgetSpent("calls", 1)
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]string{"up": nil}
	for _, f := range fams {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		ls := slices.Sorted(func(yield func(string) bool) {
			for l := range labels {
				if !yield(l) {
					return
				}
			}
		})
		name := f.GetName()
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"] = append(slices.Clone(ls), "le")
			names[name+"_sum"] = ls
			names[name+"_count"] = ls
		case dto.MetricType_SUMMARY:
			names[name] = append(slices.Clone(ls), "quantile")
			names[name+"_sum"] = ls
			names[name+"_count"] = ls
		default:
			names[name] = ls
		}
	}
	return names
}

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"job", "instance"}

// TestQueriesUseRegisteredMetrics: every metric the alert rules and the
// dashboard query is one the metrics package registers, and every label
// a selector matches on is one of that metric's (or a target label), so a
// renamed metric or label fails here instead of leaving an alert that can
// never fire.
func TestQueriesUseRegisteredMetrics(t *testing.T) {
	names := registered(t)
	exprs := append(ruleExprs(t), dashboardExprs(t)...)
	if len(exprs) < 10 {
		t.Fatalf("found %d queries; the parsing of the rules or the dashboard is broken", len(exprs))
	}
	for _, e := range exprs {
		sels, err := selectors(e.expr)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: no metric in %q", e.where, e.expr)
		}
		for _, s := range sels {
			labels, ok := names[s.metric]
			if !ok {
				t.Errorf("%s: metric %s is not registered by the metrics package", e.where, s.metric)
				continue
			}
			for _, l := range s.labels {
				if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
					t.Errorf("%s: %s has no label %q (it has %q)", e.where, s.metric, l, labels)
				}
			}
		}
	}
}

// TestDashboardCoversEveryMetric: each rtsandbox_* metric the metrics
// package registers has a panel.
func TestDashboardCoversEveryMetric(t *testing.T) {
	used := map[string]bool{}
	for _, e := range dashboardExprs(t) {
		sels, _ := selectors(e.expr)
		for _, s := range sels {
			used[strings.TrimSuffix(s.metric, "_bucket")] = true
		}
	}
	for name := range registered(t) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "rtsandbox_") && !used[base] {
			t.Errorf("%s: no panel shows %s", dashboardPath, base)
		}
	}
}

// TestAlertsNameTheirRunbook: every alert has a summary and a description
// naming its runbook step, and the step is a heading of docs/operations.md.
func TestAlertsNameTheirRunbook(t *testing.T) {
	ops := readFile(t, "../docs/operations.md")
	for _, r := range rules(t) {
		step := "docs/operations.md#" + strings.ToLower(r.Alert)
		if r.Annotations["summary"] == "" || r.Annotations["runbook_url"] != step ||
			!strings.Contains(r.Annotations["description"], `"Alerts", `+r.Alert) {
			t.Errorf("alert %s: annotations %q; want a summary, a description naming its runbook step and runbook_url %s", r.Alert, r.Annotations, step)
		}
		if !strings.Contains(ops, "\n### "+r.Alert+"\n") {
			t.Errorf("alert %s: docs/operations.md has no heading \"### %s\"", r.Alert, r.Alert)
		}
	}
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

func rules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, rulesPath)), &f); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// query is one PromQL expression and where it was found.
type query struct{ where, expr string }

func ruleExprs(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, r := range rules(t) {
		out = append(out, query{rulesPath + " " + r.Alert, r.Expr})
	}
	return out
}

func dashboardExprs(t *testing.T) []query {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, dashboardPath)), &d); err != nil {
		t.Fatal(err)
	}
	var out []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, query{fmt.Sprintf("%s panel %q", dashboardPath, p.Title), tg.Expr})
		}
	}
	return out
}

// selector is a metric a query reads and the labels it matches on.
type selector struct {
	metric string
	labels []string
}

// promqlWords are PromQL's keywords and aggregation operators (which may
// take "by (…)" before their "("); any other word before "(" is a
// function, and one of groupingWords is followed by a label list.
var (
	promqlWords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan",
		"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"}
	groupingWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	identRE       = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	numberRE      = regexp.MustCompile(`^[0-9][0-9.eE+\-]*[a-zA-Z]*`)
)

// selectors lexes a PromQL expression just enough to find its metric
// names and the label names of their matchers: strings and ranges are
// skipped, a word before "(" is a function, a grouping word's list holds
// labels, not metrics.
func selectors(expr string) ([]selector, error) {
	var out []selector
	s := expr
	for len(s) > 0 {
		switch c := s[0]; {
		case c == '"' || c == '\'' || c == '`':
			end := strings.IndexByte(s[1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unterminated string in %q", expr)
			}
			s = s[end+2:]
		case c == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated range in %q", expr)
			}
			s = s[end+1:]
		case c == '{':
			labels, rest, err := matcherLabels(s)
			if err != nil {
				return nil, fmt.Errorf("%w in %q", err, expr)
			}
			if len(out) == 0 {
				return nil, fmt.Errorf("a selector without a metric name in %q", expr)
			}
			out[len(out)-1].labels = labels
			s = rest
		case c >= '0' && c <= '9':
			s = s[len(numberRE.FindString(s)):]
		case identRE.MatchString(s):
			word := identRE.FindString(s)
			s = s[len(word):]
			next := strings.TrimLeft(s, " \t\n")
			switch {
			case slices.Contains(groupingWords, word):
				if strings.HasPrefix(next, "(") {
					end := strings.IndexByte(next, ')')
					if end < 0 {
						return nil, fmt.Errorf("unterminated label list in %q", expr)
					}
					s = next[end+1:]
				}
			case slices.Contains(promqlWords, strings.ToLower(word)), strings.HasPrefix(next, "("):
			default:
				out = append(out, selector{metric: word})
				if !strings.HasPrefix(next, "{") {
					// A bare metric: no matchers of its own.
					out[len(out)-1].labels = nil
				}
			}
		default:
			s = s[1:]
		}
	}
	return out, nil
}

// matcherLabels reads {name op "value", …} at the start of s.
func matcherLabels(s string) (labels []string, rest string, err error) {
	s = s[1:]
	for {
		s = strings.TrimLeft(s, " \t\n,")
		if strings.HasPrefix(s, "}") {
			return labels, s[1:], nil
		}
		name := identRE.FindString(s)
		if name == "" {
			return nil, "", fmt.Errorf("bad matcher at %q", s)
		}
		labels = append(labels, name)
		s = strings.TrimLeft(s[len(name):], " \t\n")
		s = strings.TrimLeft(s, "=!~")
		s = strings.TrimLeft(s, " \t\n")
		if s == "" || (s[0] != '"' && s[0] != '\'') {
			return nil, "", fmt.Errorf("matcher %s has no quoted value", name)
		}
		end := strings.IndexByte(s[1:], s[0])
		if end < 0 {
			return nil, "", fmt.Errorf("unterminated value of %s", name)
		}
		s = s[end+2:]
	}
}

// TestSelectors holds the lexer to what the queries above rely on.
func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []selector
	}{
		{"bare", `up == 0`, []selector{{metric: "up"}}},
		{"matchers-and-range", `sum by (mode, class) (rate(rtsandbox_turns_total{class!~"ok|x", mode="sealed"}[15m])) > 0.2`,
			[]selector{{"rtsandbox_turns_total", []string{"class", "mode"}}}},
		{"grouping-and-two-metrics", `a / on (mode) group_left b{x="}"} and on(mode) c offset 5m`,
			[]selector{{metric: "a"}, {"b", []string{"x"}}, {metric: "c"}}},
		{"grafana-range", `histogram_quantile(0.9, sum by (le) (rate(h_bucket{phase="total"}[$__rate_interval])))`,
			[]selector{{"h_bucket", []string{"phase"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectors(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(selector{})); d != "" {
				t.Errorf("selectors(%q) (-want +got):\n%s", tc.expr, d)
			}
		})
	}
}
