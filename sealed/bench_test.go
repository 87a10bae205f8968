package sealed

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// BenchmarkSealedTurn measures whole sealed turns, cold (a new container
// each), against an instant loopback stand-in model, and reports the p50
// of each phase in milliseconds: create (driver call to created), start
// (created to started), first-call (started to the first broker request),
// reply (first request to worker exit), removal (exit to removed) and
// total (admission to the end of the turn, run dir deleted), and the p99
// of the total. It runs once per runtime (runtime=runc, runtime=runsc:
// gVisor, skipped unless registered), side by side in one run.
// BenchmarkDockerRunRm runs the same image with a plain `docker run --rm`
// for comparison.
func BenchmarkSealedTurn(b *testing.B) {
	if integ.skip != "" {
		b.Skip(integ.skip)
	}
	for _, runtime := range container.Runtimes() {
		b.Run("runtime="+runtime, func(b *testing.B) {
			needBenchRuntime(b, runtime)
			benchSealedTurn(b, runtime)
		})
	}
}

// needBenchRuntime skips b unless the daemon runs runtime as the seal
// needs.
func needBenchRuntime(b *testing.B, runtime string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := docker.CheckRuntime(ctx, integ.cli, runtime); err != nil {
		b.Skip(err)
	}
}

func benchSealedTurn(b *testing.B, runtime string) {
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"Hi."}}]}`)
	}))
	defer model.Close()
	bk, err := broker.New(broker.Config{ModelURL: upstream.MustParseEndpoint(model.URL, true), Model: "bench",
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return "bench-key", nil }})
	if err != nil {
		b.Fatal(err)
	}
	base, err := os.MkdirTemp("", "sbb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	var mu sync.Mutex
	var stats []TurnStats
	uid, gid := workerIDs()
	state, err := memstore.Open(context.Background(), memstore.Options{Path: filepath.Join(base, "state", memstore.FileName)})
	if err != nil {
		b.Fatal(err)
	}
	defer state.Close()
	rt, err := New(Options{Broker: bk, Driver: integ.driver, Image: integ.workerImage, UID: uid, GID: gid,
		RunRoot: filepath.Join(base, "run"), State: state, Model: "bench",
		Installation: integ.installation, Runtime: runtime,
		OnTurn: func(s TurnStats) { mu.Lock(); stats = append(stats, s); mu.Unlock() }})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	speaker := rtsandbox.Speaker{ID: "bench", Name: "Bench", PrincipalID: "p_bench"}
	b.ResetTimer()
	for b.Loop() {
		reply, err := rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "bench:turn", Speaker: speaker}, "Hello")
		if err != nil || !reply.OK {
			b.Fatalf("turn = %+v, %v", reply, err)
		}
	}
	b.StopTimer()
	reportPhases(b, stats)
}

func reportPhases(b *testing.B, stats []TurnStats) {
	phases := []struct {
		name     string
		from, to func(TurnStats) time.Time
	}{
		{"create", func(s TurnStats) time.Time { return s.Began }, func(s TurnStats) time.Time { return s.Created }},
		{"start", func(s TurnStats) time.Time { return s.Created }, func(s TurnStats) time.Time { return s.Started }},
		{"first-call", func(s TurnStats) time.Time { return s.Started }, func(s TurnStats) time.Time { return s.FirstCall }},
		{"reply", func(s TurnStats) time.Time { return s.FirstCall }, func(s TurnStats) time.Time { return s.Exited }},
		{"removal", func(s TurnStats) time.Time { return s.Exited }, func(s TurnStats) time.Time { return s.Removed }},
		{"total", func(s TurnStats) time.Time { return s.Admitted }, func(s TurnStats) time.Time { return s.Ended }},
	}
	for _, p := range phases {
		var ds []time.Duration
		for _, s := range stats {
			ds = append(ds, p.to(s).Sub(p.from(s)))
		}
		b.ReportMetric(p50ms(ds), p.name+"-p50-ms")
		if p.name == "total" {
			b.ReportMetric(p99ms(ds), "total-p99-ms")
		}
	}
}

// p99ms is the 99th percentile (nearest rank) in milliseconds: the
// slowest of fewer than 100 samples.
func p99ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[(len(ds)*99+99)/100-1].Microseconds()) / 1000
}

func p50ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}

// BenchmarkDockerRunRm is the baseline: the same worker image through the
// Docker CLI with `docker run --rm`, no mounts, empty stdin (the worker
// prints its fixed failure reply and exits at once), once per runtime.
func BenchmarkDockerRunRm(b *testing.B) {
	if integ.skip != "" {
		b.Skip(integ.skip)
	}
	if _, err := exec.LookPath("docker"); err != nil {
		b.Skip("docker CLI not installed")
	}
	for _, runtime := range container.Runtimes() {
		b.Run("runtime="+runtime, func(b *testing.B) {
			needBenchRuntime(b, runtime)
			benchDockerRunRm(b, runtime)
		})
	}
}

func benchDockerRunRm(b *testing.B, runtime string) {
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command("docker", "run", "--rm", "-i", "--network", "none", "--pull", "never", "--runtime", runtime, integ.workerImage)
		cmd.Stdin = strings.NewReader("")
		out, _ := cmd.Output()
		if !strings.Contains(string(out), rtsandbox.WorkerFailedText) {
			b.Fatalf("docker run output %q", out)
		}
		ds = append(ds, time.Since(start))
	}
	b.ReportMetric(p50ms(ds), "total-p50-ms")
	b.ReportMetric(p99ms(ds), "total-p99-ms")
}

// BenchmarkBareContainer is the engine's own cost of one cold container on
// this machine with nothing of ours in it: the same image created,
// attached, started, left to exit at once (empty stdin) and removed through
// the Engine API, with no mounts and none of the hardening (only no network
// and no logs). It measures how much of a sealed turn is the engine.
func BenchmarkBareContainer(b *testing.B) {
	if integ.skip != "" {
		b.Skip(integ.skip)
	}
	ctx := context.Background()
	var create, start, exit, remove, total []time.Duration
	for b.Loop() {
		t0 := time.Now()
		c, err := integ.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config: &dcontainer.Config{Image: integ.workerImage, OpenStdin: true, StdinOnce: true,
				AttachStdin: true, AttachStdout: true, AttachStderr: true},
			HostConfig: &dcontainer.HostConfig{NetworkMode: "none", LogConfig: dcontainer.LogConfig{Type: "none"}},
		})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		att, err := integ.cli.ContainerAttach(ctx, c.ID, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
		if err != nil {
			b.Fatal(err)
		}
		w := integ.cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: dcontainer.WaitConditionNextExit})
		if _, err := integ.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		att.HijackedResponse.CloseWrite()
		go io.Copy(io.Discard, att.HijackedResponse.Reader)
		select {
		case <-w.Result:
		case err := <-w.Error:
			b.Fatal(err)
		}
		t3 := time.Now()
		att.HijackedResponse.Close()
		if _, err := integ.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		create, start, exit = append(create, t1.Sub(t0)), append(start, t2.Sub(t1)), append(exit, t3.Sub(t2))
		remove, total = append(remove, t4.Sub(t3)), append(total, t4.Sub(t0))
	}
	b.ReportMetric(p50ms(create), "create-p50-ms")
	b.ReportMetric(p50ms(start), "start-p50-ms")
	b.ReportMetric(p50ms(exit), "exit-p50-ms")
	b.ReportMetric(p50ms(remove), "removal-p50-ms")
	b.ReportMetric(p50ms(total), "total-p50-ms")
}
