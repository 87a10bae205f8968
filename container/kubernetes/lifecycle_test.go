package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	fakecorev1 "k8s.io/client-go/kubernetes/typed/core/v1/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rtsandbox/rtsandbox/container"
)

// apiFixture is a fake API server (client-go's object tracker, with its
// watches) and the Pods of the test installation on it. watched receives
// one value each time a watch of pods opens. It fakes the core/v1 client
// alone, not a whole clientset: the fake clientset brings every API
// group's fake client, 16 CPU-seconds of this package's race build and 10
// of its go vet on an empty build cache (and staticcheck's facts for each),
// for nothing the engine's Pods call.
type apiFixture struct {
	fake    *k8stesting.Fake
	tracker k8stesting.ObjectTracker
	core    corev1client.CoreV1Interface
	pods    *Pods
	watched chan struct{}
}

func newAPI(t *testing.T, objects ...runtime.Object) *apiFixture {
	t.Helper()
	tracker := k8stesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder())
	for _, o := range objects {
		if err := tracker.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	f := &apiFixture{fake: &k8stesting.Fake{}, tracker: tracker, watched: make(chan struct{}, 16)}
	f.fake.AddReactor("*", "*", k8stesting.ObjectReaction(tracker))
	f.fake.AddWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := f.tracker.Watch(a.GetResource(), a.GetNamespace())
		f.watched <- struct{}{}
		return true, w, err
	})
	f.core = &fakecorev1.FakeCoreV1{Fake: f.fake}
	p, err := NewPods(f.core, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	f.pods = p
	return f
}

// setStatus replaces the Pod's status as the kubelet (or kwok) would.
func (f *apiFixture) setStatus(t *testing.T, name string, edit func(*corev1.PodStatus)) {
	t.Helper()
	api := f.core.Pods("rtsandbox")
	pod, err := api.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edit(&pod.Status)
	if _, err := api.UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func running(s *corev1.PodStatus) {
	s.Phase = corev1.PodRunning
	s.ContainerStatuses = []corev1.ContainerStatus{{Name: WorkerContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

func waiting(reason string) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: WorkerContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
	}
}

// start runs Start in the background; the test changes the Pod once the
// watch is open.
func (f *apiFixture) start(t *testing.T, ctx context.Context) (*corev1.Pod, <-chan error) {
	t.Helper()
	pod, err := SealedPod(testSpec(t), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := f.pods.Start(ctx, pod)
		errc <- err
	}()
	select {
	case <-f.watched:
	case err := <-errc:
		t.Fatalf("Start ended before it watched: %v", err)
	}
	return pod, errc
}

// TestStartWaitsForTheWorker: Start returns once the watch reports the
// worker running, and each way a Pod can fail to run is its class.
func TestStartWaitsForTheWorker(t *testing.T) {
	tests := []struct {
		name   string
		change func(f *apiFixture, t *testing.T, name string)
		want   error
	}{
		{"running", func(f *apiFixture, t *testing.T, n string) { f.setStatus(t, n, running) }, nil},
		{"pending, then running", func(f *apiFixture, t *testing.T, n string) {
			f.setStatus(t, n, func(s *corev1.PodStatus) { s.Phase = corev1.PodPending })
			f.setStatus(t, n, running)
		}, nil},
		{"image never pulled", func(f *apiFixture, t *testing.T, n string) { f.setStatus(t, n, waiting("ErrImageNeverPull")) }, container.ErrImageMissing},
		{"pod failed", func(f *apiFixture, t *testing.T, n string) {
			f.setStatus(t, n, func(s *corev1.PodStatus) { s.Phase, s.Reason = corev1.PodFailed, "Evicted" })
		}, container.ErrWorkerFailed},
		{"worker ended", func(f *apiFixture, t *testing.T, n string) {
			f.setStatus(t, n, func(s *corev1.PodStatus) {
				s.ContainerStatuses = []corev1.ContainerStatus{{Name: WorkerContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2}}}}
			})
		}, container.ErrWorkerFailed},
		{"deleted", func(f *apiFixture, t *testing.T, n string) {
			if err := f.core.Pods("rtsandbox").Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, container.ErrEngine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newAPI(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a missed change fails, not hangs
			defer cancel()
			pod, errc := f.start(t, ctx)
			tt.change(f, t, pod.Name)
			if err := <-errc; !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Start = %v; want %v", err, tt.want)
			}
		})
	}
}

// TestStartOutlivesAnEndedWatch: a watch the API ends before any change
// of the Pod (with an error event, as for a version too old, or none) is
// opened again; Start does not take its end for the worker running.
func TestStartOutlivesAnEndedWatch(t *testing.T) {
	for _, withError := range []bool{false, true} {
		t.Run(fmt.Sprintf("error-event-%v", withError), func(t *testing.T) {
			f := newAPI(t)
			first := true
			f.fake.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
				if !first {
					return false, nil, nil // the tracker's watch
				}
				first = false
				w := watch.NewFakeWithChanSize(1, false)
				if withError {
					w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired})
				}
				w.Stop()
				f.watched <- struct{}{}
				return true, w, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pod, errc := f.start(t, ctx)
			select {
			case <-f.watched: // the second watch, from the tracker
			case err := <-errc:
				t.Fatalf("Start ended with the first watch: %v", err)
			}
			select {
			case err := <-errc:
				t.Fatalf("Start = %v before the worker ran", err)
			default:
			}
			f.setStatus(t, pod.Name, running)
			if err := <-errc; err != nil {
				t.Errorf("Start = %v; want nil once running", err)
			}
		})
	}
}

// TestStartAborted: a Pod that never runs holds Start only until its
// context ends.
func TestStartAborted(t *testing.T) {
	f := newAPI(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("turn stopped")
	pod, errc := f.start(t, ctx)
	cancel(stop)
	err := <-errc
	if !errors.Is(err, container.ErrAborted) || !errors.Is(err, stop) {
		t.Errorf("Start = %v; want ErrAborted wrapping the cause", err)
	}
	// The operator's log says where the Pod stood.
	if !strings.Contains(fmt.Sprint(err), "pod "+pod.Name+` not running (phase "", node ""`) {
		t.Errorf("Start = %v; want the Pod's phase and node", err)
	}
}

// TestDeleteByUID: Delete removes the Pod and returns once it is gone; a
// Pod already gone is fine.
func TestDeleteByUID(t *testing.T) {
	f := newAPI(t)
	pod, errc := f.start(t, context.Background())
	f.setStatus(t, pod.Name, running)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got, err := f.core.Pods("rtsandbox").Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := f.pods.Delete(context.Background(), pod.Name, got.UID); err != nil {
			t.Fatalf("Delete = %v", err)
		}
	}
	if list, _ := f.core.Pods("rtsandbox").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("pods left: %d", len(list.Items))
	}
	var gracePeriods []int64
	for _, a := range f.fake.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			gracePeriods = append(gracePeriods, *d.GetDeleteOptions().GracePeriodSeconds)
			if uid := d.GetDeleteOptions().Preconditions.UID; uid == nil || *uid != got.UID {
				t.Errorf("delete precondition UID = %v; want %s", uid, got.UID)
			}
		}
	}
	if len(gracePeriods) != 2 || gracePeriods[0] != 0 {
		t.Errorf("delete grace periods = %v; want 0, twice", gracePeriods)
	}
}

func labelled(name, installation, role string) *corev1.Pod {
	l := map[string]string{}
	if installation != "" {
		l[container.InstallationLabel] = installation
	}
	if role != "" {
		l[container.RoleLabel] = role
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "rtsandbox", Labels: l, UID: types.UID("uid-" + name)}}
}

// TestReapOnlyOurs: Reap deletes the installation's Pods of the role and
// nothing else: another installation's, the other role's, unlabelled
// ones, another namespace's.
func TestReapOnlyOurs(t *testing.T) {
	other := labelled("other-ns", "test-inst", container.RoleTurn)
	other.Namespace = "elsewhere"
	f := newAPI(t,
		labelled("ours-1", "test-inst", container.RoleTurn), labelled("ours-2", "test-inst", container.RoleTurn),
		labelled("session", "test-inst", container.RoleSession), labelled("theirs", "other-inst", container.RoleTurn),
		labelled("plain", "", ""), other)
	n, err := f.pods.Reap(context.Background(), container.RoleTurn, nil)
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2", n, err)
	}
	var left []string
	for _, ns := range []string{"rtsandbox", "elsewhere"} {
		list, _ := f.core.Pods(ns).List(context.Background(), metav1.ListOptions{})
		for _, p := range list.Items {
			left = append(left, p.Name)
		}
	}
	if len(left) != 4 {
		t.Errorf("left %v; want session, theirs, plain, other-ns", left)
	}
	if _, err := f.pods.Reap(context.Background(), "everything", nil); !errors.Is(err, container.ErrInvalidSpec) {
		t.Errorf("Reap(unknown role) = %v; want ErrInvalidSpec", err)
	}
}

// TestWatchHearsTheFault: a watched running Pod that fails, restarts its
// worker or is deleted is reported at once as ErrSessionDown; a Pod that
// does not run is refused; ending the watch reports nothing.
func TestWatchHearsTheFault(t *testing.T) {
	faults := map[string]func(f *apiFixture, t *testing.T, name string){
		"failed": func(f *apiFixture, t *testing.T, n string) {
			f.setStatus(t, n, func(s *corev1.PodStatus) { s.Phase = corev1.PodFailed })
		},
		"restart": func(f *apiFixture, t *testing.T, n string) {
			f.setStatus(t, n, func(s *corev1.PodStatus) { s.ContainerStatuses[0].RestartCount++ })
		},
		"evicted": func(f *apiFixture, t *testing.T, n string) { f.setStatus(t, n, waiting("ContainerCreating")) },
		"deleted": func(f *apiFixture, t *testing.T, n string) {
			if err := f.core.Pods("rtsandbox").Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			f := newAPI(t)
			pod, errc := f.start(t, context.Background())
			f.setStatus(t, pod.Name, running)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			down, err := f.pods.Watch(ctx, pod.Name)
			if err != nil {
				t.Fatal(err)
			}
			<-f.watched
			fault(f, t, pod.Name)
			select {
			case err := <-down:
				if !errors.Is(err, container.ErrSessionDown) {
					t.Errorf("watch = %v; want ErrSessionDown", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the fault was not heard")
			}
		})
	}
	t.Run("refused and ended", func(t *testing.T) {
		f := newAPI(t, labelled("pending", "test-inst", container.RoleSession))
		if _, err := f.pods.Watch(context.Background(), "missing"); !errors.Is(err, container.ErrSessionDown) {
			t.Errorf("Watch(missing) = %v; want ErrSessionDown", err)
		}
		if _, err := f.pods.Watch(context.Background(), "pending"); !errors.Is(err, container.ErrSessionDown) {
			t.Errorf("Watch(not running) = %v; want ErrSessionDown", err)
		}
		f.setStatus(t, "pending", running)
		ctx, cancel := context.WithCancel(context.Background())
		down, err := f.pods.Watch(ctx, "pending")
		if err != nil {
			t.Fatal(err)
		}
		<-f.watched
		cancel()
		select {
		case err := <-down:
			t.Errorf("an ended watch reported %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	})
}
