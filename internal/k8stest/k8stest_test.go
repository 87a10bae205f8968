package k8stest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestRequireStartsACluster: the cluster answers, RBAC is on (a new user
// may not list Pods), its node is ready and untainted, and kwok runs a
// Pod on it.
func TestRequireStartsACluster(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := c.Clientset.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil || !nodeReady(n) || len(n.Spec.Taints) != 0 {
		t.Fatalf("node %+v, %v", n, err)
	}
	if c.AddUser(t, "nobody") == "" {
		t.Fatal("no kubeconfig")
	}
	if err := c.exited(); err != nil {
		t.Fatal(err)
	}
}

// TestGarbageCollectorDeletesDependents: the tier's garbage collector
// deletes an object whose owner was deleted (a Sandbox's Pod is such a
// dependent), seen through a watch.
func TestGarbageCollectorDeletesDependents(t *testing.T) {
	c := Require(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	maps := c.Clientset.CoreV1().ConfigMaps(ns)
	owner, err := maps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep, err := maps.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := maps.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=dependent", ResourceVersion: dep.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := maps.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			return
		}
	}
	t.Fatalf("the dependent outlived its owner: %v\ngarbage collector:\n%s", ctx.Err(), c.LogTail("garbage-collector"))
}
