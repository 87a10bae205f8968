package kubernetes

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/rtsandbox/rtsandbox/container"
)

// TestRealBrokerBehindAService is deploy/kubernetes' network path under
// enforcement (real-Pod tier): serve in the cluster, its broker behind
// service.yaml's Service, serve's own policy (networkpolicy.yaml) and the
// workers' (WorkerPolicy) enforced by the tier's kube-router, the
// Service's address translated by the tier's kube-proxy before any
// policy sees it. A stand-in serve Pod (deployment.yaml's labels and
// ports, the stand-in listening on both) plays serve; the tier runs no
// endpoint controller, so the test writes the Service's EndpointSlice as
// it would. From a turn's worker and a session channel's:
//
//   - the broker through the Service's address answers, and so does the
//     stand-in's broker port itself; its chat API port is refused: the
//     workers' policy admits serve's broker port only;
//   - the regression the second peer fixes: with the workers' policy as it
//     was (the broker's address alone), the broker through the Service is
//     refused, because what the policy sees is serve's Pod.
func TestRealBrokerBehindAService(t *testing.T) {
	r := realRig(t)
	ctx := clusterCtx(t)
	ns := r.e.pods.o.Namespace
	cs := r.c.Clientset

	var dep appsv1.Deployment
	var svc corev1.Service
	var servePolicy networkingv1.NetworkPolicy
	decodeDeploy(t, "deployment.yaml", &dep)
	decodeDeploy(t, "service.yaml", &svc)
	decodeDeploy(t, "networkpolicy.yaml", &servePolicy)
	brokerPort, httpPort := containerPort(t, dep, "broker"), containerPort(t, dep, "http")

	serve := r.serveStandIn(t, ctx, dep.Spec.Template.Labels, brokerPort, httpPort)
	svc.Namespace, svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ns, "", nil // the cluster picks a free address
	created, err := cs.CoreV1().Services(ns).Create(ctx, &svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeEndpoints(t, ctx, cs.DiscoveryV1().EndpointSlices(ns), created, serve, brokerPort)
	servePolicy.Namespace = ns
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, &servePolicy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	o := r.e.pods.o
	o.Broker = netip.AddrPortFrom(netip.MustParseAddr(created.Spec.ClusterIP), uint16(svc.Spec.Ports[0].Port))
	o.ListenPort = uint16(brokerPort)
	workers, err := WorkerPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	pols := cs.NetworkingV1().NetworkPolicies(ns)
	if _, err := pols.Create(ctx, workers, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	viaService := o.Broker.String()
	direct := net.JoinHostPort(serve.Status.PodIP, strconv.Itoa(brokerPort))
	chat := net.JoinHostPort(serve.Status.PodIP, strconv.Itoa(httpPort))
	for _, role := range []string{container.RoleTurn, container.RoleSession} {
		got, _ := r.dialFrom(t, ctx, asRole(role), "dial-settled", chat, viaService, direct)
		want := map[string]string{chat: "refused", viaService: "connected", direct: "connected"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("from a %s worker (-want +got):\n%s", role, diff)
		}
	}

	workers.Spec.Egress = workers.Spec.Egress[:1] // the broker's address alone
	if _, err := pols.Update(ctx, workers, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := r.dialFrom(t, ctx, asRole(container.RoleTurn), "dial-settled", viaService)
	if got[viaService] != "refused" {
		t.Errorf("with the broker's address alone, the broker through the Service = %q; want refused (the policy sees serve's Pod)", got[viaService])
	}
}

// decodeDeploy reads one object of deploy/kubernetes into obj.
func decodeDeploy(t *testing.T, name string, obj any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("deploy/kubernetes/%s: %v", name, err)
	}
}

// containerPort is the port named name of the Deployment's serve container.
func containerPort(t *testing.T, dep appsv1.Deployment, name string) int {
	t.Helper()
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("deployment.yaml names no port %q", name)
	return 0
}

// serveStandIn runs a Pod with serve's labels and ports whose stand-in
// accepts on both, and returns it once it runs with an address.
func (r *sealedRig) serveStandIn(t *testing.T, ctx context.Context, labels map[string]string, ports ...int) *corev1.Pod {
	t.Helper()
	spec := r.realSpec(t, realEchoImage)
	pod, err := SealedPod(spec, r.e.pods.o)
	if err != nil {
		t.Fatal(err)
	}
	pod.Name, pod.Labels = "serve-stand-in", labels
	c := &pod.Spec.Containers[0]
	c.Args, c.Stdin, c.StdinOnce, c.Ports = []string{"listen"}, false, false, nil
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	c.Resources = corev1.ResourceRequirements{Requests: small, Limits: small} // room beside the workers on the node
	for _, p := range ports {
		c.Args = append(c.Args, strconv.Itoa(p))
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(p), Protocol: corev1.ProtocolTCP})
	}
	pods := r.c.Clientset.CoreV1().Pods(pod.Namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	for {
		got, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "" {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the serve stand-in did not run: %+v", got.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// endpointSlices is what writeEndpoints needs of the discovery client.
type endpointSlices interface {
	Create(ctx context.Context, s *discoveryv1.EndpointSlice, opts metav1.CreateOptions) (*discoveryv1.EndpointSlice, error)
}

// writeEndpoints writes the EndpointSlice the endpoint-slice controller
// would for svc with the one ready endpoint pod.
func writeEndpoints(t *testing.T, ctx context.Context, api endpointSlices, svc *corev1.Service, pod *corev1.Pod, port int) {
	t.Helper()
	name, proto, p := svc.Spec.Ports[0].Name, corev1.ProtocolTCP, int32(port)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{pod.Status.PodIP}, NodeName: &pod.Spec.NodeName,
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &p}},
	}
	if _, err := api.Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// dialFrom runs the stand-in worker under the rig's spec as edit leaves
// it, in mode "dial" or "dial-settled", and returns what its dials met by
// address; with "dial-settled", after how long (ms) the first address was
// no longer reached (the enforcer's rules for a new Pod arrive after it
// has its address), and the test fails if it always was.
func (r *sealedRig) dialFrom(t *testing.T, ctx context.Context, edit func(*container.Spec), mode string, addrs ...string) (got map[string]string, settled string) {
	t.Helper()
	spec := r.realSpec(t, realEchoImage)
	edit(&spec)
	in, _ := json.Marshal(map[string]string{"mode": mode, "text": strings.Join(addrs, " ")})
	res, err := r.e.Run(ctx, spec, in)
	if err != nil {
		t.Fatalf("Run %s: %v (stderr %q)", mode, err, res.StderrTail)
	}
	got = map[string]string{}
	for _, line := range strings.Split(res.Reply.Text, "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	settled = got["settled"]
	delete(got, "settled")
	if mode == "dial-settled" && settled == "never" {
		t.Errorf("%s was still reached after 10 s", addrs[0])
	}
	return got, settled
}

// asRole labels a worker's spec as role's.
func asRole(role string) func(*container.Spec) {
	return func(s *container.Spec) { s.Labels[container.RoleLabel] = role }
}
