package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/enginetest"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// TestRealEngineConformance (real-Pod tier): the engine conformance suite
// (enginetest.Run: OneShot/*, Warm/* and LongLived/*) on real Pods under
// runc, with the suite's stand-in worker. The engine states where a Pod's
// view of the seal differs from Docker's container (enginetest.View,
// docs/engines.md's guarantees table), and the suite checks it as stated:
// the Pod's interface beside loopback (its egress is the NetworkPolicy's,
// which TestRealWorkerReachesOnlyTheBroker proves from inside the Pod), no run directory for a sealed
// worker (its broker is reached through the network), a sealed workspace
// that is a memory volume of the Pod's, a /tmp without noexec, no
// open-files bound of the engine's, and the PID bound on the Pod's cgroup
// (the node's podPidsLimit) rather than the container's. A long-lived
// worker's directories are made on the claim its Pod mounts them from
// (Harness.Dirs); a kill from outside is runc's SIGKILL in the node's
// containerd. Each sealed subtest gets a fresh engine in the suite's one
// namespace, so the suite sees every Pod of the installation.
func TestRealEngineConformance(t *testing.T) {
	enginetest.Run(t, realHarness(t))
}

// TestRealEngineConformanceGVisor (real-Pod tier): the suite's seal probes
// (enginetest.RunSeal: sealed and long-lived, warm included) with every
// spec naming runsc, which the engine maps to the RuntimeClass gvisor,
// run by gVisor's shim and runsc in the node's containerd; and the
// worker's system calls answered by gVisor's kernel, not the host's.
func TestRealEngineConformanceGVisor(t *testing.T) {
	h := realHarness(t)
	h.Runtime = container.RuntimeRunsc
	enginetest.RunSeal(t, h)
	t.Run("OneShot/GuestKernel", func(t *testing.T) {
		r := realRig(t)
		spec := r.realSpec(t, realEchoImage)
		spec.Runtime = container.RuntimeRunsc
		res, err := r.e.Run(clusterCtx(t), spec, []byte(`{"mode":"probe"}`))
		if err != nil {
			t.Fatalf("Run = %v (stderr %q)", err, res.StderrTail)
		}
		var host syscall.Utsname
		if err := syscall.Uname(&host); err != nil {
			t.Fatal(err)
		}
		hostLine := "kernel=" + unix.ByteSliceToString(int8Bytes(host.Release[:]))
		if !strings.Contains(res.Reply.Text, "\nkernel=") || strings.Contains(res.Reply.Text+"\n", hostLine+"\n") {
			t.Errorf("probe = %q; want a kernel other than the host's (%s)", res.Reply.Text, hostLine)
		}
		if res.Settled != nil {
			<-res.Settled
		}
	})
}

func int8Bytes(s []int8) []byte {
	b := make([]byte, len(s))
	for i, c := range s {
		b[i] = byte(c)
	}
	return b
}

// realHarness is the suite's harness on the real-Pod cluster: sealed
// engines with the real attacher and a network listener of their own,
// the session engine on a claim bound at a host directory, and the
// engine's view of the seal where a Pod's differs from Docker's.
func realHarness(t *testing.T) enginetest.Harness {
	t.Helper()
	c := realCluster(t)
	o := clusterOptions(t, c)
	root, err := os.MkdirTemp("", "k8s-conformance")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	o.SessionClaim, o.SessionRoot = "channels", root
	c.BindClaimAt(t, o.Namespace, o.SessionClaim, root)
	tokens := broker.NewTokens()
	ln, err := broker.ListenNet("0.0.0.0:0", tokens, broker.NetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o.Broker = netip.AddrPortFrom(netip.MustParseAddr(k8stest.PodGateway), uint16(ln.Addr().(*net.TCPAddr).Port))
	att, err := NewAPIAttacher(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	pods := c.Clientset.CoreV1().Pods(o.Namespace)
	sessions, err := NewSessions(c.Clientset.CoreV1(), o)
	if err != nil {
		t.Fatal(err)
	}
	// podOf is the Pod of a container name: a sealed worker's Pod is named
	// as its spec, a channel's as SessionPodName says.
	podOf := func(ctx context.Context, name string) (*corev1.Pod, error) {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			pod, err = pods.Get(ctx, SessionPodName(name), metav1.GetOptions{})
		}
		return pod, err
	}
	return enginetest.Harness{
		LongLived: sessions,
		OneShot: func(t *testing.T) container.OneShot {
			e, err := NewSealed(c.Clientset.CoreV1(), att, tokens, "", o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		},
		Image:        realEchoImage,
		Installation: o.Installation,
		Overrun:      removeWait,
		ImageExists:  c.ImageExists,
		Containers: func(ctx context.Context) ([]string, error) {
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: container.InstallationLabel + "=" + o.Installation})
			if err != nil {
				return nil, err
			}
			var names []string
			for _, p := range list.Items {
				names = append(names, p.Name)
			}
			return names, nil
		},
		ID: func(ctx context.Context, name string) (string, error) {
			pod, err := podOf(ctx, name)
			if err != nil {
				return "", err
			}
			return string(pod.UID), nil
		},
		Dirs: func(t *testing.T) (string, string) { return claimDirs(t, root) },
		Kill: func(ctx context.Context, name string) error {
			pod, err := podOf(ctx, name)
			if err != nil {
				return err
			}
			cs := workerStatus(pod)
			if cs == nil || cs.State.Running == nil {
				return fmt.Errorf("pod %s: no running worker to kill", name)
			}
			return c.KillWorker(ctx, cs.ContainerID)
		},
		View: enginetest.View{Net: "eth0,lo", NoRunDir: true, NoHostWorkspace: true, TmpExec: true, NoFile: "-", PIDsMax: "max"},
	}
}

// claimDirs makes a fresh run directory and workspace below the claim's
// root, owned by the worker's user (1000:1000, the tier runs as root).
func claimDirs(t *testing.T, root string) (runDir, workspaceDir string) {
	t.Helper()
	base, err := os.MkdirTemp(root, "w")
	if err != nil {
		t.Fatal(err)
	}
	runDir, workspaceDir = filepath.Join(base, "run"), filepath.Join(base, "ws")
	for _, d := range []string{runDir, workspaceDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	return runDir, workspaceDir
}
