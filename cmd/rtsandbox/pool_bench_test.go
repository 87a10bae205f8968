package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// BenchmarkServeSealedPool measures the sealed turn's overhead cold and
// warm (issue 25) through `rtsandbox serve` and its HTTP chat API (POST
// with wait, from the message's admission to the reply in the answer)
// with an instant stand-in model on the real Docker engine, side by side
// in one run, under runc and (when registered) runsc, with the warm
// session turn for reference:
//
//   - session-warm: a session channel's turn, its worker running (runc);
//   - <runtime>/sealed-cold: a sealed turn on a serve without a pool
//     (sandbox.pool.size 0): create, start, turn, removal;
//   - <runtime>/sealed-warm: a sealed turn on a serve with a pool of 2,
//     each turn on a warm worker (the pool refills, untimed, between
//     turns: a turn that found it empty would be a cold one).
//
// Four serves run at once (a pool's idle workers are there while the
// other turns run, as on a real host). Each row reports its p50 and p99 in
// milliseconds, and the sealed ones the median of each phase of the
// serve's "turn" records (ph-<phase>-ms).
func BenchmarkServeSealedPool(b *testing.B) {
	tag, cli := sessionDocker(b)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true, NoRecord: true}, fakemodel.Reply("Hi."))
	defer model.Close()
	serveWith := func(runtime string, pool int, metricsAddr string) *server {
		addr := freeAddr(b)
		cfg, _ := sessionConfig(b, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
		withPool(b, cfg, pool)
		withRuntime(b, cfg, runtime)
		appendConfig(b, cfg, "channels_profile: {\"http:sealed\": default}\n")
		if metricsAddr != "" {
			appendConfig(b, cfg, fmt.Sprintf("metrics:\n  listen: %s\n", metricsAddr))
		}
		s := startServe(b, addr, "--config", cfg)
		s.on(b, "http:sealed")
		return s
	}
	const size = 2
	type serves struct {
		runtime    string
		warm, cold *server
		metricsURL string
	}
	var all []serves
	for _, rt := range container.Runtimes() {
		if err := docker.CheckRuntime(context.Background(), cli, rt); err != nil {
			b.Logf("%s rows skipped: %v", rt, err)
			continue
		}
		metricsAddr := freeAddr(b)
		s := serves{runtime: rt, metricsURL: "http://" + metricsAddr + "/metrics"}
		s.warm, s.cold = serveWith(rt, size, metricsAddr), serveWith(rt, 0, "")
		all = append(all, s)
	}
	all[0].warm.turn(b, "http:lobby") // the session channel's container and worker
	for _, s := range all {
		waitPoolIdle(b, s.metricsURL, size)
	}

	b.Run("session-warm", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			ds = append(ds, all[0].warm.turn(b, "http:lobby"))
		}
		reportP50P99(b, ds)
	})
	for _, s := range all {
		b.Run(s.runtime+"/sealed-cold", func(b *testing.B) {
			mark := len(s.cold.out.String())
			var ds []time.Duration
			for b.Loop() {
				ds = append(ds, s.cold.turn(b, "http:sealed"))
			}
			reportP50P99(b, ds)
			reportPhases(b, s.cold.out.String()[mark:])
		})
		b.Run(s.runtime+"/sealed-warm", func(b *testing.B) {
			mark := len(s.warm.out.String())
			var ds []time.Duration
			for b.Loop() {
				ds = append(ds, s.warm.turn(b, "http:sealed"))
				b.StopTimer()
				waitPoolIdle(b, s.metricsURL, size)
				b.StartTimer()
			}
			reportP50P99(b, ds)
			if n := reportPhases(b, s.warm.out.String()[mark:]); n.cold > 0 {
				b.Errorf("%d of the warm serve's sealed turns started cold", n.cold)
			}
		})
	}
	for _, s := range all {
		for _, srv := range []*server{s.warm, s.cold} {
			if code := srv.stop(b); code != exitOK {
				b.Fatalf("serve exit = %d\n%s", code, srv.out.String())
			}
		}
	}
}

func reportP50P99(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

// reportPhases reports the median of each phase of the sealed "turn"
// records in log, and counts the warm and cold ones.
func reportPhases(b *testing.B, log string) (n struct{ warm, cold int }) {
	phases := map[string][]float64{}
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `"msg":"turn"`) || !strings.Contains(line, `"channel":"http:sealed"`) {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["warm"] == true {
			n.warm++
		} else {
			n.cold++
		}
		for k, v := range rec {
			if f, ok := v.(float64); ok && strings.HasSuffix(k, "_ms") {
				phases[strings.TrimSuffix(k, "_ms")] = append(phases[strings.TrimSuffix(k, "_ms")], f)
			}
		}
	}
	for name, vs := range phases {
		slices.Sort(vs)
		b.ReportMetric(vs[len(vs)/2], "ph-"+name+"-ms")
	}
	return n
}
