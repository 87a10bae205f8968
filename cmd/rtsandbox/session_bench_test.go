package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// BenchmarkServeSessionTurn measures turns through `rtsandbox serve` and
// its HTTP chat API (POST with wait, from the message's admission to the
// reply in the answer) with an instant stand-in model, side by side in
// one serve on the real Docker engine:
//
//   - session-warm: a turn in a session channel whose worker is running
//     and ready (issue 12's target: ≤ 15 ms p50);
//   - sealed: a turn in a sealed channel (a new container each turn);
//   - session-first: the first turn of a new session channel, its
//     container start and the worker's announcement included. Each
//     channel is switched off after its turn, which removes its container,
//     so at most one session container of this run lives at a time.
//
// Each reports its p50 and p90 in milliseconds.
func BenchmarkServeSessionTurn(b *testing.B) {
	tag, _ := sessionDocker(b)
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true, NoRecord: true}, fakemodel.Reply("Hi."))
	defer model.Close()
	addr := freeAddr(b)
	cfg, _ := sessionConfig(b, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	appendConfig(b, cfg, "channels_profile: {\"http:sealed\": default}\n")
	s := startServe(b, addr, "--config", cfg)
	s.on(b, "http:sealed")
	s.turn(b, "http:lobby") // the warm channel's container and worker

	b.Run("session-warm", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			ds = append(ds, s.turn(b, "http:lobby"))
		}
		reportP50P90(b, ds)
	})
	b.Run("sealed", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			ds = append(ds, s.turn(b, "http:sealed"))
		}
		reportP50P90(b, ds)
	})
	b.Run("session-first", func(b *testing.B) {
		var ds []time.Duration
		n := 0
		for b.Loop() {
			n++
			ch := fmt.Sprintf("http:first-%d", n)
			b.StopTimer()
			s.on(b, ch)
			b.StartTimer()
			ds = append(ds, s.turn(b, ch))
			b.StopTimer()
			s.off(b, ch) // removes the channel's container
			b.StartTimer()
		}
		reportP50P90(b, ds)
	})
	if code := s.stop(b); code != exitOK {
		b.Fatalf("serve exit = %d\n%s", code, s.out.String())
	}
}

// BenchmarkServeSessionWorkerKill measures how long a guest waits for a
// session turn whose worker dies (issue 22): through serve and its HTTP
// chat API on the real Docker engine, with a 120 s turn timeout, each
// iteration starts a turn whose model call hangs, kills the channel's
// container (SIGKILL through the engine) and times from the kill request
// to the sandbox-stopped reply. The next iteration's first turn (untimed)
// starts a new container. It reports the p50 and p99 in milliseconds.
func BenchmarkServeSessionWorkerKill(b *testing.B) {
	tag, cli := sessionDocker(b)
	release := make(chan struct{})
	arrived := make(chan struct{}, 1) // a held turn's model call is under way
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: sealedTestKey, Loop: true, NoRecord: true},
		fakemodel.Func(func(req fakemodel.Request) fakemodel.Response {
			if strings.HasPrefix(lastWords(req.UserText()), "hold") {
				arrived <- struct{}{}
				<-release
			}
			return fakemodel.Response{Content: "Hi."}
		}))
	defer model.Close()
	defer close(release) // before Close, which waits for the handlers
	addr := freeAddr(b)
	cfg, _ := sessionConfig(b, model.ChatURL(), tag, addr, "  turn_timeout: 120s\n")
	s := startServe(b, addr, "--config", cfg)
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		s.turn(b, "http:lobby") // a running, ready worker
		cs := containersOf(b, cli, tag)
		if len(cs) != 1 || cs[0].State != "running" {
			b.Fatalf("containers = %+v; want one running", cs)
		}
		held := s.sayLater("http:lobby", "hold on")
		<-arrived
		b.StartTimer()
		start := time.Now()
		if _, err := cli.ContainerKill(context.Background(), cs[0].ID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
			b.Fatal(err)
		}
		got := <-held
		ds = append(ds, time.Since(start))
		if len(got) != 1 || got[0] != rtsandbox.SandboxStoppedText {
			b.Fatalf("reply to the killed turn = %q\nserve:\n%s", got, s.out.String())
		}
	}
	slices.Sort(ds)
	ms := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	if code := s.stop(b); code != exitOK {
		b.Fatalf("serve exit = %d\n%s", code, s.out.String())
	}
}

// turn runs one turn in channel and returns its time from the POST to the
// reply.
func (s *server) turn(tb testing.TB, channel string) time.Duration {
	tb.Helper()
	start := time.Now()
	got := chunksOf(s.say(tb, channel, "Hello"))
	d := time.Since(start)
	if len(got) != 1 || got[0] != "Hi." {
		tb.Fatalf("reply in %s = %q\nserve:\n%s", channel, got, s.out.String())
	}
	return d
}

func (s *server) on(tb testing.TB, channel string) { s.owner(tb, channel, true) }

func (s *server) off(tb testing.TB, channel string) { s.owner(tb, channel, false) }

func (s *server) owner(tb testing.TB, channel string, enabled bool) {
	tb.Helper()
	if code, body := s.call(tb, "POST", "/api/v1/channels/"+channel+"/sandbox", serveOwnerToken, fmt.Sprintf(`{"enabled":%v}`, enabled)); code != 200 {
		tb.Fatalf("sandbox %s enabled=%v = %d %s", channel, enabled, code, body)
	}
}

// reportP50P90 reports the median and the 90th percentile of ds in
// milliseconds.
func reportP50P90(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	ms := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.9), "p90-ms")
}
