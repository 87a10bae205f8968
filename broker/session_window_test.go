package broker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Issue 21: the startup window's MCP calls are charged to the channel's
// and the installation's daily call budgets, which is what the owner's
// /usage reads (budget.Ledger.ChannelReport) and what the budget metric
// counts (Ledger.OnSettle); no speaker is charged, since none asked for
// them.
func TestSessionStartupWindowCharged(t *testing.T) {
	l := openLedger(t, budget.Config{})
	var mu sync.Mutex
	settled := map[budget.Kind]int64{}
	l.OnSettle = func(k budget.Kind, n int64) {
		mu.Lock()
		defer mu.Unlock()
		settled[k] += n
	}
	f := newSession(t, sessOptions{broker: func(c *broker.Config) { c.Budget = l }})
	wantResp(t, f.post("/mcp/research", rpcBody("initialize", "")), 200, "")
	wantResp(t, f.post("/mcp/research", rpcBody("tools/list", "")), 200, "")

	rep, err := l.ChannelReport(t.Context(), sessChannel)
	if err != nil {
		t.Fatal(err)
	}
	for _, es := range [][]budget.Entry{rep.ChannelUsage, rep.Installation} {
		for _, e := range es {
			if want := map[budget.Kind]int64{budget.Calls: 2}[e.Kind]; e.Used != want || e.Reserved != 0 {
				t.Errorf("usage report %+v; want %d %s used, none reserved", e, want, e.Kind)
			}
		}
	}
	for _, scope := range []string{budget.SpeakerScope(""), budget.ChannelScope("sandbox:startup")} {
		if u := usage(t, l, scope); u[budget.Calls].Used != 0 {
			t.Errorf("%s charged %+v; want nothing", scope, u[budget.Calls])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if settled[budget.Calls] != 2 {
		t.Errorf("settled calls (the budget metric) = %d; want 2", settled[budget.Calls])
	}
}

// Issue 21, the attack: a channel whose daily call budget is spent gets
// no window call through: 429 "Broker budget exhausted" (docs/session.md, "Routes and statuses", what an
// exhausted window answers), before any upstream contact. The
// installation's budget holds the same way.
func TestSessionStartupWindowOverDailyBudget(t *testing.T) {
	tests := []struct {
		name string
		cfg  budget.Config
	}{
		{"channel", budget.Config{PerChannel: budget.Limits{Calls: 2}}},
		{"installation", budget.Config{PerInstallation: budget.Limits{Calls: 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := openLedger(t, tt.cfg)
			f := newSession(t, sessOptions{broker: func(c *broker.Config) { c.Budget = l }})
			wantResp(t, f.post("/mcp/research", rpcBody("initialize", "")), 200, "")
			wantResp(t, f.post("/mcp/research", rpcBody("tools/list", "")), 200, "")
			wantResp(t, f.post("/mcp/research", rpcBody("tools/list", "")), 429, "Broker budget exhausted")
			if got := f.mcpMethods(); len(got) != 2 {
				t.Errorf("MCP upstream saw %q; want the two calls within the budget", got)
			}
		})
	}
}

// Issue 21, the attack: a worker posting /worker/ready in a loop, each
// time once the window expired, and calling tools/list in every window
// gets rtsandbox.StartupWindowsPerDay re-armed windows a day and no more
// (the window a new broker opens is not one of them); later windows
// answer 429 "Broker budget exhausted" with no upstream contact, and one
// log line says so. Windows it re-armed and never used cost nothing, and
// the next UTC day brings new ones.
func TestSessionReadyLoopCappedWindows(t *testing.T) {
	f := newSession(t, sessOptions{})
	list := func() resp { return f.post("/mcp/research", rpcBody("tools/list", "")) }
	nextWindow := func() {
		t.Helper()
		f.clock.Add(rtsandbox.StartupWindowTTL)
		wantResp(t, f.post(wire.RouteWorkerReady, ``), 200, "Ready")
	}
	wantResp(t, list(), 200, "") // the new broker's own window
	for range 5 {
		nextWindow() // re-armed, never used: free
	}
	for i := range rtsandbox.StartupWindowsPerDay {
		nextWindow()
		if r := list(); r.Status != 200 {
			t.Fatalf("re-armed window %d: tools/list = %d %s; want 200", i+1, r.Status, r.Body)
		}
	}
	calls := len(f.mcpMethods())
	for range 3 {
		nextWindow()
		wantResp(t, list(), 429, "Broker budget exhausted")
		wantResp(t, list(), 429, "Broker budget exhausted")
	}
	if got := len(f.mcpMethods()); got != calls {
		t.Errorf("MCP upstream saw %d calls after the cap; want none", got-calls)
	}
	if n := strings.Count(f.logs.String(), "used its startup windows of the day"); n != 1 {
		t.Errorf("cap log lines = %d; want 1\n%s", n, f.logs.String())
	}
	f.clock.Add(24 * time.Hour)
	nextWindow()
	wantResp(t, list(), 200, "")
}

// Issue 21: the quota is the host's, shared by the channel's brokers, so
// a recreated broker (a new container, a changed profile) does not start
// the channel's day afresh; another channel has its own count.
func TestSessionWindowQuotaOutlivesBroker(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	q := broker.NewWindowQuota(2, clock.Now)
	useWindows := func(ch rtsandbox.ChannelKey, n int) *sessFixture {
		f := newSession(t, sessOptions{session: func(c *broker.SessionConfig) { c.Channel, c.Windows = ch, q }})
		for range n {
			f.clock.Add(rtsandbox.StartupWindowTTL)
			wantResp(t, f.post(wire.RouteWorkerReady, ``), 200, "Ready")
			wantResp(t, f.post("/mcp/research", rpcBody("ping", "")), 200, "")
		}
		return f
	}
	useWindows(sessChannel, 2)
	again := useWindows(sessChannel, 0)
	wantResp(t, again.post("/mcp/research", rpcBody("ping", "")), 200, "") // a new broker's own window
	again.clock.Add(rtsandbox.StartupWindowTTL)
	wantResp(t, again.post(wire.RouteWorkerReady, ``), 200, "Ready")
	wantResp(t, again.post("/mcp/research", rpcBody("ping", "")), 429, "Broker budget exhausted")
	useWindows("discord:other", 2)
}

// A session broker with daily budgets must know its channel, and a
// channel it is given must be a valid key.
func TestSessionChannelRequiredWithBudget(t *testing.T) {
	l := openLedger(t, budget.Config{})
	b := plainBroker(t)
	withBudget, err := broker.New(broker.Config{ModelURL: ep("https://model.example"), Model: "m",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "k", nil }, Budget: l})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  broker.SessionConfig
		ok   bool
	}{
		{"budget-without-channel", broker.SessionConfig{Broker: withBudget}, false},
		{"budget-with-channel", broker.SessionConfig{Broker: withBudget, Channel: sessChannel}, true},
		{"invalid-channel", broker.SessionConfig{Broker: b, Channel: "no colon"}, false},
		{"no-budget-no-channel", broker.SessionConfig{Broker: b}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := broker.NewSession(tt.cfg)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, rtsandbox.ErrInvalid)) {
				t.Fatalf("NewSession = %v; want ok %v (or ErrInvalid)", err, tt.ok)
			}
			if s != nil {
				s.Close()
			}
		})
	}
}
