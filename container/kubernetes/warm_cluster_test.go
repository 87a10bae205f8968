package kubernetes

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// warmSpec is a pool slot's spec as the sealed runtime makes it: a
// neutral name and an empty run dir, the turn's broker socket made there
// only at the claim (serveBroker).
func (r *sealedRig) warmSpec(t testing.TB) container.Spec {
	spec := r.spec(t)
	spec.Name, spec.RunDir = container.PoolName(), t.TempDir()
	return spec
}

// prestart prestarts spec on the rig's engine: named spec.Name, its attach
// up (the attacher was called), nothing written on its stdin, Exited open.
func (r *sealedRig) prestart(t *testing.T, ctx context.Context, spec container.Spec) (container.Warm, *corev1.Pod) {
	t.Helper()
	began := time.Now()
	w, err := r.e.Prestart(ctx, spec)
	if err != nil {
		t.Fatalf("Prestart: %v", err)
	}
	t.Logf("prestart on kwok: %v", time.Since(began))
	if w.Name() != spec.Name || w.Image() != spec.Image {
		t.Errorf("Name, Image = %q, %q; want %q, %q", w.Name(), w.Image(), spec.Name, spec.Image)
	}
	r.att.mu.Lock()
	pods, written := len(r.att.pods), r.att.stdin.Len()
	r.att.mu.Unlock()
	if pods != 1 || written != 0 {
		t.Fatalf("after Prestart: %d attaches, %d bytes on stdin; want the one attach up and nothing of a turn", pods, written)
	}
	select {
	case <-w.Exited():
		t.Fatal("Exited is closed for a worker that waits for its claim")
	default:
	}
	return w, r.att.pods[0]
}

// replayRefused: the turn's token is refused once the turn is over.
func (r *sealedRig) replayRefused(t *testing.T, ctx context.Context) {
	t.Helper()
	hello := r.att.hello(t)
	cl := brokerclient.Client{Network: &brokerclient.Network{Addr: hello.Broker, Token: hello.Token}}
	var se *brokerclient.StatusError
	if _, err := cl.Post(ctx, wire.RouteModel, []byte(`{}`)); !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Errorf("replay after the turn = %v; want 401", err)
	}
}

// gone fails t unless the Pod (by its UID) and, when named, the claim are
// gone.
func (r *sealedRig) gone(t *testing.T, ctx context.Context, pod *corev1.Pod, claim string) {
	t.Helper()
	if claim != "" {
		if _, err := r.ext(t).ExtensionsV1beta1().SandboxClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the claim %s: %v; want not found", claim, err)
		}
	}
	if got, err := r.c.Clientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) && (err != nil || got.UID == pod.UID) {
		t.Errorf("the Pod %s: %v; want it gone", pod.Name, err)
	}
}

// TestClusterSealedPrestartedTurn: a worker prestarted from the warm pool
// (claimed and attached before its turn, nothing on its stdin, Exited
// open; the pool refills meanwhile) answers its claim through the hello
// and the relay to the socket its run dir got after the prestart, with
// the prestart's timestamps; the token is refused after the turn, and the
// claim and the Pod are gone once it settled.
func TestClusterSealedPrestartedTurn(t *testing.T) {
	r := newSealedRig(t, realWorker)
	ctx := clusterCtx(t)
	_, ext := r.useWarmPool(t, ctx, 2)
	spec := r.warmSpec(t)
	w, pod := r.prestart(t, ctx, spec)
	if owned := len(pod.OwnerReferences) == 1 && pod.OwnerReferences[0].Kind == "Sandbox"; !owned {
		t.Errorf("prestarted in %s (owners %v), not a warm Sandbox's Pod", pod.Name, pod.OwnerReferences)
	}
	r.waitPoolReady(t, ctx, ext, 2) // the cluster's pool refills beneath the prestarted one
	r.serveBroker(t, spec.RunDir)
	began := time.Now()
	res, err := w.Run(ctx, turnInput(t))
	if err != nil {
		t.Fatalf("Run: %v (stderr %q)", err, res.StderrTail)
	}
	t.Logf("prestarted turn on kwok: %v", time.Since(began))
	if !res.Reply.OK || res.Settled == nil {
		t.Errorf("reply %+v, settled %v; want an early reply", res.Reply, res.Settled)
	}
	if res.Created.IsZero() || res.Started.IsZero() || !res.Started.Before(res.Began) {
		t.Errorf("created %v, started %v, began %v: want the prestart's before the claim", res.Created, res.Started, res.Began)
	}
	if len(r.tb.headers) == 0 {
		t.Error("the worker never reached the turn's broker")
	}
	r.replayRefused(t, ctx)
	<-res.Settled
	r.gone(t, ctx, pod, spec.Name)
	r.waitPoolReady(t, ctx, ext, 2)
}

// TestClusterSealedPrestartDiscard: a prestarted worker, in a Pod of its
// own or claimed from the pool, is spared by Reap while it waits and gone
// (its Pod, its claim) after Discard.
func TestClusterSealedPrestartDiscard(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		t.Run(map[bool]string{false: "own-pod", true: "pool"}[pooled], func(t *testing.T) {
			r := newSealedRig(t, realWorker)
			ctx := clusterCtx(t)
			claim := ""
			spec := r.warmSpec(t)
			if pooled {
				r.useWarmPool(t, ctx, 1)
				claim = spec.Name
			}
			w, pod := r.prestart(t, ctx, spec)
			if n, err := r.e.Reap(ctx, "test-inst"); err != nil || n != 0 {
				t.Errorf("Reap while it waits = %d, %v; want 0", n, err)
			}
			if err := w.Discard(ctx); err != nil {
				t.Fatalf("Discard: %v", err)
			}
			r.e.Close() // waits for a removal that went on in the background
			r.gone(t, ctx, pod, claim)
		})
	}
}

// TestClusterSealedPrestartedPodLostWhileIdle: a prestarted worker whose
// Pod is deleted (a claimed one: its claim is released) or fails (kwok's
// failure label) while it waits is reported by Exited without a claim,
// within seconds; its Run fails at once with ErrEngine or ErrWorkerFailed,
// not at the turn's deadline, and it is removed.
func TestClusterSealedPrestartedPodLostWhileIdle(t *testing.T) {
	lose := map[string]func(t *testing.T, ctx context.Context, r *sealedRig, pod *corev1.Pod){
		"deleted": func(t *testing.T, ctx context.Context, r *sealedRig, pod *corev1.Pod) {
			grace := int64(0)
			if err := r.c.Clientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
				t.Fatal(err)
			}
		},
		"failed": func(t *testing.T, ctx context.Context, r *sealedRig, pod *corev1.Pod) { failPod(t, ctx, r.c, pod) },
	}
	for _, name := range []string{"deleted", "failed"} {
		t.Run(name, func(t *testing.T) {
			r := newSealedRig(t, realWorker)
			ctx := clusterCtx(t)
			claim := ""
			spec := r.warmSpec(t)
			if name == "deleted" {
				r.useWarmPool(t, ctx, 1)
				claim = spec.Name
			}
			w, pod := r.prestart(t, ctx, spec)
			lose[name](t, ctx, r, pod)
			select {
			case <-w.Exited():
			case <-time.After(10 * time.Second):
				w.Discard(ctx) // else the engine's Close waits for it
				t.Fatal("Exited still open 10 s after the Pod was lost")
			}
			const deadline = 30 * time.Second
			tctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			began := time.Now()
			_, err := w.Run(tctx, turnInput(t))
			if !errors.Is(err, container.ErrEngine) && !errors.Is(err, container.ErrWorkerFailed) {
				t.Errorf("Run of a lost worker = %v; want ErrEngine or ErrWorkerFailed", err)
			}
			if took := time.Since(began); took > 2*time.Second {
				t.Errorf("Run failed after %v; want at once, not at the %v deadline", took, deadline)
			}
			r.e.Close()
			r.gone(t, ctx, pod, claim)
		})
	}
}

// TestClusterSealedPrestartCancelledTurn: the turn's ctx ends while the
// prestarted worker works on it: Run returns ErrAborted wrapping the
// cause promptly (the pre-opened attach is cut), the token is refused
// after, and no Pod is left.
func TestClusterSealedPrestartCancelledTurn(t *testing.T) {
	r := newSealedRig(t, func(ctx context.Context, _ *corev1.Pod, s Streams) error {
		io.Copy(io.Discard, s.Stdin) // the hello and the turn, then nothing
		<-ctx.Done()
		return ctx.Err()
	})
	ctx := clusterCtx(t)
	spec := r.warmSpec(t)
	w, pod := r.prestart(t, ctx, spec)
	r.serveBroker(t, spec.RunDir)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const after = 500 * time.Millisecond
	time.AfterFunc(after, cancel)
	began := time.Now()
	res, err := w.Run(tctx, turnInput(t))
	if !errors.Is(err, container.ErrAborted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want ErrAborted wrapping the cancellation", err)
	}
	if late := time.Since(began) - after; late > 1500*time.Millisecond {
		t.Errorf("Run returned %v after its ctx ended", late)
	}
	if res.Removed.IsZero() && !res.CleanupPending {
		t.Errorf("the Pod neither removed nor pending: %+v", res)
	}
	r.replayRefused(t, ctx)
	r.e.Close()
	r.gone(t, ctx, pod, "")
	r.noTurnPods(t, ctx)
}
