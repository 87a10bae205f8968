package kubernetes

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// markNodeLost does to pod what the node controller does to the Pods of a
// node whose kubelet went silent: their Ready condition becomes False,
// ContainersReady stays as the kubelet last set it.
func markNodeLost(t *testing.T, ctx context.Context, c *k8stest.Cluster, pod *corev1.Pod) {
	t.Helper()
	pods := c.Clientset.CoreV1().Pods(pod.Namespace)
	now, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if podCondition(now, corev1.PodReady) != corev1.ConditionTrue || podCondition(now, corev1.ContainersReady) != corev1.ConditionTrue {
		t.Fatalf("pod %s is not ready before its node is lost: %+v", pod.Name, now.Status.Conditions)
	}
	for i := range now.Status.Conditions {
		if now.Status.Conditions[i].Type == corev1.PodReady {
			now.Status.Conditions[i].Status = corev1.ConditionFalse
			now.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if _, err := pods.UpdateStatus(ctx, now, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("mark pod %s not ready: %v", pod.Name, err)
	}
}

// TestClusterNodeLost: when the node controller marks a lost node's Pods
// not ready, a sealed turn's wait for its worker's exit ends at once with
// ErrWorkerFailed, and a channel's watch sends ErrSessionDown at once:
// neither waits for the turn's deadline or the eviction minutes later.
// (The cluster tier runs no node controller: the test marks the Pod as it
// would.)
func TestClusterNodeLost(t *testing.T) {
	t.Run("sealed", func(t *testing.T) {
		c, p := clusterPods(t)
		ctx := clusterCtx(t)
		pod := startSealed(t, ctx, p, testSpec(t))
		t.Cleanup(func() { _ = p.Delete(context.Background(), pod.Name, pod.UID) })
		exited := make(chan error, 1)
		go func() {
			_, err := p.Exit(ctx, pod.Name, pod.UID)
			exited <- err
		}()
		markNodeLost(t, ctx, c, pod)
		select {
		case err := <-exited:
			if !errors.Is(err, container.ErrWorkerFailed) {
				t.Errorf("Exit = %v; want ErrWorkerFailed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the lost node was not heard")
		}
	})
	t.Run("session", func(t *testing.T) {
		r := newSessionRig(t)
		ctx := clusterCtx(t)
		spec := r.spec("http:lost", "lost")
		r.ensure(t, ctx, spec)
		down, err := r.e.Watch(ctx, spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		markNodeLost(t, ctx, r.c, r.pod(t, ctx, spec.Name))
		expectDown(t, down, "the lost node")
	})
}
