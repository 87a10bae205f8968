package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The real-Pod tier (docs/kubernetes.md, "Testing"): the same control
// plane with a kubelet and a private containerd instead of kwok, so Pods
// run: runc's, and the attach stream reaches a real worker. It is opt-in
// (RealEnv=1, as root, with Docker to build and export images), and it
// changes the host, which Stop restores and checks (hoststate.go).
const RealEnv = "RTSANDBOX_K8S_REAL"

// RealNode is the real tier's node, and its address: TEST-NET-1, since a
// kubelet refuses a loopback node address.
const (
	RealNode   = "real-node-0"
	realNodeIP = "192.0.2.2"
	pauseImage = "docker.io/rtsk8s/pause:local"
)

var (
	realOnce sync.Once
	real     *Cluster
	realErr  error
)

// RequireReal returns the test binary's real-Pod cluster, started on first
// use with images (local Docker images) imported into its containerd. It
// skips tb unless RealEnv is 1: the tier is opt-in, CI included.
func RequireReal(tb testing.TB, images ...string) *Cluster {
	tb.Helper()
	if os.Getenv(RealEnv) != "1" {
		tb.Skipf("real-Pod tier skipped: set %s=1 (root, Docker, scripts/k8s-tools.sh real)", RealEnv)
	}
	tools := os.Getenv(ToolsEnv)
	if tools == "" {
		tb.Fatalf("%s=1 needs %s (scripts/k8s-tools.sh real)", RealEnv, ToolsEnv)
	}
	realOnce.Do(func() { real, realErr = StartReal(context.Background(), tools, images) })
	if realErr != nil {
		tb.Fatalf("start the real-Pod cluster: %v", realErr)
	}
	return real
}

// StartReal runs the control plane with a kubelet and a private
// containerd, imports images, and returns once the node is ready. On
// error nothing is left running and the host is restored.
func StartReal(ctx context.Context, tools string, images []string) (c *Cluster, err error) {
	if _, err := os.Stat(filepath.Join(tools, ".done-real")); err != nil {
		return nil, fmt.Errorf("no real-tier tools in %s: run scripts/k8s-tools.sh real", tools)
	}
	lock, err := lockHost()
	if err != nil {
		return nil, err
	}
	if err := recoverHost(hostRecord); err != nil {
		return nil, errors.Join(err, unlockHost(lock))
	}
	before, err := recordHost(tools)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("record the host: %w", err), unlockHost(lock))
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err = newCluster(tools, func(c *Cluster) {
		c.apiFlags["kubelet-preferred-address-types"] = "InternalIP"
	})
	if err != nil { // newCluster stopped what it started
		return nil, errors.Join(err, unlockHost(lock))
	}
	c.host, c.hostLock = &before, lock
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
			c = nil
		}
	}()
	// Kept until Stop restored the host: a binary killed before that
	// leaves it for the next cluster to restore from.
	if err := saveHost(hostRecord, savedHost{Before: before, Dir: c.dir, Tools: tools}); err != nil {
		return c, fmt.Errorf("save the host's record: %w", err)
	}
	// The node's address, on the loopback link: not a loopback address,
	// so the kubelet takes it, and no link to add (this kernel may lack
	// the dummy type). Stop deletes it with the host's other changes.
	if err := run("ip", "addr", "add", realNodeIP+"/32", "dev", "lo"); err != nil {
		return c, err
	}
	if err := c.startContainerd(ctx, tools); err != nil {
		return c, err
	}
	if err := c.importImages(ctx, tools, images); err != nil {
		return c, err
	}
	if err := c.startKubelet(tools); err != nil {
		return c, err
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: GVisorClass}, Handler: "runsc"}
	if _, err := c.Clientset.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return c, fmt.Errorf("RuntimeClass %s: %w", GVisorClass, err)
	}
	if err := c.run("agent-sandbox-controller", filepath.Join(tools, "bin", "agent-sandbox-controller"),
		"--extensions", "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0"); err != nil {
		return c, err
	}
	if err := c.waitNode(ctx, RealNode, "kubelet"); err != nil {
		return c, err
	}
	return c, c.startNetworkServices(ctx, tools)
}

// startNetworkServices runs, on the node, the two network services a
// cluster's Pods meet beside their network plugin, and returns once each
// has put its chains in place (Stop removes them with the rest of their
// changes):
//
//   - kube-router's network policy controller alone (no routing, no
//     service proxy, no CNI of its own): it puts every Pod selected by a
//     NetworkPolicy behind a chain of the filter table that admits only
//     what the policies allow and rejects the rest, so the tier's Pods
//     meet their policies as on a cluster whose network plugin enforces
//     them;
//   - kube-proxy in iptables mode: a Service's ClusterIP is translated to
//     its endpoints' addresses before any policy is consulted, as on most
//     clusters, with the flags that leave the host's conntrack sysctls
//     and localhost as they are.
func (c *Cluster) startNetworkServices(ctx context.Context, tools string) error {
	env := []string{"PATH=" + filepath.Join(tools, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
		libEnv(tools)}
	if err := c.runEnv("kube-router", env, filepath.Join(tools, "bin", "kube-router"),
		"--kubeconfig="+c.Kubeconfig, "--hostname-override="+RealNode,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
		"--enable-ipv6=false", "--health-port=0", "--metrics-port=0",
		"--service-cluster-ip-range="+serviceRange); err != nil {
		return err
	}
	if err := c.run("kube-proxy", filepath.Join(tools, "bin", "kube-proxy"),
		"--kubeconfig="+c.Kubeconfig, "--hostname-override="+RealNode, "--proxy-mode=iptables",
		"--cluster-cidr="+podSubnet, "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0", "--iptables-localhost-nodeports=false",
		"--healthz-bind-address=", "--metrics-bind-address="); err != nil {
		return err
	}
	for _, want := range []struct{ name, table, rule string }{
		{"kube-router", "iptables filter", "-j KUBE-ROUTER-INPUT"},
		{"kube-proxy", "iptables nat", "-j KUBE-SERVICES"},
	} {
		if err := c.waitRule(ctx, want.name, want.table, want.rule); err != nil {
			return err
		}
	}
	return nil
}

// waitRule waits until a rule of table ends with suffix, or name exits.
func (c *Cluster) waitRule(ctx context.Context, name, table, suffix string) error {
	for {
		rules, err := tableRules(table)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(rules, func(r string) bool { return strings.HasSuffix(r, suffix) }) {
			return nil
		}
		if err := c.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s set no rule %q: %w\n%s", name, suffix, ctx.Err(), c.LogTail(name))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// containerdConfig is the private containerd's: its own socket, root and
// state under the cluster's directory, runc under its own root, the CNI
// bridge of the Pod network, and restrict_oom_score_adj (root here lacks
// CAP_SYS_RESOURCE).
const containerdConfig = `version = 2
root = "@DIR@/ctrd/root"
state = "@DIR@/ctrd/state"
[grpc]
  address = "@DIR@/ctrd/containerd.sock"
[ttrpc]
  address = "@DIR@/ctrd/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "@DIR@/ctrd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "` + pauseImage + `"
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "@TOOLS@/cni"
      conf_dir = "@DIR@/ctrd/cni-conf"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      snapshotter = "overlayfs"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "@DIR@/ctrd/runc-root"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "@DIR@/ctrd/runsc.toml"
`

// runscConfig is gVisor's shim's: the tools' runsc under a root of the
// cluster's, its logs beside the cluster's. The handler "runsc" is what
// the RuntimeClass GVisorClass names.
const runscConfig = `binary_name = "@TOOLS@/bin/runsc"
root = "@DIR@/ctrd/runsc-root"
[runsc_config]
  debug-log = "@DIR@/runsc-logs/"
`

// GVisorClass is the real tier's RuntimeClass for gVisor (handler runsc),
// the name container/kubernetes maps the runsc runtime to by default.
const GVisorClass = "gvisor"

// cniConfig is the Pod network: a bridge whose address is the Pods'
// gateway (PodGateway) and their default route, as a cluster's Pod
// network gives them one, so that what a Pod reaches beyond its subnet
// (the node's other addresses) is the NetworkPolicy's to refuse; no
// masquerading, since nothing here leaves the host.
const cniConfig = `{"cniVersion": "1.0.0", "name": "rtsk8s", "plugins": [
  {"type": "bridge", "bridge": "rtsk8s0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + podSubnet + `"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "@DIR@/ctrd/ipam"}},
  {"type": "loopback"}]}
`

func (c *Cluster) fill(s, tools string) string {
	return strings.NewReplacer("@DIR@", c.dir, "@TOOLS@", tools).Replace(s)
}

func (c *Cluster) socket() string { return filepath.Join(c.dir, "ctrd", "containerd.sock") }

func (c *Cluster) startContainerd(ctx context.Context, tools string) error {
	conf := filepath.Join(c.dir, "ctrd", "cni-conf")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(conf, "10-rtsk8s.conflist"), []byte(c.fill(cniConfig, tools)), 0o644); err != nil {
		return err
	}
	cfg := filepath.Join(c.dir, "ctrd", "config.toml")
	if err := os.WriteFile(cfg, []byte(c.fill(containerdConfig, tools)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "ctrd", "runsc.toml"), []byte(c.fill(runscConfig, tools)), 0o644); err != nil {
		return err
	}
	// containerd finds a runtime's shim (containerd-shim-runsc-v1) on its
	// PATH: the tools' bin first.
	path := "PATH=" + filepath.Join(tools, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	if err := c.runEnv("containerd", []string{path}, "containerd", "--config", cfg); err != nil {
		return err
	}
	for {
		if _, err := os.Stat(c.socket()); err == nil {
			return nil
		}
		if err := c.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not listen: %w\n%s", ctx.Err(), c.LogTail("containerd"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// importImages builds the pause image from the tools' static pause and
// copies it and images from the local Docker into containerd's k8s.io
// namespace, where the kubelet finds them (it never pulls here); the
// pause image then leaves Docker.
func (c *Cluster) importImages(ctx context.Context, tools string, images []string) error {
	dir := filepath.Join(c.dir, "pause-image")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pause, err := os.ReadFile(filepath.Join(tools, "bin", "pause"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pause"), pause, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY pause /pause\nENTRYPOINT [\"/pause\"]\n"), 0o644); err != nil {
		return err
	}
	if err := run("docker", "build", "-q", "-t", pauseImage, dir); err != nil {
		return err
	}
	for _, img := range append([]string{pauseImage}, images...) {
		save := exec.CommandContext(ctx, "docker", "save", img)
		imp := exec.CommandContext(ctx, "ctr", "--address", c.socket(), "-n", "k8s.io", "images", "import", "-")
		pipe, err := save.StdoutPipe()
		if err != nil {
			return err
		}
		imp.Stdin = pipe
		var out bytes.Buffer
		imp.Stdout, imp.Stderr = &out, &out
		if err := save.Start(); err != nil {
			return err
		}
		if err := imp.Run(); err != nil {
			save.Wait()
			return fmt.Errorf("import %s: %v: %s", img, err, out.Bytes())
		}
		if err := save.Wait(); err != nil {
			return fmt.Errorf("docker save %s: %w", img, err)
		}
	}
	// The pause image was only the way into containerd: Docker keeps none.
	return run("docker", "rmi", "-f", pauseImage)
}

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
address: ` + realNodeIP + `
port: 20250
healthzBindAddress: 127.0.0.1
healthzPort: 0
readOnlyPort: 0
failSwapOn: false
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://@DIR@/ctrd/containerd.sock
podLogsDir: @DIR@/pod-logs
registerNode: true
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
makeIPTablesUtilChains: false
localStorageCapacityIsolation: true
podPidsLimit: 128
`

func (c *Cluster) startKubelet(tools string) error {
	cfg := filepath.Join(c.dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(c.fill(kubeletConfig, tools)), 0o644); err != nil {
		return err
	}
	return c.run("kubelet", filepath.Join(tools, "bin", "kubelet"), "--config="+cfg, "--kubeconfig="+c.Kubeconfig,
		"--hostname-override="+RealNode, "--node-ip="+realNodeIP, "--root-dir="+filepath.Join(c.dir, "kubelet"))
}

// stopReal ends what the real tier runs beside the control plane (the
// shims, gVisor's sandboxes, the Pods' processes) and undoes and checks
// the host's changes, by the path a killed cluster's recovery takes
// (restoreFrom); then the host's record goes.
func (c *Cluster) stopReal() error {
	var errs []error
	if err := restoreFrom(*c.host, c.dir, c.tools); err != nil {
		errs = append(errs, err) // the record stays: the next cluster restores from it
	} else if err := os.Remove(hostRecord); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, unlockHost(c.hostLock)) // the next real-tier cluster may start
	return errors.Join(errs...)
}

// ImageExists reports whether ref (a local image's name as Docker tags
// it) is in the real tier's containerd, where the kubelet looks for it:
// the engine conformance suite's look at the node's image store.
func (c *Cluster) ImageExists(ctx context.Context, ref string) (bool, error) {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.socket(), "-n", "k8s.io", "images", "ls", "-q").Output()
	if err != nil {
		return false, fmt.Errorf("ctr images ls: %w", err)
	}
	for _, name := range strings.Fields(string(out)) {
		if name == ref || name == "docker.io/library/"+ref {
			return true, nil
		}
	}
	return false, nil
}

// KillWorker kills, with SIGKILL from outside, the container of the real
// tier's containerd whose ID a Pod's status names ("containerd://ID"),
// as the kernel's OOM killer would.
func (c *Cluster) KillWorker(ctx context.Context, containerID string) error {
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok || id == "" {
		return fmt.Errorf("not a containerd container ID: %q", containerID)
	}
	root := filepath.Join(c.dir, "ctrd", "runc-root", "k8s.io")
	if out, err := exec.CommandContext(ctx, "runc", "--root", root, "kill", id, "KILL").CombinedOutput(); err != nil {
		return fmt.Errorf("runc kill %s: %v: %s", id, err, bytes.TrimSpace(out))
	}
	return nil
}

// hostLock is the file whose lock a real-tier cluster holds from before
// it records the host until it restored it: the tier's node address,
// bridge, subnet and kubelet are the host's, one at a time, so a second
// test binary asking for the tier (go test runs packages side by side)
// waits for the first's cluster to stop. The holder removes the file as
// it lets go (unlockHost), so the tier leaves nothing on the host.
const hostLock = "/run/lock/rtsandbox-k8s-real.lock"

// lockHost waits for the real tier's host lock. A lock taken on a file
// its holder removed meanwhile is no lock (the next opener makes a new
// file), so the file locked must still be the one at the path.
func lockHost() (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(hostLock), 0o755); err != nil {
		return nil, fmt.Errorf("the real tier's host lock: %w", err)
	}
	for {
		f, err := os.OpenFile(hostLock, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("the real tier's host lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("the real tier's host lock: %w", err)
		}
		held, herr := f.Stat()
		now, nerr := os.Stat(hostLock)
		if herr == nil && nerr == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close() // its holder removed it: take the new one
	}
}

// unlockHost removes the lock's file and lets go of it.
func unlockHost(f *os.File) error {
	err := os.Remove(hostLock)
	return errors.Join(err, f.Close())
}

// PodGateway is the host's address on the real tier's Pod network (the
// bridge's, in podSubnet): where a Pod reaches a listener of the test on
// 0.0.0.0.
const (
	PodGateway = "10.244.1.1"
	podSubnet  = "10.244.1.0/24"
)

// KubeletAddr is where the real tier's kubelet serves its API (anonymous
// and always allowed, as many a test cluster's): a target on the node
// that a Pod reaches unless its NetworkPolicy is enforced.
const KubeletAddr = realNodeIP + ":20250"

// BuildImage builds pkg (a main package of this module) static into a
// FROM-scratch image tagged tag in the local Docker, its entrypoint the
// binary, for RequireReal to import; Main removes it after the tests.
func BuildImage(tb testing.TB, tag, pkg string) {
	tb.Helper()
	dir := tb.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "worker"), pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	df := "FROM scratch\nCOPY worker /rtsandbox-worker\nUSER 1000:1000\nENTRYPOINT [\"/rtsandbox-worker\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := run("docker", "build", "-q", "-t", tag, dir); err != nil {
		tb.Fatal(err)
	}
	builtMu.Lock()
	built = append(built, tag)
	builtMu.Unlock()
}

var (
	builtMu sync.Mutex
	built   []string // images BuildImage made, removed by Main
)

// removeBuilt removes the images BuildImage made.
func removeBuilt() error {
	builtMu.Lock()
	defer builtMu.Unlock()
	var errs []error
	for _, tag := range built {
		errs = append(errs, run("docker", "rmi", "-f", tag))
	}
	built = nil
	return errors.Join(errs...)
}

// RealEnvSet reports whether the real-Pod tier is asked for.
func RealEnvSet() bool { return os.Getenv(RealEnv) == "1" }
