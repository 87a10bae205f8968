package kubernetes

// The session engine on the cluster tier: kwok marks the channels' Pods
// running (and fails them on its label); nothing runs in them, so what is
// tested is the engine's side: which Pod exists under which name, when it
// is kept, recreated, deleted and reaped, and what a watch hears.

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// clusterSessionRoot is where the test's host would see the claim.
const clusterSessionRoot = "/srv/channels"

// sessionRig is a session engine of the test installation in a fresh
// namespace, on a claim bound to a volume.
type sessionRig struct {
	c *k8stest.Cluster
	o Options
	e *Sessions
}

func newSessionRig(t *testing.T) *sessionRig {
	t.Helper()
	c := k8stest.Require(t)
	o := clusterOptions(t, c)
	o.SessionClaim, o.SessionRoot = "channels", clusterSessionRoot
	c.BindClaim(t, o.Namespace, o.SessionClaim)
	e, err := NewSessions(c.Clientset.CoreV1(), o)
	if err != nil {
		t.Fatal(err)
	}
	return &sessionRig{c: c, o: o, e: e}
}

// spec is channel's spec, its directories dir below the claim's root.
func (r *sessionRig) spec(channel, dir string) container.SessionSpec {
	return container.SessionSpec{
		Name: container.SessionName(r.o.Installation, channel), Image: "rtsandbox-worker:latest",
		Installation: r.o.Installation, Channel: channel, Profile: "studio", UID: 1000, GID: 1000,
		RunDir: clusterSessionRoot + "/run/" + dir, WorkspaceDir: clusterSessionRoot + "/workspaces/" + dir,
	}
}

// pod reads the Pod of the container name; nil when missing.
func (r *sessionRig) pod(t *testing.T, ctx context.Context, name string) *corev1.Pod {
	t.Helper()
	pod, err := r.c.Clientset.CoreV1().Pods(r.o.Namespace).Get(ctx, SessionPodName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// ensure runs EnsureRunning and returns the Pod's UID, checking that
// Status then reads spec back, running.
func (r *sessionRig) ensure(t *testing.T, ctx context.Context, spec container.SessionSpec) types.UID {
	t.Helper()
	if err := r.e.EnsureRunning(ctx, spec); err != nil {
		t.Fatalf("EnsureRunning: %v", err)
	}
	st, err := r.e.Status(ctx, spec.Name)
	want := container.SessionStatus{State: container.StateRunning, Image: spec.Image, Profile: spec.Profile, Digest: spec.Digest()}
	if err != nil || st != want {
		t.Errorf("Status = %+v, %v; want %+v", st, err, want)
	}
	pod := r.pod(t, ctx, spec.Name)
	if pod == nil {
		t.Fatal("EnsureRunning left no Pod")
	}
	return pod.UID
}

// TestClusterSessionLifecycle: EnsureRunning creates the channel's Pod as
// built and Status reads it running; ensuring the same spec keeps that
// very Pod; a changed profile, image or limit recreates it; Remove deletes
// it (twice is fine) and Status and Logs then say missing.
func TestClusterSessionLifecycle(t *testing.T) {
	r := newSessionRig(t)
	ctx := clusterCtx(t)
	spec := r.spec("discord:Guild_1/general", "c1")
	if st, err := r.e.Status(ctx, spec.Name); err != nil || st != (container.SessionStatus{State: container.StateMissing}) {
		t.Fatalf("Status before = %+v, %v; want missing", st, err)
	}
	first := r.ensure(t, ctx, spec)
	pod := r.pod(t, ctx, spec.Name)
	mounts := pod.Spec.Containers[0].VolumeMounts
	if pod.Spec.NodeName != k8stest.NodeName || pod.Spec.RestartPolicy != corev1.RestartPolicyAlways ||
		len(mounts) != 3 || mounts[1].SubPath != "run/c1" || !mounts[1].ReadOnly || mounts[2].SubPath != "workspaces/c1" || mounts[2].ReadOnly ||
		pod.Labels[container.RoleLabel] != container.RoleSession || pod.Annotations[container.ChannelLabel] != spec.Channel {
		t.Errorf("the stored Pod: node %q, %+v, %+v", pod.Spec.NodeName, pod.ObjectMeta, pod.Spec)
	}

	if got := r.ensure(t, ctx, spec); got != first {
		t.Error("a current running Pod was recreated")
	}
	last := first
	changes := map[string]func(*container.SessionSpec){
		"profile": func(s *container.SessionSpec) { s.Profile = "other" },
		"image":   func(s *container.SessionSpec) { s.Image = "rtsandbox-worker:next" },
		"limit":   func(s *container.SessionSpec) { s.Limits = container.SessionLimits{MemoryMB: 512, CPUs: 1, PIDs: 64} },
	}
	for _, name := range []string{"profile", "image", "limit"} {
		changes[name](&spec)
		got := r.ensure(t, ctx, spec)
		if got == last {
			t.Errorf("a change of the %s kept the Pod", name)
		}
		last = got
	}

	for range 2 {
		if err := r.e.Remove(ctx, spec.Name); err != nil {
			t.Fatalf("Remove = %v", err)
		}
	}
	if r.pod(t, ctx, spec.Name) != nil {
		t.Error("the Pod outlived Remove")
	}
	if st, err := r.e.Status(ctx, spec.Name); err != nil || st.State != container.StateMissing {
		t.Errorf("Status after Remove = %+v, %v; want missing", st, err)
	}
	if got, err := r.e.Logs(ctx, spec.Name, 200); err != nil || got != "" {
		t.Errorf("Logs after Remove = %q, %v; want \"\"", got, err)
	}
}

// TestClusterSessionEngineChange: a Pod built under other engine options
// (an ephemeral bound, a broker, a claim) reads as stale to the engine of
// the new options, whose EnsureRunning recreates it.
func TestClusterSessionEngineChange(t *testing.T) {
	r := newSessionRig(t)
	ctx := clusterCtx(t)
	r.c.BindClaim(t, r.o.Namespace, "channels-2")
	spec := r.spec("http:studio", "studio")
	last := r.ensure(t, ctx, spec)
	changes := []struct {
		name string
		edit func(*Options)
	}{
		{"ephemeral", func(o *Options) { o.EphemeralMB = 128 }},
		{"broker", func(o *Options) { o.Broker = netip.MustParseAddrPort("10.96.0.11:7443") }},
		{"claim", func(o *Options) { o.SessionClaim = "channels-2" }},
	}
	for _, ch := range changes {
		o := r.o
		ch.edit(&o)
		e, err := NewSessions(r.c.Clientset.CoreV1(), o)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := e.Status(ctx, spec.Name); err != nil || st.State != container.StateRunning || !st.Stale(spec) || st.Current(spec) {
			t.Errorf("after a change of the %s: Status = %+v, %v; want running and stale", ch.name, st, err)
		}
		r.e = e
		got := r.ensure(t, ctx, spec)
		if got == last {
			t.Errorf("a change of the %s kept the Pod", ch.name)
		}
		last = got
	}
	if pod := r.pod(t, ctx, spec.Name); pod.Spec.Volumes[1].PersistentVolumeClaim.ClaimName != "channels-2" {
		t.Errorf("the last Pod mounts %+v; want channels-2", pod.Spec.Volumes[1])
	}
}

// expectDown waits for the watch's fault.
func expectDown(t *testing.T, down <-chan error, what string) {
	t.Helper()
	select {
	case err := <-down:
		if !errors.Is(err, container.ErrSessionDown) {
			t.Errorf("%s: watch sent %v; want ErrSessionDown", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not heard", what)
	}
}

// TestClusterSessionWatch: a missing Pod is not watched; a watched Pod's
// deletion is heard at once, and so is its failure (kwok ends its worker
// with exit code 1), after which Status says stopped, the Pod is not
// watched again and EnsureRunning replaces it.
func TestClusterSessionWatch(t *testing.T) {
	r := newSessionRig(t)
	ctx := clusterCtx(t)
	spec := r.spec("slack:T1/C2", "slack")
	if _, err := r.e.Watch(ctx, spec.Name); !errors.Is(err, container.ErrSessionDown) {
		t.Errorf("Watch of a missing Pod = %v; want ErrSessionDown", err)
	}
	r.ensure(t, ctx, spec)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	down, err := r.e.Watch(wctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	pods := r.c.Clientset.CoreV1().Pods(r.o.Namespace)
	if err := pods.Delete(ctx, SessionPodName(spec.Name), metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	expectDown(t, down, "deletion")

	first := r.ensure(t, ctx, spec)
	down, err = r.e.Watch(wctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	failPod(t, ctx, r.c, r.pod(t, ctx, spec.Name))
	expectDown(t, down, "failure")
	if st, err := r.e.Status(ctx, spec.Name); err != nil || st.State != container.StateStopped {
		t.Errorf("Status of the failed Pod = %+v, %v; want stopped", st, err)
	}
	if _, err := r.e.Watch(wctx, spec.Name); !errors.Is(err, container.ErrSessionDown) {
		t.Errorf("Watch of the failed Pod = %v; want ErrSessionDown", err)
	}
	if got := r.ensure(t, ctx, spec); got == first {
		t.Error("EnsureRunning kept the failed Pod")
	}
}

// TestClusterSessionReap: the sealed reaper leaves session Pods alone;
// ReapStrays deletes only the Pod whose name is not its channel's;
// ReapSessions deletes this installation's session Pods and nothing else
// (not another installation's, not a sealed turn's).
func TestClusterSessionReap(t *testing.T) {
	r := newSessionRig(t)
	ctx := clusterCtx(t)
	current, stray := r.spec("http:a", "a"), r.spec("http:b", "b")
	r.ensure(t, ctx, current)
	r.ensure(t, ctx, stray)
	oo := r.o
	oo.Installation = "other-inst"
	other, err := NewSessions(r.c.Clientset.CoreV1(), oo)
	if err != nil {
		t.Fatal(err)
	}
	theirs := r.spec("http:a", "theirs")
	theirs.Installation, theirs.Name = oo.Installation, container.SessionName(oo.Installation, "http:a")
	if err := other.EnsureRunning(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	p, err := NewPods(r.c.Clientset.CoreV1(), r.o)
	if err != nil {
		t.Fatal(err)
	}
	startSealed(t, ctx, p, testSpec(t))

	sealed, err := NewSealed(r.c.Clientset.CoreV1(), nil, broker.NewTokens(), "", r.o)
	if err != nil {
		t.Fatal(err)
	}
	defer sealed.Close()
	if n, err := sealed.Reap(ctx, r.o.Installation); err != nil || n != 1 {
		t.Errorf("sealed Reap = %d, %v; want the turn's Pod alone", n, err)
	}
	r.wantPods(t, ctx, SessionPodName(current.Name), SessionPodName(stray.Name), SessionPodName(theirs.Name))

	name := func(channel string) string {
		if channel == "http:b" {
			return container.PrefixedSessionName("renamed", r.o.Installation, channel)
		}
		return container.SessionName(r.o.Installation, channel)
	}
	if n, err := r.e.ReapStrays(ctx, r.o.Installation, name); err != nil || n != 1 {
		t.Errorf("ReapStrays = %d, %v; want 1", n, err)
	}
	r.wantPods(t, ctx, SessionPodName(current.Name), SessionPodName(theirs.Name))
	if n, err := r.e.ReapSessions(ctx, r.o.Installation); err != nil || n != 1 {
		t.Errorf("ReapSessions = %d, %v; want 1", n, err)
	}
	r.wantPods(t, ctx, SessionPodName(theirs.Name))
	if _, err := r.e.ReapSessions(ctx, oo.Installation); !errors.Is(err, container.ErrInvalidSpec) {
		t.Errorf("ReapSessions of another installation = %v; want ErrInvalidSpec", err)
	}
}

// wantPods checks that the namespace's Pods not being deleted are exactly
// want.
func (r *sessionRig) wantPods(t *testing.T, ctx context.Context, want ...string) {
	t.Helper()
	left := livePods(t, ctx, r.c.Clientset.CoreV1().Pods(r.o.Namespace))
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("Pods %v; want %v", left, want)
	}
}

// TestClusterSessionAborted: an EnsureRunning whose ctx ends leaves no Pod:
// ended before the call, or while it waits for a Pod that cannot run (its
// claim is not bound, so the scheduler places it nowhere).
func TestClusterSessionAborted(t *testing.T) {
	r := newSessionRig(t)
	ctx := clusterCtx(t)
	spec := r.spec("http:aborted", "aborted")
	done, cancel := context.WithCancelCause(ctx)
	stop := errors.New("turn stopped")
	cancel(stop)
	if err := r.e.EnsureRunning(done, spec); !errors.Is(err, container.ErrAborted) {
		t.Errorf("EnsureRunning on an ended ctx = %v; want ErrAborted", err)
	}
	if r.pod(t, ctx, spec.Name) != nil {
		t.Error("EnsureRunning on an ended ctx left a Pod")
	}

	o := r.o
	o.SessionClaim = "unbound"
	e, err := NewSessions(r.c.Clientset.CoreV1(), o)
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.c.Clientset.CoreV1().Pods(o.Namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ectx, cancel := context.WithCancelCause(ctx)
	errc := make(chan error, 1)
	go func() { errc <- e.EnsureRunning(ectx, spec) }()
	var created *corev1.Pod
	for ev := range w.ResultChan() {
		if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
			created = pod
			break
		}
	}
	cancel(stop)
	err = <-errc
	if !errors.Is(err, container.ErrAborted) || !errors.Is(err, stop) {
		t.Errorf("EnsureRunning cancelled while its Pod was pending = %v; want ErrAborted wrapping the cause", err)
	}
	if created == nil || created.Name != SessionPodName(spec.Name) {
		t.Fatalf("the Pod created: %v", created)
	}
	if pod := r.pod(t, ctx, spec.Name); pod != nil {
		t.Errorf("EnsureRunning cancelled while its Pod was pending left %s (deleting: %v)", pod.Name, pod.DeletionTimestamp)
	}
}
