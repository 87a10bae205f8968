package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// realServeImage is the real worker's image for serve's real-Pod tier
// (another tag than container/kubernetes's, whose test binary removes its
// own when it ends).
const realServeImage = "rtsandbox-k8s-serve-worker:test"

// realServeCluster is the real-Pod cluster with the worker's image in
// its containerd; it skips without RTSANDBOX_K8S_REAL=1.
func realServeCluster(t *testing.T) *k8stest.Cluster {
	t.Helper()
	if !k8stest.RealEnvSet() {
		k8stest.RequireReal(t) // skips, saying how to ask for the tier
	}
	k8stest.BuildImage(t, realServeImage, "github.com/rtsandbox/rtsandbox/cmd/rtsandbox-worker")
	return k8stest.RequireReal(t, realServeImage)
}

// turnClasses watches ns's turn Pods from now on; the returned func
// stops the watch and reports the RuntimeClass of each Pod seen
// ("<none>": the node's default handler, runc).
func turnClasses(t *testing.T, ctx context.Context, c *k8stest.Cluster, ns string) func() []string {
	t.Helper()
	w, err := c.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: container.RoleLabel + "=" + container.RoleTurn})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				seen[pod.Name] = cmp.Or(ptr.Deref(pod.Spec.RuntimeClassName, ""), "<none>")
			}
		}
	}()
	return func() []string {
		w.Stop()
		<-done
		return slices.Sorted(maps.Values(seen))
	}
}

// kubeServeConfig writes serve's config for engine: kubernetes on c, in
// namespace ns, with the broker's listener on every address of the host
// and named to the Pods by the Pod network's gateway; extra is appended.
func kubeServeConfig(t *testing.T, c *k8stest.Cluster, ns, modelURL, addr, extra string) (path, state string) {
	t.Helper()
	path, state = serveConfig(t, modelURL, realServeImage, addr)
	port := freeAddr(t)
	_, p, _ := net.SplitHostPort(port)
	appendConfig(t, path, fmt.Sprintf("engine: kubernetes\nkubernetes:\n  kubeconfig: %s\n  namespace: %s\n"+
		"  broker: {listen: \"0.0.0.0:%s\", address: \"%s:%s\"}\n%s", c.Kubeconfig, ns, p, k8stest.PodGateway, p, extra))
	return path, state
}

// TestRealKubernetesServe (real-Pod tier): `rtsandbox serve` on engine:
// kubernetes with the stand-in model, its workers in real Pods under
// runc. A sealed conversation: each turn in a Pod of its own, started for
// it (no pool) or claimed and attached before it (serve's warm pool, the
// turns counted warm), and no turn Pod is left after serve stopped; and
// with sandbox.runtime runsc, every turn Pod under the RuntimeClass
// gvisor, run by gVisor in the node's containerd. A session
// conversation: the channel's Pod, its run directory and workspace from a
// claim on a host directory, answers two turns, the second with the
// first in its conversation, and outlives serve's stop for `rtsandbox
// reap` to remove.
func TestRealKubernetesServe(t *testing.T) {
	c := realServeCluster(t)
	model := echoModel()
	defer model.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pods := func(ns, role string) int { return livePods(t, ctx, c, ns, role) }

	t.Run("sealed", func(t *testing.T) {
		for _, run := range []struct {
			pool    int
			runtime string // sandbox.runtime; "" runc
		}{{0, ""}, {1, ""}, {0, container.RuntimeRunsc}} {
			pool := run.pool
			ns := c.Namespace(t)
			addr, metricsAddr := freeAddr(t), freeAddr(t)
			path, _ := kubeServeConfig(t, c, ns, model.ChatURL(), addr, fmt.Sprintf("metrics:\n  listen: %s\n", metricsAddr))
			withPool(t, path, pool)
			classes := turnClasses(t, ctx, c, ns)
			if run.runtime != "" {
				editConfig(t, path, "  pool: {size: 0}\n", "  pool: {size: 0}\n  runtime: "+run.runtime+"\n")
			}
			s := startServe(t, addr, "--config", path)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("serve (pool %d):\n%s\npods:\n%s", pool, s.out.String(), describePods(ctx, c, ns))
				}
			})
			url := "http://" + metricsAddr + "/metrics"
			for _, text := range []string{"hello", "and again"} {
				if pool > 0 {
					waitPoolIdle(t, url, float64(pool)) // the turn gets a Pod claimed and attached before it
				}
				s.sayOne(t, "http:lobby", text, "Answer to "+text)
			}
			served := map[string]float64{"warm": 0, "cold": 2}
			if pool > 0 {
				served = map[string]float64{"warm": 2, "cold": 0}
			}
			fams := scrape(t, url)
			for how, want := range served {
				if got, _ := value(fams, "rtsandbox_pool_claims_total", map[string]string{"served": how}); got != want {
					t.Errorf("pool %d: %s turns = %v; want %v", pool, how, got, want)
				}
			}
			s.stopOK(t)
			waitPods(t, func() int { return pods(ns, container.RoleTurn) }, 0, fmt.Sprintf("turn Pods (pool %d) after serve stopped", pool))
			want := "<none>"
			if run.runtime == container.RuntimeRunsc {
				want = k8stest.GVisorClass
			}
			if got := classes(); len(got) == 0 || slices.ContainsFunc(got, func(c string) bool { return c != want }) {
				t.Errorf("runtime %q: turn Pods ran under RuntimeClasses %v; want each %s", run.runtime, got, want)
			}
		}
	})

	t.Run("session", func(t *testing.T) {
		ns := c.Namespace(t)
		addr := freeAddr(t)
		root := t.TempDir()
		c.BindClaimAt(t, ns, "channels", root)
		path, _ := kubeServeConfig(t, c, ns, model.ChatURL(), addr,
			fmt.Sprintf("  session: {claim: channels, root: %s}\nprofiles:\n  chat: {mode: session}\ndefault_profile: chat\nsession:\n  party_dir: %s\n",
				root, filepath.Join(root, "party")))
		s := startServe(t, addr, "--config", path)
		s.sayOne(t, "http:lobby", "hello", "Answer to hello")
		s.sayOne(t, "http:lobby", "and again", "Answer to and again")
		wantInLast(t, model, "the second turn's model request", "hello", "Answer to hello")
		s.stopOK(t)
		if n := pods(ns, container.RoleSession); n != 1 {
			t.Errorf("%d session Pods after serve stopped; want the channel's", n)
		}
		reapOK(t, ctx, path, "removed 1 session container(s)")
		waitPods(t, func() int { return pods(ns, container.RoleSession) }, 0, "session Pods after reap")
	})
}

// waitPods waits up to 30 s for count to say want.
func waitPods(t *testing.T, count func() int, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n := count(); n != want; n = count() {
		if time.Now().After(deadline) {
			t.Errorf("%d %s; want %d", n, what, want)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// describePods is what a failure message shows of namespace ns's Pods:
// each one's name, phase, conditions and worker state.
func describePods(ctx context.Context, c *k8stest.Cluster, ns string) string {
	list, err := c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range list.Items {
		fmt.Fprintf(&b, "%s %s deleting=%v conditions=%v containers=%+v\n", p.Name, p.Status.Phase, p.DeletionTimestamp != nil, p.Status.Conditions, p.Status.ContainerStatuses)
	}
	return b.String()
}
