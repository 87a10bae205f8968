package k8stest

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/wire"
)

// BindClaim creates the PersistentVolumeClaim name in ns bound to a
// ReadWriteMany volume of its own, as the volume controller (which the
// tier does not run) would bind it: the scheduler places no Pod whose
// claim is missing or unbound. The volume goes when the test ends.
func (c *Cluster) BindClaim(tb testing.TB, ns, name string) {
	tb.Helper()
	c.BindClaimAt(tb, ns, name, "/srv/"+ns)
}

// BindClaimAt is BindClaim with the volume at path on the node: a real
// kubelet (the real-Pod tier, one node on this host) mounts it.
func (c *Cluster) BindClaimAt(tb testing.TB, ns, name, path string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	rwx := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: rwx, VolumeName: ns + "-" + name,
			StorageClassName: new(""), Resources: corev1.VolumeResourceRequirements{Requests: size},
		},
	}
	claims := c.Clientset.CoreV1().PersistentVolumeClaims(ns)
	pvc, err := claims.Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	// The kubelet mounts the volume only when it names the claim by UID.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity: size, AccessModes: rwx,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: pvc.UID},
		},
	}
	pvs := c.Clientset.CoreV1().PersistentVolumes()
	if pv, err = pvs.Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = pvs.Delete(context.Background(), pv.Name, metav1.DeleteOptions{}) })
	pv.Status.Phase = corev1.VolumeBound
	if _, err := pvs.UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		tb.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if _, err := claims.UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// SessionMounts is what a channel's Pod mounts from its claim, as host
// paths below the claim's root: its run directory (the broker hello) and
// its workspace.
type SessionMounts struct{ RunDir, Workspace string }

// SessionPods plays the node for the session Pods of a namespace: kwok
// marks them running but runs nothing, so for each running session Pod
// it calls run (in a goroutine of its own) with what the Pod mounts from
// the claim whose root is at root on this host, by the Pod's own
// subPaths, as a kubelet would bind them; run's ctx ends when that Pod
// (by UID) is deleted, stops running or the test ends. Started counts the
// calls.
type SessionPods struct {
	tb   testing.TB
	root string
	run  func(ctx context.Context, m SessionMounts)

	mu      sync.Mutex
	workers map[types.UID]context.CancelFunc
	started int
	wg      sync.WaitGroup
}

// PlaySessionPods starts a SessionPods on ns until the test ends.
func (c *Cluster) PlaySessionPods(tb testing.TB, ns, root string, run func(ctx context.Context, m SessionMounts)) *SessionPods {
	tb.Helper()
	p := &SessionPods{tb: tb, root: root, run: run, workers: map[types.UID]context.CancelFunc{}}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: container.RoleLabel + "=" + container.RoleSession})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok {
				p.follow(pod, ev.Type != watch.Deleted && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning)
			}
		}
	}()
	tb.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
		p.mu.Lock()
		for _, stop := range p.workers {
			stop()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// follow starts the Pod's run when it runs and has none, and ends it when
// the Pod no longer runs.
func (p *SessionPods) follow(pod *corev1.Pod, running bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stop, has := p.workers[pod.UID]
	switch {
	case running && !has:
		m, ok := p.mounts(pod)
		if !ok {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		p.workers[pod.UID] = cancel
		p.started++
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.run(ctx, m) }()
	case !running && has:
		stop()
		delete(p.workers, pod.UID)
	}
}

// mounts are the host paths of what the Pod mounts from the claim.
func (p *SessionPods) mounts(pod *corev1.Pod) (SessionMounts, bool) {
	var m SessionMounts
	for _, vm := range pod.Spec.Containers[0].VolumeMounts {
		switch vm.MountPath {
		case wire.SessionRunDir:
			m.RunDir = filepath.Join(p.root, vm.SubPath)
		case wire.SessionWorkspace:
			m.Workspace = filepath.Join(p.root, vm.SubPath)
		}
	}
	if m.RunDir == "" || m.Workspace == "" {
		p.tb.Errorf("session Pod %s mounts no run directory or workspace: %+v", pod.Name, pod.Spec.Containers[0].VolumeMounts)
		return m, false
	}
	return m, true
}

// Started counts the Pods whose worker was started.
func (p *SessionPods) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}
