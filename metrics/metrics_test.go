package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/metrics"
	"github.com/rtsandbox/rtsandbox/sealed"
	"github.com/rtsandbox/rtsandbox/session"
)

// fullTurn is a turn that reached every phase: 40 ms admission, 60 ms
// setup, 200 ms create, 300 ms start, 400 ms to the first call, 1 s of
// replies, 500 ms removal, 2.6 s in all.
func fullTurn(class string) sealed.TurnStats {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	return sealed.TurnStats{
		Channel: "http:lobby", Class: class,
		Admitted: at(0), Slotted: at(40), Listening: at(50), Began: at(100), Created: at(300), Started: at(600),
		FirstCall: at(1000), Exited: at(2000), Removed: at(2500), Ended: at(2600),
	}
}

// warmTurn is fullTurn served by a warm pool's worker: created and
// started long before the turn, claimed when the driver was called (100
// ms), its first call 900 ms after the claim.
func warmTurn() sealed.TurnStats {
	s := fullTurn(rtsandbox.ClassOK)
	s.Warm = true
	s.Created, s.Started = s.Admitted.Add(-time.Minute), s.Admitted.Add(-time.Minute+300*time.Millisecond)
	return s
}

// TestPoolMetrics: claims count warm and cold turns that reached the
// engine (one refused before it counts neither), the gauges read the
// pool, and refills land in their histogram.
func TestPoolMetrics(t *testing.T) {
	r := metrics.New()
	for _, name := range []string{"rtsandbox_pool_size", "rtsandbox_pool_idle"} {
		if got := gauge(t, r, name); got != 0 {
			t.Errorf("unbound %s = %v; want 0", name, got)
		}
	}
	r.Turn(warmTurn())
	r.Turn(warmTurn())
	r.Turn(fullTurn(rtsandbox.ClassOK))
	r.Turn(sealed.TurnStats{Class: rtsandbox.ClassEngine}) // refused before the engine
	for served, want := range map[string]float64{"warm": 2, "cold": 1} {
		if got := counter(t, r, "rtsandbox_pool_claims_total", "served", served); got != want {
			t.Errorf("pool_claims_total{served=%s} = %v; want %v", served, got, want)
		}
	}
	r.Pool(func() int { return 4 }, func() int { return 3 })
	if size, idle := gauge(t, r, "rtsandbox_pool_size"), gauge(t, r, "rtsandbox_pool_idle"); size != 4 || idle != 3 {
		t.Errorf("pool_size %v, pool_idle %v; want 4, 3", size, idle)
	}
	r.PoolRefill(200 * time.Millisecond)
	r.PoolRefill(300 * time.Millisecond)
	if n, err := testutil.GatherAndCount(r.Gatherer(), "rtsandbox_pool_refill_seconds"); err != nil || n != 1 {
		t.Fatalf("pool_refill_seconds series = %d, %v", n, err)
	}
	mf, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range mf {
		if f.GetName() == "rtsandbox_pool_refill_seconds" {
			if h := f.GetMetric()[0].GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != 0.5 {
				t.Errorf("pool_refill_seconds count %d sum %v; want 2, 0.5", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
}

func TestPhases(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	early := fullTurn(rtsandbox.ClassEngine)
	early.Created, early.Started, early.FirstCall, early.Exited, early.Removed = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	pending := fullTurn(rtsandbox.ClassOK)
	pending.Removed, pending.CleanupPending = time.Time{}, true
	noCall := fullTurn(rtsandbox.ClassWorker)
	noCall.FirstCall = time.Time{}
	tests := []struct {
		name  string
		stats sealed.TurnStats
		want  []metrics.Phase
	}{
		{"every-phase", fullTurn(rtsandbox.ClassOK), []metrics.Phase{
			{metrics.PhaseAdmission, ms(40)}, {metrics.PhaseSetup, ms(60)}, {metrics.PhaseCreate, ms(200)}, {metrics.PhaseStart, ms(300)},
			{metrics.PhaseFirstCall, ms(400)}, {metrics.PhaseReply, ms(1000)}, {metrics.PhaseRemoval, ms(500)},
			{metrics.PhaseTotal, ms(2600)},
		}},
		{"create-failed", early, []metrics.Phase{{metrics.PhaseAdmission, ms(40)}, {metrics.PhaseSetup, ms(60)}, {metrics.PhaseTotal, ms(2600)}}},
		{"removal-pending", pending, []metrics.Phase{
			{metrics.PhaseAdmission, ms(40)}, {metrics.PhaseSetup, ms(60)}, {metrics.PhaseCreate, ms(200)}, {metrics.PhaseStart, ms(300)},
			{metrics.PhaseFirstCall, ms(400)}, {metrics.PhaseReply, ms(1000)}, {metrics.PhaseTotal, ms(2600)},
		}},
		{"no-broker-call", noCall, []metrics.Phase{
			{metrics.PhaseAdmission, ms(40)}, {metrics.PhaseSetup, ms(60)}, {metrics.PhaseCreate, ms(200)}, {metrics.PhaseStart, ms(300)},
			{metrics.PhaseRemoval, ms(500)}, {metrics.PhaseTotal, ms(2600)},
		}},
		{"warm", warmTurn(), []metrics.Phase{
			{metrics.PhaseAdmission, ms(40)}, {metrics.PhaseSetup, ms(60)},
			{metrics.PhaseFirstCall, ms(900)}, {metrics.PhaseReply, ms(1000)}, {metrics.PhaseRemoval, ms(500)},
			{metrics.PhaseTotal, ms(2600)},
		}},
		{"nothing", sealed.TurnStats{}, []metrics.Phase{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, metrics.Phases(tt.stats)); diff != "" {
				t.Errorf("Phases (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTurnCountsClassAndPhases(t *testing.T) {
	r := metrics.New()
	r.Turn(fullTurn(rtsandbox.ClassOK))
	r.Turn(fullTurn(rtsandbox.ClassOK))
	failed := fullTurn(rtsandbox.ClassUpstream)
	failed.Removed = time.Time{}
	r.Turn(failed)
	r.Turn(fullTurn("Not A Class"))

	if got, want := counter(t, r, "rtsandbox_turns_total", "class", "ok", "mode", "sealed"), 2.0; got != want {
		t.Errorf("turns_total{class=ok,mode=sealed} = %v; want %v", got, want)
	}
	for class, want := range map[string]float64{"upstream": 1, "other": 1, "timeout": 0, "disk_full": 0} {
		if got := counter(t, r, "rtsandbox_turns_total", "class", class, "mode", "sealed"); got != want {
			t.Errorf("turns_total{class=%s,mode=sealed} = %v; want %v", class, got, want)
		}
	}
	if got := counter(t, r, "rtsandbox_turns_total", "class", "ok", "mode", "session"); got != 0 {
		t.Errorf("turns_total{class=ok,mode=session} = %v; want 0 (no session turn ran)", got)
	}
	for phase, want := range map[string]uint64{"admission": 4, "total": 4, "removal": 3} {
		if got := histCount(t, r, "rtsandbox_turn_phase_seconds", "phase", phase, "mode", "sealed"); got != want {
			t.Errorf("turn_phase_seconds{phase=%s} count = %d; want %d", phase, got, want)
		}
	}
	if got := histSum(t, r, "rtsandbox_turn_phase_seconds", "phase", "reply", "mode", "sealed"); got != 4 {
		t.Errorf("turn_phase_seconds{phase=reply} sum = %v; want 4 (4 turns of 1 s)", got)
	}
}

// Issue 21: session turns count in rtsandbox_turns_total with
// mode="session", each of the session runtime's classes starting at 0,
// and their total time in rtsandbox_turn_phase_seconds{phase="total",
// mode="session"}; sealed series are untouched.
func TestSessionTurnCountsWithMode(t *testing.T) {
	r := metrics.New()
	at := time.Unix(1_700_000_000, 0)
	r.SessionTurn(session.TurnStats{Channel: "http:lobby", Admitted: at, Ended: at.Add(2 * time.Second), Class: rtsandbox.ClassOK})
	r.SessionTurn(session.TurnStats{Channel: "http:lobby", Admitted: at, Ended: at.Add(time.Second), Class: rtsandbox.ClassTimeout})
	r.SessionTurn(session.TurnStats{Class: "Not A Class"}) // no times: counted, not timed
	for class, want := range map[string]float64{"ok": 1, "timeout": 1, "other": 1, "worker": 0, "stopped": 0} {
		if got := counter(t, r, "rtsandbox_turns_total", "class", class, "mode", "session"); got != want {
			t.Errorf("turns_total{class=%s,mode=session} = %v; want %v", class, got, want)
		}
	}
	for _, class := range session.Classes() {
		if metric(t, r, "rtsandbox_turns_total", "class", class, "mode", "session") == nil {
			t.Errorf("turns_total{class=%s,mode=session} does not start at 0", class)
		}
	}
	if got := counter(t, r, "rtsandbox_turns_total", "class", "ok", "mode", "sealed"); got != 0 {
		t.Errorf("turns_total{class=ok,mode=sealed} = %v; want 0", got)
	}
	if got, sum := histCount(t, r, "rtsandbox_turn_phase_seconds", "phase", "total", "mode", "session"),
		histSum(t, r, "rtsandbox_turn_phase_seconds", "phase", "total", "mode", "session"); got != 2 || sum != 3 {
		t.Errorf("turn_phase_seconds{phase=total,mode=session} = %d samples, %v s; want 2, 3", got, sum)
	}
}

func TestBrokerCall(t *testing.T) {
	r := metrics.New()
	r.BrokerCall(broker.CallRecord{Route: broker.RouteModel, Status: 200, Duration: time.Second, Upstream: 900 * time.Millisecond})
	r.BrokerCall(broker.CallRecord{Route: broker.RouteModel, Status: 502, Refusal: "call_failed", Upstream: time.Second, Reflection: true})
	r.BrokerCall(broker.CallRecord{Route: broker.RouteTools, Tool: "weather", Status: 400, Refusal: "invalid_arguments"})
	r.BrokerCall(broker.CallRecord{Route: broker.RouteTools, Tool: broker.UnknownTool, Status: 404, Refusal: "not_found"})
	r.BrokerCall(broker.CallRecord{Route: broker.RouteMCP, Tool: "../etc/Passwd", Status: 404, Refusal: "not_found"})
	want := `
# HELP rtsandbox_broker_calls_total Broker calls by route class, declared tool or MCP server, status and refusal class (empty when served).
# TYPE rtsandbox_broker_calls_total counter
rtsandbox_broker_calls_total{refusal="",route="model",status="200",tool=""} 1
rtsandbox_broker_calls_total{refusal="call_failed",route="model",status="502",tool=""} 1
rtsandbox_broker_calls_total{refusal="invalid_arguments",route="tools",status="400",tool="weather"} 1
rtsandbox_broker_calls_total{refusal="not_found",route="tools",status="404",tool="unknown"} 1
rtsandbox_broker_calls_total{refusal="not_found",route="mcp",status="404",tool="other"} 1
# HELP rtsandbox_broker_reflection_refusals_total Upstream answers the broker refused because they echoed the credential.
# TYPE rtsandbox_broker_reflection_refusals_total counter
rtsandbox_broker_reflection_refusals_total{route="model",tool=""} 1
`
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(want),
		"rtsandbox_broker_calls_total", "rtsandbox_broker_reflection_refusals_total"); err != nil {
		t.Error(err)
	}
	// Only calls that reached an upstream are timed.
	if got := histCount(t, r, "rtsandbox_broker_upstream_seconds", "route", "model"); got != 2 {
		t.Errorf("broker_upstream_seconds{route=model} count = %d; want 2", got)
	}
	if n, err := testutil.GatherAndCount(r.Gatherer(), "rtsandbox_broker_upstream_seconds"); err != nil || n != 1 {
		t.Errorf("broker_upstream_seconds series = %d, %v; want 1 (tools and MCP made no upstream call)", n, err)
	}
}

func TestDropsAndGauges(t *testing.T) {
	r := metrics.New()
	r.Drop("queue_full")
	r.Drop("queue_full")
	r.Drop("Channel Key http:lobby")
	r.DropReasons("queue_full", "empty")
	unbound := `
# HELP rtsandbox_container_removals_pending Turn containers whose removal the driver still retries in the background.
# TYPE rtsandbox_container_removals_pending gauge
rtsandbox_container_removals_pending 0
# HELP rtsandbox_messages_dropped_total Messages the router dropped, by reason.
# TYPE rtsandbox_messages_dropped_total counter
rtsandbox_messages_dropped_total{reason="empty"} 0
rtsandbox_messages_dropped_total{reason="other"} 1
rtsandbox_messages_dropped_total{reason="queue_full"} 2
# HELP rtsandbox_queue_depth Work in the router's per-channel queues, running tasks included.
# TYPE rtsandbox_queue_depth gauge
rtsandbox_queue_depth 0
# HELP rtsandbox_turns_active Turns admitted and not yet ended, by mode; sealed ones waiting for a host slot included.
# TYPE rtsandbox_turns_active gauge
rtsandbox_turns_active{mode="sealed"} 0
rtsandbox_turns_active{mode="session"} 0
`
	names := []string{"rtsandbox_container_removals_pending", "rtsandbox_messages_dropped_total", "rtsandbox_queue_depth", "rtsandbox_turns_active"}
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(unbound), names...); err != nil {
		t.Errorf("unbound gauges: %v", err)
	}
	depth := 0
	r.QueueDepth(func() int { depth++; return depth }) // read at every scrape
	r.ActiveTurns(func() int { return 3 })
	r.ActiveSessionTurns(func() int { return 5 })
	r.PendingRemovals(func() int { return 2 })
	for scrape, want := range []float64{1, 2} {
		if got := gauge(t, r, "rtsandbox_queue_depth"); got != want {
			t.Errorf("scrape %d: queue_depth = %v; want %v", scrape, got, want)
		}
	}
	for mode, want := range map[string]float64{"sealed": 3, "session": 5} {
		if got := metric(t, r, "rtsandbox_turns_active", "mode", mode).GetGauge().GetValue(); got != want {
			t.Errorf("turns_active{mode=%s} = %v; want %v", mode, got, want)
		}
	}
	if got := gauge(t, r, "rtsandbox_container_removals_pending"); got != 2 {
		t.Errorf("container_removals_pending = %v; want 2", got)
	}
}

// TestRegistryIsPrivate: two Recorders never share a series, and nothing
// lands in the process-wide default registry.
func TestRegistryIsPrivate(t *testing.T) {
	a, b := metrics.New(), metrics.New()
	a.Drop("queue_full")
	if got := counter(t, b, "rtsandbox_messages_dropped_total", "reason", "queue_full"); got != 0 {
		t.Errorf("second recorder sees %v drops; want 0", got)
	}
	if n, err := testutil.GatherAndCount(prometheus.DefaultGatherer, "rtsandbox_messages_dropped_total"); err != nil || n != 0 {
		t.Errorf("default registry holds %d rtsandbox series (%v); want 0", n, err)
	}
}

func TestHandlerServesOnlyMetrics(t *testing.T) {
	r := metrics.New()
	r.Turn(fullTurn(rtsandbox.ClassOK))
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	tests := []struct {
		method, path string
		status       int
		contains     string
	}{
		{"GET", "/metrics", 200, `rtsandbox_turns_total{class="ok",mode="sealed"} 1`},
		{"GET", "/metrics", 200, "go_goroutines"},
		{"HEAD", "/metrics", 200, ""},
		{"POST", "/metrics", 405, ""},
		{"GET", "/", 404, ""},
		{"GET", "/debug/pprof/", 404, ""},
		{"GET", "/metrics/x", 404, ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.contains) {
			t.Errorf("%s %s = %d (%d bytes); want %d containing %q", tt.method, tt.path, resp.StatusCode, len(body), tt.status, tt.contains)
		}
	}
}

// TestConcurrentUse runs the observers and scrapes at once (go test -race).
func TestConcurrentUse(t *testing.T) {
	r := metrics.New()
	r.QueueDepth(func() int { return 1 })
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				r.Turn(fullTurn(rtsandbox.ClassOK))
				r.BrokerCall(broker.CallRecord{Route: broker.RouteModel, Status: 200, Upstream: time.Millisecond})
				r.Drop("queue_full")
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := r.Gatherer().Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if got := counter(t, r, "rtsandbox_turns_total", "class", "ok", "mode", "sealed"); got != 800 {
		t.Errorf("turns_total{class=ok} = %v; want 800", got)
	}
}

func BenchmarkBrokerCall(b *testing.B) {
	r := metrics.New()
	c := broker.CallRecord{Route: broker.RouteModel, Status: 200, Duration: time.Second, Upstream: time.Second}
	for b.Loop() {
		r.BrokerCall(c)
	}
}

func BenchmarkTurn(b *testing.B) {
	r := metrics.New()
	s := fullTurn(rtsandbox.ClassOK)
	for b.Loop() {
		r.Turn(s)
	}
}

// metric returns the first series of family name that has every label
// of kv (key, value, key, value …); with none, its first series.
func metric(t *testing.T, r *metrics.Recorder, name string, kv ...string) *dto.Metric {
	t.Helper()
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, kv) {
				return m
			}
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == kv[i] && l.GetValue() == kv[i+1] }) {
			return false
		}
	}
	return true
}

func counter(t *testing.T, r *metrics.Recorder, name string, kv ...string) float64 {
	t.Helper()
	return metric(t, r, name, kv...).GetCounter().GetValue()
}

func gauge(t *testing.T, r *metrics.Recorder, name string) float64 {
	t.Helper()
	return metric(t, r, name).GetGauge().GetValue()
}

func histCount(t *testing.T, r *metrics.Recorder, name string, kv ...string) uint64 {
	t.Helper()
	return metric(t, r, name, kv...).GetHistogram().GetSampleCount()
}

func histSum(t *testing.T, r *metrics.Recorder, name string, kv ...string) float64 {
	t.Helper()
	return metric(t, r, name, kv...).GetHistogram().GetSampleSum()
}

func TestBudgetSpent(t *testing.T) {
	r := metrics.New()
	r.BudgetSpent("tokens", 137)
	r.BudgetSpent("tokens", 3)
	r.BudgetSpent("calls", 1)
	r.BudgetSpent("seconds", 0) // nothing spent: no series
	want := `
# HELP rtsandbox_budget_spent_total Daily-budget amounts settled, by kind (calls, tokens, seconds).
# TYPE rtsandbox_budget_spent_total counter
rtsandbox_budget_spent_total{kind="calls"} 1
rtsandbox_budget_spent_total{kind="tokens"} 140
`
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(want), "rtsandbox_budget_spent_total"); err != nil {
		t.Error(err)
	}
}

// What the door withheld is counted by kind, every kind at zero from the
// start; a kind from outside the fixed set counts as "other".
func TestDoorRefusals(t *testing.T) {
	r := metrics.New()
	r.DoorRefusal("reply")
	r.DoorRefusal("preview")
	r.DoorRefusal("reply")
	r.DoorRefusal("sk-not a kind")
	want := `
# HELP rtsandbox_door_refusals_total What the door withheld from a guest because it held a credential of the host in some form, by kind (reply, notice, report, preview, command).
# TYPE rtsandbox_door_refusals_total counter
rtsandbox_door_refusals_total{kind="command"} 0
rtsandbox_door_refusals_total{kind="notice"} 0
rtsandbox_door_refusals_total{kind="other"} 1
rtsandbox_door_refusals_total{kind="preview"} 1
rtsandbox_door_refusals_total{kind="reply"} 2
rtsandbox_door_refusals_total{kind="report"} 0
`
	if err := testutil.GatherAndCompare(r.Gatherer(), strings.NewReader(want), "rtsandbox_door_refusals_total"); err != nil {
		t.Error(err)
	}
}
