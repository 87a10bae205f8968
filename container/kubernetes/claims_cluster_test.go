package kubernetes

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxclient "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"

	"github.com/rtsandbox/rtsandbox/container"
)

// useWarmPool puts a warm pool of size under the rig's spec in place and
// waits until the controller reports it full.
func (r *sealedRig) useWarmPool(t testing.TB, ctx context.Context, size int32) (*Claims, extclient.Interface) {
	t.Helper()
	return r.useWarmPoolOf(t, ctx, r.spec(t), size)
}

// useWarmPoolOf is useWarmPool of spec's workers.
func (r *sealedRig) useWarmPoolOf(t testing.TB, ctx context.Context, spec container.Spec, size int32) (*Claims, extclient.Interface) {
	t.Helper()
	ext, err := extclient.NewForConfig(r.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	sbx, err := sandboxclient.NewForConfig(r.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := NewClaims(ext, sbx, r.e.pods, "rtsandbox-sealed", size, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	r.e.UseClaims(cl)
	r.waitPoolReady(t, ctx, ext, size)
	return cl, ext
}

// waitPoolReady polls the pool's status (a test's wait on the
// controller, not the engine's) until size workers are ready.
func (r *sealedRig) waitPoolReady(t testing.TB, ctx context.Context, ext extclient.Interface, size int32) {
	t.Helper()
	for {
		p, err := ext.ExtensionsV1beta1().SandboxWarmPools(r.e.pods.o.Namespace).Get(ctx, "rtsandbox-sealed", metav1.GetOptions{})
		if err == nil && p.Status.ReadyReplicas == size {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("warm pool not ready: %v (%+v)\n%s", ctx.Err(), p.Status, r.c.LogTail("agent-sandbox-controller"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestClusterSealedTurnFromWarmPool: with a warm pool, a turn is served by
// a claim on it: a Pod that ran before the turn began, of the pool's
// template (the hardened spec and the installation's turn labels), the
// reply through the same hello and relay; after the turn the claim and
// the Pod are gone, and the pool refills.
func TestClusterSealedTurnFromWarmPool(t *testing.T) {
	r := newSealedRig(t, realWorker)
	ctx := clusterCtx(t)
	_, ext := r.useWarmPool(t, ctx, 2)
	spec := r.spec(t)
	began := time.Now()
	res, err := r.e.Run(ctx, spec, turnInput(t))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("warm turn on kwok: %v (claim to running %v)", time.Since(began), res.Started.Sub(began))
	if !res.Reply.OK {
		t.Errorf("reply %+v", res.Reply)
	}
	pod := r.att.pods[0]
	owned := len(pod.OwnerReferences) == 1 && pod.OwnerReferences[0].Kind == "Sandbox"
	if pod.Name == spec.Name || !owned || pod.CreationTimestamp.After(began) {
		t.Errorf("the turn ran in %s (owners %v, created %v), not a warm Sandbox's Pod made before %v", pod.Name, pod.OwnerReferences, pod.CreationTimestamp, began)
	}
	if pod.Labels[container.RoleLabel] != container.RoleTurn || !*pod.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("the claimed Pod is not the template's: %v", pod.Labels)
	}
	<-res.Settled
	if _, err := ext.ExtensionsV1beta1().SandboxClaims(pod.Namespace).Get(ctx, spec.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the claim after the turn: %v; want not found", err)
	}
	if got, err := r.c.Clientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) && (err != nil || got.UID == pod.UID) {
		t.Errorf("the claimed Pod after the turn: %v", err)
	}
	r.waitPoolReady(t, ctx, ext, 2)
}

// TestClusterSealedOtherSpecSkipsThePool: a turn whose Pod would differ
// from the pool's template (here another runtime) runs in a Pod of its
// own, never in a worker of another profile.
func TestClusterSealedOtherSpecSkipsThePool(t *testing.T) {
	r := newSealedRig(t, realWorker)
	ctx := clusterCtx(t)
	r.useWarmPool(t, ctx, 1)
	ensureRuntimeClass(t, ctx, r.c, "gvisor")
	spec := r.spec(t)
	spec.Runtime = container.RuntimeRunsc
	if _, err := r.e.Run(ctx, spec, turnInput(t)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if pod := r.att.pods[0]; pod.Name != spec.Name || *pod.Spec.RuntimeClassName != "gvisor" {
		t.Errorf("ran in %s (class %v); want its own Pod %s under gvisor", pod.Name, pod.Spec.RuntimeClassName, spec.Name)
	}
}

// TestClusterReapSparesLiveTurnsAndThePool: Reap removes an orphan claim
// and an orphan worker Pod of the installation, and spares the claim and
// Pod of a turn under way and the warm pool's idle Pods (the controller's).
func TestClusterReapSparesLiveTurnsAndThePool(t *testing.T) {
	inTurn, release := make(chan *corev1.Pod, 1), make(chan struct{})
	r := newSealedRig(t, func(ctx context.Context, pod *corev1.Pod, s Streams) error {
		inTurn <- pod
		<-release
		return realWorker(ctx, pod, s)
	})
	ctx := clusterCtx(t)
	cl, ext := r.useWarmPool(t, ctx, 2)
	orphanClaim, err := cl.pool.Claim("orphan-claim")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ext.ExtensionsV1beta1().SandboxClaims(r.e.pods.o.Namespace).Create(ctx, orphanClaim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := r.spec(t)
	orphan := spec
	orphan.Name = container.PoolName()
	startSealed(t, ctx, r.e.pods, orphan)
	done := make(chan error, 1)
	go func() {
		_, err := r.e.Run(ctx, spec, turnInput(t))
		done <- err
	}()
	live := <-inTurn
	n, err := r.e.Reap(ctx, "test-inst")
	if err != nil || n != 2 {
		t.Errorf("Reap = %d, %v; want the orphan claim and the orphan Pod", n, err)
	}
	if _, err := ext.ExtensionsV1beta1().SandboxClaims(live.Namespace).Get(ctx, spec.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the live turn's claim: %v", err)
	}
	if got, err := r.c.Clientset.CoreV1().Pods(live.Namespace).Get(ctx, live.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("the live turn's Pod: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the live turn: %v", err)
	}
	r.waitPoolReady(t, ctx, ext, 2)
}

// ext is a client of the agent-sandbox extensions on the rig's cluster.
func (r *sealedRig) ext(t testing.TB) extclient.Interface {
	t.Helper()
	ext, err := extclient.NewForConfig(r.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return ext
}
