package kubernetes

// The cluster tier (docs/kubernetes.md, "Testing"): the engine's objects
// on a real kube-apiserver with its scheduler, garbage collector, kwok's
// fake node and the agent-sandbox controller (internal/k8stest). kwok
// marks Pods running and fails them on a label; nothing runs in them, so
// a worker's process is played in the test (fakeAttacher) by the real
// worker code.

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// clusterOptions are the test installation's options in a fresh namespace.
func clusterOptions(t testing.TB, c *k8stest.Cluster) Options {
	t.Helper()
	return Options{Namespace: c.Namespace(t), Installation: "test-inst",
		Broker: netip.MustParseAddrPort("10.96.0.10:7443")}
}

// clusterPods are the Pods of the test installation in a fresh namespace.
func clusterPods(t testing.TB) (*k8stest.Cluster, *Pods) {
	t.Helper()
	c := k8stest.Require(t)
	p, err := NewPods(c.Clientset.CoreV1(), clusterOptions(t, c))
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

func clusterCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startSealed starts a sealed worker's Pod under spec on p.
func startSealed(t testing.TB, ctx context.Context, p *Pods, spec container.Spec) *corev1.Pod {
	t.Helper()
	pod, err := SealedPod(spec, p.o)
	if err != nil {
		t.Fatal(err)
	}
	running, err := p.Start(ctx, pod)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return running
}

// failPod makes kwok end the Pod's worker with exit code 1 at once, as a
// crash would.
func failPod(t *testing.T, ctx context.Context, c *k8stest.Cluster, pod *corev1.Pod) {
	t.Helper()
	patch := `{"metadata":{"labels":{"` + k8stest.FailLabel + `":"true"},"annotations":{"` +
		k8stest.FailLabel + `/delay":"0","` + k8stest.FailLabel + `/jitter-delay":"0"}}}`
	_, err := c.Clientset.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("fail pod: %v", err)
	}
}

// TestClusterPodLifecycle: a sealed worker's Pod is created under the
// sealed profile as the API server stores it, runs, carries the
// installation and role labels, and Delete returns once it is gone.
func TestClusterPodLifecycle(t *testing.T) {
	c, p := clusterPods(t)
	ctx := clusterCtx(t)
	spec := testSpec(t)
	pod := startSealed(t, ctx, p, spec)
	if pod.Spec.NodeName != k8stest.NodeName {
		t.Errorf("scheduled on %q", pod.Spec.NodeName)
	}
	if pod.Labels[container.InstallationLabel] != "test-inst" || pod.Labels[container.RoleLabel] != container.RoleTurn {
		t.Errorf("labels %v", pod.Labels)
	}
	w := pod.Spec.Containers[0]
	sc := w.SecurityContext
	if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		*pod.Spec.AutomountServiceAccountToken || !*pod.Spec.SecurityContext.RunAsNonRoot || w.ImagePullPolicy != corev1.PullNever {
		t.Errorf("the stored Pod lost its hardening: %+v", pod.Spec)
	}
	if err := p.Delete(ctx, pod.Name, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after Delete: %v; want not found", err)
	}
}

// ensureRuntimeClass creates the cluster-wide RuntimeClass name once.
func ensureRuntimeClass(t testing.TB, ctx context.Context, c *k8stest.Cluster, name string) {
	t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: "runsc"}
	if _, err := c.Clientset.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestClusterRuntimeClass: a runsc spec runs under the gVisor
// RuntimeClass; one the cluster lacks is refused at the create, never run
// under the default handler.
func TestClusterRuntimeClass(t *testing.T) {
	c, p := clusterPods(t)
	ctx := clusterCtx(t)
	ensureRuntimeClass(t, ctx, c, "gvisor")
	spec := testSpec(t)
	spec.Runtime = container.RuntimeRunsc
	pod := startSealed(t, ctx, p, spec)
	if got := pod.Spec.RuntimeClassName; got == nil || *got != "gvisor" {
		t.Errorf("runtimeClassName %v; want gvisor", got)
	}
	o := p.o
	o.RuntimeClasses = map[string]string{container.RuntimeRunsc: "absent-class"}
	q, err := NewPods(c.Clientset.CoreV1(), o)
	if err != nil {
		t.Fatal(err)
	}
	spec.Name = container.PoolName()
	missing, err := SealedPod(spec, q.o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Start(ctx, missing); !errors.Is(err, container.ErrEngine) {
		t.Errorf("Start under a missing RuntimeClass = %v; want ErrEngine", err)
	}
}

// TestClusterFailureHeardByWatch: a worker that fails (kwok ends its
// container with exit code 1) is heard by Watch and by Exit through the
// watch, within a second or two, never at a deadline.
func TestClusterFailureHeardByWatch(t *testing.T) {
	c, p := clusterPods(t)
	ctx := clusterCtx(t)
	pod := startSealed(t, ctx, p, testSpec(t))
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	down, err := p.Watch(wctx, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	exit := make(chan exitEnd, 1)
	go func() {
		code, err := p.Exit(wctx, pod.Name, pod.UID)
		exit <- exitEnd{code, err}
	}()
	began := time.Now()
	failPod(t, ctx, c, pod)
	select {
	case err := <-down:
		if !errors.Is(err, container.ErrSessionDown) {
			t.Errorf("Watch sent %v; want ErrSessionDown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not hear the failure")
	}
	end := <-exit
	if end.err != nil || end.code != 1 {
		t.Errorf("Exit = %d, %v; want 1, nil", end.code, end.err)
	}
	t.Logf("failure heard after %v", time.Since(began))
	if err := p.Delete(ctx, pod.Name, pod.UID); err != nil {
		t.Fatal(err)
	}
}

// TestClusterReapOnlyOurs: Reap deletes the installation's Pods of the
// role asked, and leaves another role, another installation and an
// unlabelled Pod alone.
func TestClusterReapOnlyOurs(t *testing.T) {
	c, p := clusterPods(t)
	ctx := clusterCtx(t)
	api := c.Clientset.CoreV1().Pods(p.o.Namespace)
	pods := []*corev1.Pod{
		labelled("ours-1", "test-inst", container.RoleTurn),
		labelled("ours-2", "test-inst", container.RoleTurn),
		labelled("our-session", "test-inst", container.RoleSession),
		labelled("theirs", "other-inst", container.RoleTurn),
		labelled("bare", "", ""),
	}
	for _, pod := range pods {
		pod.Namespace, pod.UID = p.o.Namespace, ""
		pod.Spec.Containers = []corev1.Container{{Name: WorkerContainer, Image: "rtsandbox-worker:latest"}}
		if _, err := api.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := p.Reap(ctx, container.RoleTurn, nil)
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2", n, err)
	}
	left := livePods(t, ctx, api)
	if want := []string{"bare", "our-session", "theirs"}; !slices.Equal(left, want) {
		t.Errorf("left %v; want %v", left, want)
	}
}

// TestClusterWorkerPolicyPresent: the workers' NetworkPolicy is accepted
// and stored as built: no ingress, egress to the broker's /32 and port
// and to the serve Pods on the same port. kwok enforces nothing; the
// real-Pod tier proves it enforced (TestRealWorkerReachesOnlyTheBroker).
func TestClusterWorkerPolicyPresent(t *testing.T) {
	c, p := clusterPods(t)
	ctx := clusterCtx(t)
	pol, err := WorkerPolicy(p.o)
	if err != nil {
		t.Fatal(err)
	}
	api := c.Clientset.NetworkingV1().NetworkPolicies(p.o.Namespace)
	if _, err := api.Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := api.Get(ctx, PolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An empty ingress list comes back as none: both mean no ingress.
	if diff := cmp.Diff(pol.Spec, got.Spec, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("stored policy (-built +stored):\n%s", diff)
	}
}

// livePods are the sorted names of api's Pods not being deleted.
func livePods(t testing.TB, ctx context.Context, api corev1client.PodInterface) []string {
	t.Helper()
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pod := range list.Items {
		if pod.DeletionTimestamp == nil {
			names = append(names, pod.Name)
		}
	}
	slices.Sort(names)
	return names
}
