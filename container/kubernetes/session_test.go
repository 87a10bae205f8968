package kubernetes

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rtsandbox/rtsandbox/container"
)

// sessionsOn is the session engine of sessionOptions on f's fake API.
func sessionsOn(t *testing.T, f *apiFixture) *Sessions {
	t.Helper()
	e, err := NewSessions(f.core, sessionOptions())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// storedSessionPod is spec's Pod as the engine builds it, stored with
// status as its node would report it.
func storedSessionPod(t *testing.T, f *apiFixture, spec container.SessionSpec, status func(*corev1.PodStatus)) *corev1.Pod {
	t.Helper()
	pod, err := SessionPod(spec, sessionOptions())
	if err != nil {
		t.Fatal(err)
	}
	pod.UID = "uid-1"
	if status != nil {
		status(&pod.Status)
	}
	if err := f.tracker.Add(pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestSessionStatusStates: running only when the Pod runs, is not being
// deleted and its worker runs; a Pod of other engine options is stale.
func TestSessionStatusStates(t *testing.T) {
	spec := sessionSpec("/srv/channels")
	terminated := func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: WorkerContainer, RestartCount: 1,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
	}
	tests := []struct {
		name   string
		status func(*corev1.PodStatus)
		edit   func(*corev1.Pod)
		want   string
	}{
		{"running", running, nil, container.StateRunning},
		{"pending", func(s *corev1.PodStatus) { s.Phase = corev1.PodPending }, nil, container.StateStopped},
		{"crash loop", waiting("CrashLoopBackOff"), nil, container.StateStopped},
		{"worker terminated", terminated, nil, container.StateStopped},
		{"failed", func(s *corev1.PodStatus) { s.Phase = corev1.PodFailed }, nil, container.StateStopped},
		{"being deleted", running, func(p *corev1.Pod) {
			p.DeletionTimestamp, p.Finalizers = &metav1.Time{Time: time.Now()}, []string{"test/hold"}
		}, container.StateStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newAPI(t)
			pod, err := SessionPod(spec, sessionOptions())
			if err != nil {
				t.Fatal(err)
			}
			tt.status(&pod.Status)
			if tt.edit != nil {
				tt.edit(pod)
			}
			if err := f.tracker.Add(pod); err != nil {
				t.Fatal(err)
			}
			st, err := sessionsOn(t, f).Status(context.Background(), spec.Name)
			want := container.SessionStatus{State: tt.want, Image: spec.Image, Profile: spec.Profile, Digest: spec.Digest()}
			if err != nil || st != want {
				t.Errorf("Status = %+v, %v; want %+v", st, err, want)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		st, err := sessionsOn(t, newAPI(t)).Status(context.Background(), spec.Name)
		if err != nil || st != (container.SessionStatus{State: container.StateMissing}) {
			t.Errorf("Status = %+v, %v; want missing", st, err)
		}
	})
	t.Run("other engine options", func(t *testing.T) {
		f := newAPI(t)
		storedSessionPod(t, f, spec, running)
		o := sessionOptions()
		o.EphemeralMB = 256
		e, err := NewSessions(f.core, o)
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.Status(context.Background(), spec.Name)
		if err != nil || st.State != container.StateRunning || !st.Stale(spec) || st.Current(spec) {
			t.Errorf("Status = %+v, %v; want running, stale", st, err)
		}
	})
}

// TestSessionLogsRequest: the worker container's log, the last n lines
// (at least 1), at most 1 MiB, of the Pod the name maps to.
func TestSessionLogsRequest(t *testing.T) {
	f := newAPI(t)
	e := sessionsOn(t, f)
	spec := sessionSpec("/srv/channels")
	for _, n := range []int{200, 0} {
		got, err := e.Logs(context.Background(), spec.Name, n)
		if err != nil || got != "fake logs" { // what the fake's log request answers
			t.Fatalf("Logs = %q, %v", got, err)
		}
	}
	var tails []int64
	for _, a := range f.fake.Actions() {
		if a.GetSubresource() != "log" {
			continue
		}
		opts := a.(k8stesting.GenericAction).GetValue().(*corev1.PodLogOptions)
		if a.GetVerb() != "get" || a.GetNamespace() != "rtsandbox" || opts.Container != WorkerContainer ||
			opts.LimitBytes == nil || *opts.LimitBytes != 1<<20 || opts.TailLines == nil || opts.Follow || opts.Previous {
			t.Errorf("log request %s %s: %+v", a.GetVerb(), a.GetNamespace(), opts)
			continue
		}
		tails = append(tails, *opts.TailLines)
	}
	if len(tails) != 2 || tails[0] != 200 || tails[1] != 1 {
		t.Errorf("tail lines %v; want 200, then 1 for 0", tails)
	}
}

// TestSessionRemoveByUIDWithGrace: Remove deletes the Pod the name maps to
// by its UID, with the session grace period (the API keeps it until its
// node stopped the worker), and returns once it is gone; missing is fine.
func TestSessionRemoveByUIDWithGrace(t *testing.T) {
	f := newAPI(t)
	spec := sessionSpec("/srv/channels")
	pod := storedSessionPod(t, f, spec, running)
	e := sessionsOn(t, f)
	for range 2 {
		if err := e.Remove(context.Background(), spec.Name); err != nil {
			t.Fatalf("Remove = %v", err)
		}
	}
	if list, _ := f.core.Pods("rtsandbox").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("pods left: %d", len(list.Items))
	}
	var deletes int
	for _, a := range f.fake.Actions() {
		d, ok := a.(k8stesting.DeleteAction)
		if !ok {
			continue
		}
		deletes++
		o := d.GetDeleteOptions()
		if d.GetName() != pod.Name || *o.GracePeriodSeconds != sessionGrace || o.Preconditions.UID == nil || *o.Preconditions.UID != pod.UID {
			t.Errorf("delete %s with %+v; want %s by UID %s, grace %d", d.GetName(), o, pod.Name, pod.UID, sessionGrace)
		}
	}
	if deletes != 1 {
		t.Errorf("%d deletes; want 1 (the second Remove found nothing)", deletes)
	}
}

// TestSessionStartFailsDeletesThePod: a created Pod that ends before its
// worker runs fails EnsureRunning as an engine failure and is deleted.
func TestSessionStartFailsDeletesThePod(t *testing.T) {
	f := newAPI(t)
	e := sessionsOn(t, f)
	spec := sessionSpec("/srv/channels")
	errc := make(chan error, 1)
	go func() { errc <- e.EnsureRunning(context.Background(), spec) }()
	<-f.watched
	f.setStatus(t, SessionPodName(spec.Name), func(s *corev1.PodStatus) { s.Phase, s.Reason = corev1.PodFailed, "Evicted" })
	if err := <-errc; !errors.Is(err, container.ErrEngine) {
		t.Errorf("EnsureRunning = %v; want ErrEngine", err)
	}
	if list, _ := f.core.Pods("rtsandbox").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("pods left: %d", len(list.Items))
	}
}

// TestWatchOutlivesALostAPI: a watch that cannot be opened (the API out of
// reach) is no fault; the watch is opened again, and a fault that happened
// meanwhile is heard by its first read.
func TestWatchOutlivesALostAPI(t *testing.T) {
	f := newAPI(t, labelled("worker", "test-inst", container.RoleSession))
	f.setStatus(t, "worker", running)
	lost := make(chan struct{}, 1)
	calls := 0
	f.fake.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if calls++; calls > 1 {
			return false, nil, nil // the tracker's watch
		}
		lost <- struct{}{}
		return true, nil, errors.New("connection refused")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	down, err := f.pods.Watch(ctx, "worker")
	if err != nil {
		t.Fatal(err)
	}
	<-lost
	select {
	case err := <-down:
		t.Fatalf("a lost API reported %v", err)
	case <-time.After(watchRetry / 2):
	}
	// The worker restarts while the API is out of reach.
	f.setStatus(t, "worker", func(s *corev1.PodStatus) { s.ContainerStatuses[0].RestartCount++ })
	select {
	case err := <-down:
		if !errors.Is(err, container.ErrSessionDown) {
			t.Errorf("watch = %v; want ErrSessionDown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restart during the outage was not heard")
	}
}
