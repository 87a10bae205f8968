package kubernetes

import (
	"net"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// TestRealWorkerReachesOnlyTheBroker is the network half of the seal as a
// worker meets it (real-Pod tier): from inside a worker Pod, under runc
// and under gVisor, the stand-in dials the broker, another port on the
// broker's own address (a listener of the test's) and the node's kubelet
// API (anonymous and always allowed here: a Pod that reached it could run
// commands in any Pod of the node).
//
//   - Without the workers' NetworkPolicy all three answer: the Pod network
//     alone seals nothing, and the checks below can fail.
//   - With the policy the engine makes (WorkerPolicy), enforced by the
//     tier's kube-router (a network policy controller of the iptables
//     kind), only the broker answers; the other two are refused. The
//     enforcer programs a Pod's rules once the Pod has its address, so
//     the stand-in first waits, at most 10 s, for the other port to stop
//     answering and reports after how long: that window is the enforcer's
//     (docs/kubernetes.md), and the test logs it.
func TestRealWorkerReachesOnlyTheBroker(t *testing.T) {
	for _, runtime := range []string{container.RuntimeRunc, container.RuntimeRunsc} {
		t.Run(runtime, func(t *testing.T) {
			r := realRig(t)
			ctx := clusterCtx(t)
			other, err := net.Listen("tcp", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			go func() {
				for {
					c, err := other.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			o := r.e.pods.o
			otherAddr := net.JoinHostPort(o.Broker.Addr().String(), strconv.Itoa(other.Addr().(*net.TCPAddr).Port))
			targets := []string{otherAddr, o.Broker.String(), k8stest.KubeletAddr}
			onRuntime := func(s *container.Spec) { s.Runtime = runtime }
			open, _ := r.dialFrom(t, ctx, onRuntime, "dial", targets...)
			want := map[string]string{otherAddr: "connected", o.Broker.String(): "connected", k8stest.KubeletAddr: "connected"}
			if diff := cmp.Diff(want, open); diff != "" {
				t.Fatalf("without the policy (-want +got):\n%s", diff)
			}

			pol, err := WorkerPolicy(o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.c.Clientset.NetworkingV1().NetworkPolicies(o.Namespace).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			sealed, settled := r.dialFrom(t, ctx, onRuntime, "dial-settled", targets...)
			want = map[string]string{otherAddr: "refused", o.Broker.String(): "connected", k8stest.KubeletAddr: "refused"}
			if diff := cmp.Diff(want, sealed); diff != "" {
				t.Errorf("under the enforced policy (-want +got):\n%s", diff)
			}
			t.Logf("%s: the policy held %s ms after the worker first dialled", runtime, settled)
			r.noTurnPods(t, ctx)
		})
	}
}
