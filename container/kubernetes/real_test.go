package kubernetes

// The real-Pod tier (RTSANDBOX_K8S_REAL=1; docs/kubernetes.md, "Testing"):
// the engine with its real attacher on a kubelet and containerd, Pods
// under runc, the worker images imported from the local Docker.

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/enginetest"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// The images of the real tier: the real worker and the conformance
// suite's stand-in.
const (
	realWorkerImage = "rtsandbox-k8s-worker:test"
	realEchoImage   = "rtsandbox-k8s-echo:test"
)

var realImagesOnce sync.Once

// realCluster is the real-Pod cluster with both images imported.
func realCluster(t testing.TB) *k8stest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("real-Pod tier: not with -short")
	}
	realImagesOnce.Do(func() {
		if k8sReal() {
			k8stest.BuildImage(t, realWorkerImage, "github.com/rtsandbox/rtsandbox/cmd/rtsandbox-worker")
			k8stest.BuildImage(t, realEchoImage, enginetest.WorkerPackage)
		}
	})
	return k8stest.RequireReal(t, realWorkerImage, realEchoImage)
}

func k8sReal() bool { return k8stest.RealEnvSet() }

// realRig is a Sealed engine with the real attacher on the real cluster,
// its network listener on every address of the host (a Pod reaches it
// through the Pod network's gateway), and a turn broker on a socket.
func realRig(t testing.TB) *sealedRig {
	t.Helper()
	c := realCluster(t)
	tokens := broker.NewTokens()
	ln, err := broker.ListenNet("0.0.0.0:0", tokens, broker.NetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := clusterOptions(t, c)
	o.Broker = netip.AddrPortFrom(netip.MustParseAddr(k8stest.PodGateway), uint16(ln.Addr().(*net.TCPAddr).Port))
	att, err := NewAPIAttacher(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewSealed(c.Clientset.CoreV1(), att, tokens, "", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r := &sealedRig{c: c, e: e, tb: &turnBroker{}, runDir: t.TempDir(), listen: ln}
	r.serveBroker(t, r.runDir)
	return r
}

func (r *sealedRig) realSpec(t testing.TB, image string) container.Spec {
	spec := r.spec(t)
	spec.Image = image
	spec.UID, spec.GID = 1000, 1000
	return spec
}

// noTurnPods fails t when a turn Pod of the rig's namespace is left.
func (r *sealedRig) noTurnPods(t *testing.T, ctx context.Context) {
	t.Helper()
	list, err := r.c.Clientset.CoreV1().Pods(r.e.pods.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: container.RoleLabel + "=" + container.RoleTurn})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d turn Pods left", len(list.Items))
	}
}

// TestRealSealedTurn: the real worker in a real Pod: the hello and the
// turn through the attach subresource (API server, kubelet, containerd),
// its model call over the Pod network to the listener and through the
// relay, the reply at its end mark; the Pod gone after.
func TestRealSealedTurn(t *testing.T) {
	r := realRig(t)
	ctx := clusterCtx(t)
	res, err := r.e.Run(ctx, r.realSpec(t, realWorkerImage), turnInput(t))
	if err != nil {
		t.Fatalf("Run: %v (stderr %q)", err, res.StderrTail)
	}
	if !res.Reply.OK || !strings.HasPrefix(res.Reply.Text, "**Hello** from the `pod`") {
		t.Errorf("reply %+v", res.Reply)
	}
	t.Logf("cold turn in a real Pod: created→running %v, running→reply %v", res.Started.Sub(res.Began), res.Replied.Sub(res.Started))
	<-res.Settled
	r.noTurnPods(t, ctx)
}

// TestRealSealAsTheWorkerFeelsIt: the stand-in's probe inside a real Pod
// (the suite's OneShot/Profile, as far as a Pod expresses it): its uid
// and gid, no capabilities, no new privileges, a read-only root, a
// writable /tmp and workspace, the PID limit of its cgroup. A call to the
// broker with the hello's token answers; what else the Pod reaches is
// TestRealWorkerReachesOnlyTheBroker's.
func TestRealSealAsTheWorkerFeelsIt(t *testing.T) {
	r := realRig(t)
	ctx := clusterCtx(t)
	spec := r.realSpec(t, realEchoImage)
	res, err := r.e.Run(ctx, spec, []byte(`{"mode":"probe"}`))
	if err != nil {
		t.Fatalf("Run probe: %v (stderr %q)", err, res.StderrTail)
	}
	got := strings.Split(res.Reply.Text, "\n")
	t.Logf("probe: %q", got)
	for _, want := range []string{"uid=1000", "gid=1000", "root-write=no", "tmp-write=yes", "workspace-write=yes",
		"capeff=0000000000000000", "nonewprivs=1"} {
		if !slices.Contains(got, want) {
			t.Errorf("probe = %q; want a line %q", got, want)
		}
	}
	// The PID bound is the node's podPidsLimit (128 here, as
	// docs/kubernetes.md asks of a cluster), not the container's cgroup.
	res, err = r.e.Run(ctx, r.realSpec(t, realEchoImage), []byte(`{"mode":"spawn"}`))
	if n, cerr := strconv.Atoi(strings.TrimPrefix(res.Reply.Text, "spawned=")); err == nil && (cerr != nil || n >= 128) {
		t.Errorf("spawn = %q; want fewer than the node's 128", res.Reply.Text)
	} else if err != nil && !errors.Is(err, container.ErrWorkerFailed) {
		t.Errorf("spawn = %v", err)
	}
	res, err = r.e.Run(ctx, r.realSpec(t, realEchoImage), []byte(`{"mode":"broker"}`))
	if err != nil || res.Reply.Text != "HTTP/1.1 200 OK" {
		t.Errorf("a call to the broker from the Pod = %q, %v; want 200", res.Reply.Text, err)
	}
	r.noTurnPods(t, ctx)
}

// TestRealSealedFailures: a worker that exits 1 is ErrWorkerFailed with
// its exit code from the Pod's status; one that floods stdout is
// ErrOutputLimit; one that ignores SIGTERM is cut at the deadline. No Pod
// is left.
func TestRealSealedFailures(t *testing.T) {
	r := realRig(t)
	ctx := clusterCtx(t)
	res, err := r.e.Run(ctx, r.realSpec(t, realEchoImage), []byte(`{"mode":"fail"}`))
	if !errors.Is(err, container.ErrWorkerFailed) || res.ExitCode != 1 {
		t.Errorf("mode fail = %d, %v; want exit 1, ErrWorkerFailed", res.ExitCode, err)
	}
	if _, err := r.e.Run(ctx, r.realSpec(t, realEchoImage), []byte(`{"mode":"big"}`)); !errors.Is(err, container.ErrOutputLimit) {
		t.Errorf("mode big = %v; want ErrOutputLimit", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	deadline, _ := dctx.Deadline()
	if _, err := r.e.Run(dctx, r.realSpec(t, realEchoImage), []byte(`{"mode":"hostile"}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("mode hostile = %v; want the deadline", err)
	}
	if late := time.Since(deadline); late > 1500*time.Millisecond {
		t.Errorf("returned %v after the deadline", late)
	}
	time.Sleep(2 * time.Second) // the background deletions
	r.noTurnPods(t, ctx)
}

// TestRealWarmClaim: a turn claimed from a warm pool of real Pods.
func TestRealWarmClaim(t *testing.T) {
	r := realRig(t)
	ctx := clusterCtx(t)
	spec := r.realSpec(t, realWorkerImage)
	r.useWarmPoolOf(t, ctx, spec, 1)
	defer r.dropWarmPool(t, ctx) // its Pod's CPU is the next test's
	began := time.Now()
	res, err := r.e.Run(ctx, spec, turnInput(t))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("warm turn in a real Pod: claim→running %v, running→reply %v", res.Started.Sub(began), res.Replied.Sub(res.Started))
	if !res.Reply.OK {
		t.Errorf("reply %+v", res.Reply)
	}
	<-res.Settled
}

// TestRealSessionConversation: a session channel's conversation on real
// Pods: the real worker image runs `session --broker-from-file` in the
// channel's Pod, its run directory and workspace mounted by the kubelet
// from a claim on a host directory, and reaches the broker's listener
// through the Pod network with the channel's and each turn's token; the
// conversation survives the Pod's deletion.
func TestRealSessionConversation(t *testing.T) {
	c := realCluster(t)
	sessionConversation(t, c, conversationEnv{
		listen: "0.0.0.0:0",
		address: func(ln *net.TCPAddr) netip.AddrPort {
			return netip.AddrPortFrom(netip.MustParseAddr(k8stest.PodGateway), uint16(ln.Port))
		},
		image: realWorkerImage,
		claim: func(ns, name, root string) { c.BindClaimAt(t, ns, name, root) },
	})
}

// TestRealPrestartedTurn: a worker prestarted from a warm pool of real
// Pods, its attach opened through the API server before its turn: the
// turn goes down that attach, and nothing is left after.
func TestRealPrestartedTurn(t *testing.T) {
	r := realRig(t)
	ctx := clusterCtx(t)
	spec := r.realSpec(t, realWorkerImage)
	r.useWarmPoolOf(t, ctx, spec, 1)
	defer r.dropWarmPool(t, ctx)
	spec.Name = container.PoolName()
	w, err := r.e.Prestart(ctx, spec)
	if err != nil {
		t.Fatalf("Prestart: %v", err)
	}
	began := time.Now()
	res, err := w.Run(ctx, turnInput(t))
	if err != nil {
		t.Fatalf("Run: %v (stderr %q)", err, res.StderrTail)
	}
	t.Logf("prestarted turn in a real Pod: %v", time.Since(began))
	if !res.Reply.OK || !strings.HasPrefix(res.Reply.Text, "**Hello** from the `pod`") {
		t.Errorf("reply %+v", res.Reply)
	}
	<-res.Settled
}
