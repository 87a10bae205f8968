package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// metricsModel answers by the guest's text: "hello" with a reply,
// "lookup" by calling the host tool with arguments its schema refuses
// (then a reply), "broken" with an answer that is not JSON, and "leak"
// with one that echoes the model key.
func metricsModel(req fakemodel.Request) fakemodel.Response {
	text := req.UserText()
	switch {
	case strings.Contains(text, "lookup") && req.Last().Role == "tool":
		return fakemodel.Response{Content: "The lookup was refused."}
	case strings.Contains(text, "lookup"):
		return fakemodel.Response{ToolCalls: []fakemodel.ToolCall{fakemodel.Call("host_lookup", map[string]any{"n": "not a number"})}}
	case strings.Contains(text, "broken"):
		return fakemodel.Response{Raw: []byte("this is not JSON")}
	case strings.Contains(text, "leak"):
		return fakemodel.Response{Content: "the key is " + sealedTestKey}
	}
	return fakemodel.Response{Content: "Hello."}
}

// TestServeMetrics runs real turns through `rtsandbox serve` with a
// metrics listener: two that reply, one of them after a broker refusal
// (tool arguments its schema refuses), one whose model answer is not JSON
// and one whose answer echoes the key; and a message the router drops. It
// then scrapes /metrics and checks the turn, phase, broker, reflection,
// drop and gauge series, and the "turn" records.
func TestServeMetrics(t *testing.T) {
	parallelServe(t)
	tag, cli := sealedImage(t)
	fm := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Func(metricsModel))
	defer fm.Close()
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	cfg, _ := serveConfig(t, fm.ChatURL(), tag, addr)
	appendConfig(t, cfg, fmt.Sprintf(`metrics:
  listen: %s
tools:
  - name: lookup
    description: Look a number up
    parameters: {type: object, properties: {n: {type: integer}}, required: [n], additionalProperties: false}
    url: http://127.0.0.1:9/lookup
`, metricsAddr))
	s := startServe(t, addr, "--config", cfg)

	for _, tt := range []struct{ text, want string }{
		{"hello", "Hello."},
		{"lookup 7", "The lookup was refused."},
		{"broken", "The sandbox turn failed or was stopped."},
		{"leak", "The sandbox turn failed or was stopped."},
	} {
		if got := chunksOf(s.say(t, "http:lobby", tt.text)); len(got) != 1 || got[0] != tt.want {
			t.Errorf("reply to %q = %q; want %q", tt.text, got, tt.want)
		}
	}
	if got := s.say(t, "http:closed", "hello"); !got.Dropped {
		t.Errorf("message in a channel that is not sandboxed = %+v; want dropped", got)
	}
	fams := scrape(t, "http://"+metricsAddr+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rtsandbox_turns_total", map[string]string{"class": "ok", "mode": "sealed"}, 2},
		{"rtsandbox_turns_total", map[string]string{"class": "upstream", "mode": "sealed"}, 2},
		{"rtsandbox_turns_total", map[string]string{"class": "timeout", "mode": "sealed"}, 0},
		{"rtsandbox_turns_total", map[string]string{"mode": "session"}, 0},
		// hello 1, lookup 2, broken 1, leak 1.
		{"rtsandbox_broker_calls_total", map[string]string{"route": "model", "status": "200", "refusal": ""}, 3},
		{"rtsandbox_broker_calls_total", map[string]string{"route": "model", "status": "502", "refusal": "call_failed"}, 2},
		{"rtsandbox_broker_calls_total", map[string]string{"route": "tools", "tool": "lookup", "status": "400", "refusal": "invalid_arguments"}, 1},
		{"rtsandbox_broker_reflection_refusals_total", map[string]string{"route": "model"}, 1},
		{"rtsandbox_turns_active", map[string]string{"mode": "sealed"}, 0},
		{"rtsandbox_queue_depth", nil, 0},
		{"rtsandbox_messages_dropped_total", map[string]string{"reason": "not_sandboxed"}, 1},
		{"rtsandbox_messages_dropped_total", map[string]string{"reason": "queue_full"}, 0},
	} {
		if got, ok := value(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (series found: %v); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for phase, want := range map[string]uint64{"admission": 4, "setup": 4, "create": 4, "start": 4, "first_call": 4, "reply": 4, "total": 4} {
		if got := sampleCount(fams, "rtsandbox_turn_phase_seconds", map[string]string{"phase": phase, "mode": "sealed"}); got != want {
			t.Errorf("rtsandbox_turn_phase_seconds{phase=%q} count = %d; want %d", phase, got, want)
		}
	}
	// Every model call reached the stand-in; the tool call did not.
	if got := sampleCount(fams, "rtsandbox_broker_upstream_seconds", map[string]string{"route": "model"}); got != 5 {
		t.Errorf("rtsandbox_broker_upstream_seconds{route=model} count = %d; want 5", got)
	}
	if got := sampleCount(fams, "rtsandbox_broker_upstream_seconds", map[string]string{"route": "tools"}); got != 0 {
		t.Errorf("rtsandbox_broker_upstream_seconds{route=tools} count = %d; want 0", got)
	}

	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve exit = %d; want 0\n%s", code, s.out.String())
	}
	assertNoTurnContainers(t, cli, tag)
	assertTurnRecords(t, s.out.String(), map[string]int{"ok": 2, "upstream": 2})
}

// assertTurnRecords checks that serve wrote one Info "turn" record per
// turn, with its class and phases, and no content.
func assertTurnRecords(t *testing.T, log string, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `"msg":"turn"`) {
			continue
		}
		if !strings.Contains(line, `"level":"INFO"`) || !strings.Contains(line, `"channel":"http:lobby"`) || !strings.Contains(line, `"total_ms":`) {
			t.Errorf("turn record lacks its level, channel or phases: %s", line)
		}
		for _, content := range []string{"Hello.", "lookup 7", "not JSON", sealedTestKey} {
			if strings.Contains(line, content) {
				t.Errorf("turn record carries content %q: %s", content, line)
			}
		}
		for class := range want {
			if strings.Contains(line, `"class":"`+class+`"`) {
				got[class]++
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("turn records by class = %v; want %v\n%s", got, want, log)
	}
}

// scrape reads url in the text exposition format.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d; want 200", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// series returns the metrics of family name whose labels include want
// (an empty wanted value matches an empty or absent label).
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && have[k] == v
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

// value sums the counter or gauge series that match; ok reports that
// there was one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (sum float64, ok bool) {
	ms := series(fams, name, want)
	for _, m := range ms {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum, len(ms) > 0
}

// sampleCount sums the histogram observations of the series that match.
func sampleCount(fams map[string]*dto.MetricFamily, name string, want map[string]string) uint64 {
	var n uint64
	for _, m := range series(fams, name, want) {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}
