package kubernetes

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
)

// benchInput has the stand-in reply as the real worker does: its reply
// and the end mark (wire.ReplyEnd), so Run takes the reply there and the
// Pod's or container's removal follows in the background (the early
// reply). Without the mark Run would wait for the exit and the removal,
// which no production turn does.
var benchInput = []byte(`{"mode":"early","text":"hi"}`)

// BenchmarkRealSealedTurn: one sealed turn of the stand-in worker (its
// echo reply with the end mark, no model call) from the engine's Run to
// its reply, side by side in one run: Docker's warm pool (a prestarted container, claimed),
// a prestarted Pod (claimed from an agent-sandbox pool of real Pods and
// attached by Prestart, outside the timer, as the sealed runtime's pool
// does), a warm claim on that pool within the turn, and a cold Pod.
// p50-ms is the median turn; claim-ms the warm claim to the worker
// running (Result.Started). The real-Pod tier only (RTSANDBOX_K8S_REAL=1):
//
//	RTSANDBOX_K8S_REAL=1 RTSANDBOX_K8S_TOOLS_DIR=$(scripts/k8s-tools.sh real) \
//	  go test -run '^$' -bench BenchmarkRealSealedTurn -benchtime 20x ./container/kubernetes/
//
// The -runsc and -gvisor rows are the same under gVisor: Docker's runtime
// runsc (scripts/runsc-register.sh) and the RuntimeClass gvisor.
func BenchmarkRealSealedTurn(b *testing.B) {
	runc, runsc := container.RuntimeRunc, container.RuntimeRunsc
	b.Run("docker-warm", func(b *testing.B) { benchDockerWarm(b, runc) })
	b.Run("k8s-prestarted", func(b *testing.B) { benchK8sPrestarted(b, runc) })
	b.Run("k8s-warm", func(b *testing.B) { benchK8s(b, true, runc) })
	b.Run("k8s-cold", func(b *testing.B) { benchK8s(b, false, runc) })
	b.Run("docker-warm-runsc", func(b *testing.B) { benchDockerWarm(b, runsc) })
	b.Run("k8s-prestarted-gvisor", func(b *testing.B) { benchK8sPrestarted(b, runsc) })
	b.Run("k8s-cold-gvisor", func(b *testing.B) { benchK8s(b, false, runsc) })
}

// report adds the median of ds (and of claims, when any) to b.
func report(b *testing.B, ds, claims []time.Duration) {
	median := func(v []time.Duration) float64 {
		slices.Sort(v)
		return float64(v[len(v)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(ds), "p50-ms")
	if len(claims) > 0 {
		b.ReportMetric(median(claims), "claim-ms")
	}
}

func benchDockerWarm(b *testing.B, runtime string) {
	realCluster(b) // the images
	cli, err := client.New(client.FromEnv)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	d := docker.New(cli)
	defer d.Close(context.Background())
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		spec := benchSpec(b, realEchoImage, runtime)
		spec.Labels, _ = container.TurnLabels("bench-docker")
		w, err := d.Prestart(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, timeWarmRun(b, ctx, w))
	}
	report(b, ds, nil)
}

func benchK8s(b *testing.B, warm bool, runtime string) {
	r := realRig(b)
	// Bounded: a pool that never fills fails the benchmark with the
	// controller's log instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := benchSpec(b, realEchoImage, runtime)
	spec.RunDir = r.runDir
	if warm {
		r.useWarmPoolOf(b, ctx, spec, 2)
		defer r.dropWarmPool(b, ctx) // its Pods' CPU is the next row's
	}
	var ds, claims []time.Duration
	for b.Loop() {
		spec.Name = container.PoolName()
		began := time.Now()
		res, err := r.e.Run(ctx, spec, benchInput)
		ds = append(ds, time.Since(began))
		if err != nil || !res.Reply.OK {
			b.Fatalf("Run = %+v, %v", res.Reply, err)
		}
		claims = append(claims, res.Started.Sub(began))
		b.StopTimer()
		if res.Settled != nil {
			<-res.Settled
		}
		if warm {
			r.waitPoolReady(b, ctx, r.ext(b), 2)
		}
		b.StartTimer()
	}
	if warm {
		report(b, ds, claims)
	} else {
		report(b, ds, nil)
	}
}

// benchK8sPrestarted times Warm.Run of a worker Prestart claimed from the
// agent-sandbox pool and attached, exactly as docker-warm times Docker's.
func benchK8sPrestarted(b *testing.B, runtime string) {
	r := realRig(b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := benchSpec(b, realEchoImage, runtime)
	spec.RunDir = r.runDir
	r.useWarmPoolOf(b, ctx, spec, 2)
	defer r.dropWarmPool(b, ctx)
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		spec.Name = container.PoolName()
		w, err := r.e.Prestart(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		// The refill of the claimed Sandbox is the cluster's work between
		// turns, not the turn's, as the other rows measure it.
		r.waitPoolReady(b, ctx, r.ext(b), 2)
		ds = append(ds, timeWarmRun(b, ctx, w))
	}
	report(b, ds, nil)
}

// timeWarmRun times w's turn, the timer stopped before it is called and
// again until the worker is gone.
func timeWarmRun(b *testing.B, ctx context.Context, w container.Warm) time.Duration {
	b.StartTimer()
	began := time.Now()
	res, err := w.Run(ctx, benchInput)
	d := time.Since(began)
	if err != nil || !res.Reply.OK {
		b.Fatalf("Run = %+v, %v", res.Reply, err)
	}
	b.StopTimer()
	if res.Settled != nil {
		<-res.Settled
	}
	b.StartTimer()
	return d
}

// dropWarmPool deletes the rig's warm pool and waits (a test's poll on the
// controller and the garbage collector) until its Pods are gone: the real
// node's two CPUs hold only so many workers, and the rows and tests after
// need theirs.
func (r *sealedRig) dropWarmPool(b testing.TB, ctx context.Context) {
	ns := r.e.pods.o.Namespace
	if err := r.ext(b).ExtensionsV1beta1().SandboxWarmPools(ns).Delete(ctx, "rtsandbox-sealed", metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	for {
		list, err := r.c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%d Pods of the warm pool left: %v", len(list.Items), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// benchSpec is a sealed spec of image for a benchmark.
func benchSpec(b *testing.B, image, runtime string) container.Spec {
	spec := testSpec(b)
	spec.Image, spec.UID, spec.GID, spec.Runtime = image, 1000, 1000, runtime
	// Half a CPU: the real tier's node has two, and a Pod's request is its
	// limit, so a pool of two 1.5-CPU workers never fits (the controller
	// waits for the second forever).
	spec.Limits.CPUs = 0.5
	spec.RunDir = b.TempDir()
	return spec
}
