package k8stest

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
