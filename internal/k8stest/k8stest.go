// Package k8stest runs a real Kubernetes control plane for the Kubernetes
// engine's cluster tier (docs/kubernetes.md, "Testing"): etcd and a
// kube-apiserver (with RBAC on, started by the package itself), a
// kube-scheduler, Kubernetes' garbage collector (the one controller of
// kube-controller-manager the tier needs, in a binary of its own),
// kwok managing one fake node, on which Pods are marked running at once and
// nothing runs, and the agent-sandbox controller with its CRDs.
//
// The binaries come from scripts/k8s-tools.sh, which builds them once per
// machine from the committed tools modules and prints their directory;
// RTSANDBOX_K8S_TOOLS_DIR names it. Without it a test skips, except under
// CI=true, where it fails: .ci/run builds the tools and sets the variable,
// and a cluster test that silently skipped there would prove nothing.
//
// One cluster serves a test binary: Require starts it on first use, and
// Main stops it after the tests, killing every process it started and
// removing its directory. Tests isolate themselves by namespace.
package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	rbacv1 "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/rest"

	"github.com/rtsandbox/rtsandbox/internal/kubeclient"
)

// ToolsEnv names the directory scripts/k8s-tools.sh printed.
const ToolsEnv = "RTSANDBOX_K8S_TOOLS_DIR"

// NodeName is the one fake node kwok manages; every Pod lands on it.
const NodeName = "kwok-node-0"

// FailLabel is the label that makes kwok fail a running Pod's containers
// (exit code 1), as a crash or an eviction would: the stage
// pod-container-running-failed of kwok's chaos set.
const FailLabel = "pod-container-running-failed.stage.kwok.x-k8s.io"

// Clients are serve's clients (kubeclient.Set) and the groups only the
// tests call: RBAC, to make the identities whose permissions doctor
// checks, and EndpointSlices, to route a Service to serve.
type Clients struct {
	*kubeclient.Set
	rbac      rbacv1.RbacV1Interface
	endpoints discoveryv1.DiscoveryV1Interface
}

// NewClients is the client of rc's cluster.
func NewClients(rc *rest.Config) (*Clients, error) {
	c, hc, err := kubeclient.Config(rc)
	if err != nil {
		return nil, err
	}
	set, err := kubeclient.NewWith(c, hc)
	if err != nil {
		return nil, err
	}
	cs := &Clients{Set: set}
	if cs.rbac, err = rbacv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if cs.endpoints, err = discoveryv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	return cs, nil
}

// RbacV1 is the RBAC group's client.
func (c *Clients) RbacV1() rbacv1.RbacV1Interface { return c.rbac }

// DiscoveryV1 is the discovery.k8s.io group's client: EndpointSlices.
func (c *Clients) DiscoveryV1() discoveryv1.DiscoveryV1Interface { return c.endpoints }

// Cluster is a running control plane.
type Cluster struct {
	// Config is an administrator's client configuration (system:masters).
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file holding Config.
	Kubeconfig string
	// Clientset is a client on Config.
	Clientset *Clients

	ca       *pki
	apiFlags map[string]string // over startControlPlane's defaults
	dir      string
	tools    string // the tools directory it runs from
	procs    []*process
	host     *hostState // the host before the real tier changed it; nil for kwok's
	hostLock *os.File   // the real tier's host lock (lockHost), held until stopReal restored the host
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedErr  error
)

// InCI reports whether tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Require returns the test binary's cluster, started on first use. Without
// the tools tb skips, or fails under CI; a cluster that failed to start
// fails tb.
func Require(tb testing.TB) *Cluster {
	tb.Helper()
	tools := os.Getenv(ToolsEnv)
	if tools == "" {
		if InCI() {
			tb.Fatalf("Kubernetes cluster test cannot run under CI=true without %s (.ci/run sets it from scripts/k8s-tools.sh)", ToolsEnv)
		}
		tb.Skipf("Kubernetes cluster test skipped: %s is unset (run scripts/k8s-tools.sh)", ToolsEnv)
	}
	sharedOnce.Do(func() { shared, sharedErr = Start(context.Background(), tools) })
	if sharedErr != nil {
		tb.Fatalf("start the test cluster: %v", sharedErr)
	}
	return shared
}

// StopAll stops the clusters this test binary started and removes the
// images it built for them, reporting each failure on stderr: for a
// TestMain that cannot use Main (one whose tests are not checked for
// leaked goroutines).
func StopAll() error {
	var errs []error
	for _, c := range []*Cluster{shared, real} {
		if c == nil {
			continue
		}
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "k8stest: stop the test cluster:", err)
			errs = append(errs, err)
		}
	}
	if err := removeBuilt(); err != nil {
		fmt.Fprintln(os.Stderr, "k8stest: remove test images:", err)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Main runs m, stops the cluster Require started, if any, and then fails
// the run when a goroutine outlived the tests (goleak, with LeakOptions).
// A package's TestMain is os.Exit(k8stest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if err := StopAll(); err != nil && code == 0 {
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	return code
}

// Start runs a control plane from the binaries under tools, with kwok's
// fake node, and returns once the node is ready. On error nothing is left
// running.
func Start(ctx context.Context, tools string) (c *Cluster, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err = newCluster(tools, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
			c = nil
		}
	}()
	bin := func(name string) string { return filepath.Join(tools, "bin", name) }
	if err := c.run("kwok", bin("kwok"), "--kubeconfig="+c.Kubeconfig, "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--config="+filepath.Join(tools, "kwok-stages.yaml"), "--server-address=127.0.0.1:0",
		"--node-lease-duration-seconds=40"); err != nil {
		return c, err
	}
	if err := c.run("agent-sandbox-controller", bin("agent-sandbox-controller"), "--extensions", "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0"); err != nil {
		return c, err
	}
	if err := c.addNode(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// newCluster starts etcd and the API server (configure may set more of its
// flags first), the scheduler and the garbage collector. On error it
// stops what it started.
func newCluster(tools string, configure func(*Cluster)) (c *Cluster, err error) {
	dir, err := os.MkdirTemp("", "rtsandbox-k8s-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir, tools: tools, apiFlags: map[string]string{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
			c = nil
		}
	}()
	if configure != nil {
		configure(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.startControlPlane(ctx, tools); err != nil {
		return c, fmt.Errorf("etcd and kube-apiserver: %w", err)
	}
	if err := c.writeKubeconfig(); err != nil {
		return c, err
	}
	if c.Clientset, err = NewClients(c.Config); err != nil {
		return c, err
	}
	kc := "--kubeconfig=" + c.Kubeconfig
	if err := c.run("kube-scheduler", filepath.Join(tools, "bin", "kube-scheduler"), kc, "--leader-elect=false", "--secure-port=0"); err != nil {
		return c, err
	}
	// Kubernetes' garbage collector alone (tools/k8scluster/cmd/garbage-collector):
	// the one controller of kube-controller-manager the tier needs.
	return c, c.run("garbage-collector", filepath.Join(tools, "bin", "garbage-collector"), kc)
}

// writeKubeconfig writes Config as an administrator's kubeconfig.
func (c *Cluster) writeKubeconfig() error {
	raw, err := kubeconfig(c.Config, "rtsandbox-admin")
	if err != nil {
		return err
	}
	c.Kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	return os.WriteFile(c.Kubeconfig, raw, 0o600)
}

// run starts one component, its output in a log file under the cluster's
// directory, in its own process group so that Stop kills what it forked.
func (c *Cluster) run(name, path string, args ...string) error {
	return c.runEnv(name, nil, path, args...)
}

// runEnv is run with env added to the process's environment (a later
// entry of a name wins).
func (c *Cluster) runEnv(name string, env []string, path string, args ...string) error {
	logPath := filepath.Join(c.dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+c.Kubeconfig), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		out.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return nil
}

// addNode registers the fake node kwok manages and waits until kwok
// reports it ready.
//
// Its capacity is far beyond any real node's because nothing runs on it
// and the objects of a test's namespace live as long as the cluster (the
// tier runs no namespace controller): the node must hold every Pod a test
// binary's tests leave, or a later test's Pods stay unscheduled and it
// fails for no fault of its own. One run of container/kubernetes' cluster
// tests leaves 17 Pods requesting 19 CPUs; at 32 CPUs, repeating one warm
// pool test (-count) ran out after ten runs.
func (c *Cluster) addNode(ctx context.Context) error {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4096"),
		corev1.ResourceMemory:           resource.MustParse("64Ti"),
		corev1.ResourcePods:             resource.MustParse("4096"),
		corev1.ResourceEphemeralStorage: resource.MustParse("64Ti"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: NodeName,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: NodeName}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := c.Clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node: %w", err)
	}
	return c.waitNode(ctx, NodeName, "kwok")
}

// waitNode waits until the node name is ready, then lifts its taints: the
// API server tainted it not-ready at its registration, and the node
// lifecycle controller that would lift the taint is not run (it would
// evict Pods whenever a heartbeat lags on a busy machine). logName is the
// component whose log a timeout shows.
func (c *Cluster) waitNode(ctx context.Context, name, logName string) error {
	nodes := c.Clientset.CoreV1().Nodes()
	for {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err == nil && nodeReady(n) {
			n.Spec.Taints = nil
			if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("untaint node: %w", err)
			}
			return nil
		}
		if err := c.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready: %w\n%s", name, ctx.Err(), c.LogTail(logName))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// exited reports a component that ended, with its log's end.
func (c *Cluster) exited() error {
	for _, p := range c.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.cmd.ProcessState, c.LogTail(p.name))
		default:
		}
	}
	return nil
}

// LogTail is the last 4 KiB of a component's log, for a failure message.
func (c *Cluster) LogTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(bytes.TrimSpace(b))
}

// Namespace creates a namespace named for tb and returns its name.
// Objects in it are removed with the cluster.
func (c *Cluster) Namespace(tb testing.TB) string {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	created, err := c.Clientset.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("create namespace: %v", err)
	}
	return created.Name
}

// Stop kills every component and removes the cluster's directory.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	c.procs = nil
	if c.host != nil {
		errs = append(errs, c.stopReal())
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// LeakOptions are goleak's exceptions for a package that used the
// cluster: client-go's and klog's process-wide goroutines, which live as
// long as the binary by design.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
		// The WebSocket attach's heartbeat outlives a stream its caller
		// closed (it stops on the peer's close message) until its next
		// ping fails: at most 5 s (remotecommand's pingPeriod).
		goleak.IgnoreTopFunction("k8s.io/client-go/tools/remotecommand.(*heartbeat).start"),
	}
}

// AddUser returns the path of a kubeconfig for a new user name in groups,
// with no permission but what a test binds to it (RBAC is on).
func (c *Cluster) AddUser(tb testing.TB, name string, groups ...string) string {
	tb.Helper()
	cfg, err := c.userConfig(name, groups...)
	if err != nil {
		tb.Fatalf("add user %s: %v", name, err)
	}
	raw, err := kubeconfig(cfg, name)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}
