package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// poolIdle reads rtsandbox_pool_idle from serve's metrics.
func poolIdle(tb testing.TB, metricsURL string) float64 {
	tb.Helper()
	v, _ := value(scrape(tb, metricsURL), "rtsandbox_pool_idle", nil)
	return v
}

// waitPoolIdle polls serve's metrics until the pool has n idle workers.
func waitPoolIdle(tb testing.TB, metricsURL string, n float64) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for poolIdle(tb, metricsURL) != n {
		if time.Now().After(deadline) {
			tb.Fatalf("the pool has not %v idle workers after 30 s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeSealedPool: serve with sandbox.pool.size 1 fills its pool after
// the start, answers a sealed turn on a warm worker, refills, reports it
// all in its metrics, and leaves no container (pooled ones included) when
// it stops.
func TestServeSealedPool(t *testing.T) {
	tag, cli := sealedImage(t)
	fm := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true}, fakemodel.Reply("Hello."))
	defer fm.Close()
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	cfg, _ := serveConfig(t, fm.ChatURL(), tag, addr)
	withPool(t, cfg, 1)
	appendConfig(t, cfg, fmt.Sprintf("metrics:\n  listen: %s\n", metricsAddr))
	s := startServe(t, addr, "--config", cfg)
	url := "http://" + metricsAddr + "/metrics"
	waitPoolIdle(t, url, 1)
	if got := chunksOf(s.say(t, "http:lobby", "hello")); len(got) != 1 || got[0] != "Hello." {
		t.Errorf("reply = %q; want Hello.", got)
	}
	waitPoolIdle(t, url, 1)
	fams := scrape(t, url)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rtsandbox_pool_size", nil, 1},
		{"rtsandbox_pool_claims_total", map[string]string{"served": "warm"}, 1},
		{"rtsandbox_pool_claims_total", map[string]string{"served": "cold"}, 0},
	} {
		if got, ok := value(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got := sampleCount(fams, "rtsandbox_pool_refill_seconds", nil); got != 2 {
		t.Errorf("rtsandbox_pool_refill_seconds count = %d; want 2 (the fill and the refill)", got)
	}
	for phase, want := range map[string]uint64{"create": 0, "start": 0, "first_call": 1, "total": 1} {
		if got := sampleCount(fams, "rtsandbox_turn_phase_seconds", map[string]string{"phase": phase, "mode": "sealed"}); got != want {
			t.Errorf("rtsandbox_turn_phase_seconds{phase=%q} count = %d; want %d", phase, got, want)
		}
	}
	if code := s.stop(t); code != exitOK {
		t.Fatalf("serve exit = %d; want 0\n%s", code, s.out.String())
	}
	assertNoTurnContainers(t, cli, tag)
}
