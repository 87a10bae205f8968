package host

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"

	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/kubernetes"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
	"github.com/rtsandbox/rtsandbox/wire"
)

// TestKubernetesEngineSetsUpTheCluster: engine: kubernetes, wired as serve
// wires it, puts the workers' NetworkPolicy (egress to the configured
// broker address only) and the sealed warm pool (template and pool, with
// the installation's labels) in place, and its broker listener refuses a
// request without a token with the one 401.
func TestKubernetesEngineSetsUpTheCluster(t *testing.T) {
	c := k8stest.Require(t)
	ns := c.Namespace(t)
	cfg := &config.Config{StateDir: t.TempDir(), Engine: config.EngineKubernetes,
		Sandbox: config.Sandbox{Image: "rtsandbox-worker:local",
			Limits: config.Limits{MemoryMB: 512, CPUs: 1, PIDs: 64, WorkspaceMB: 64}},
		Kubernetes: &config.Kubernetes{Kubeconfig: c.Kubeconfig, Namespace: ns,
			BrokerListen: "127.0.0.1:0", BrokerAddress: netip.MustParseAddrPort("10.96.0.10:7443"), SealedPool: 2}}
	spec, err := poolSpec(cfg, 1000, 1000, container.Limits{MemoryMB: 512, CPUs: 1, PIDs: 64, WorkspaceMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, closeEngine, err := KubernetesEngine(ctx, cfg, spec, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEngine()
	pol, err := c.Clientset.NetworkingV1().NetworkPolicies(ns).Get(ctx, kubernetes.PolicyName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("network policy: %v", err)
	}
	if got := pol.Spec.Egress[0].To[0].IPBlock.CIDR; got != "10.96.0.10/32" {
		t.Errorf("egress to %s", got)
	}
	ext, err := extclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := ext.ExtensionsV1beta1().SandboxWarmPools(ns).Get(ctx, SealedPoolName, metav1.GetOptions{})
	if err != nil || *pool.Spec.Replicas != 2 || pool.Labels[container.InstallationLabel] != InstallationID(cfg) {
		t.Fatalf("warm pool %+v, %v", pool, err)
	}
	if _, err := ext.ExtensionsV1beta1().SandboxTemplates(ns).Get(ctx, SealedPoolName, metav1.GetOptions{}); err != nil {
		t.Fatalf("template: %v", err)
	}
	// A second start finds both in place and updates them.
	_, close2, err := KubernetesEngine(ctx, cfg, spec, true, nil)
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	close2()
}

// TestKubernetesBrokerListenerRefusesWithoutToken: the listener serve
// opens for workers answers a request without a token with the fixed 401.
func TestKubernetesBrokerListenerRefusesWithoutToken(t *testing.T) {
	c := k8stest.Require(t)
	ln, err := netListen(t)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{StateDir: t.TempDir(), Engine: config.EngineKubernetes,
		Kubernetes: &config.Kubernetes{Kubeconfig: c.Kubeconfig, Namespace: c.Namespace(t),
			BrokerListen: ln, BrokerAddress: netip.MustParseAddrPort(ln)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, closeEngine, err := KubernetesEngine(ctx, cfg, container.Spec{}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEngine()
	cl := brokerclient.Client{Network: &brokerclient.Network{Addr: ln, Token: "not-a-token"}}
	var se *brokerclient.StatusError
	if _, err := cl.Post(ctx, wire.RouteModel, []byte(`{}`)); !errors.As(err, &se) || se.Status != http.StatusUnauthorized {
		t.Errorf("a request without a live token = %v; want 401", err)
	}
}

// netListen is a free loopback address for a listener the test does not
// open itself.
func netListen(t *testing.T) (string, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// TestKubeOptionsListenPort: the workers' policy admits serve's Pods on
// the port the broker listens on, which a Service's targetPort forwards
// to, not the port of the address workers dial.
func TestKubeOptionsListenPort(t *testing.T) {
	cfg := &config.Config{StateDir: t.TempDir(), Engine: config.EngineKubernetes,
		Kubernetes: &config.Kubernetes{Namespace: "rtsandbox",
			BrokerListen: "0.0.0.0:9443", BrokerAddress: netip.MustParseAddrPort("10.96.0.10:7443")}}
	pol, err := kubernetes.WorkerPolicy(kubeOptions(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Spec.Egress) != 2 || pol.Spec.Egress[0].Ports[0].Port.IntValue() != 7443 || pol.Spec.Egress[1].Ports[0].Port.IntValue() != 9443 {
		t.Errorf("egress = %+v; want the address's port 7443, then serve's Pods on the listener's 9443", pol.Spec.Egress)
	}
}
