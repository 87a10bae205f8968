package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/rtsandbox/rtsandbox/container"
)

// Pods drives the installation's worker Pods in its namespace.
type Pods struct {
	api corev1client.PodInterface
	o   Options
}

// NewPods is the Pod lifecycle of o's installation through core, the
// core/v1 client (a clientset's CoreV1()). Errors wrap
// container.ErrInvalidSpec.
func NewPods(core corev1client.CoreV1Interface, o Options) (*Pods, error) {
	o, err := o.check()
	if err != nil {
		return nil, err
	}
	return &Pods{api: core.Pods(o.Namespace), o: o}, nil
}

// Start creates pod and returns it once its worker runs, as a watch
// reports it (never a poll). On an error after the create it returns the
// Pod as created, for the caller's Delete by UID; nil when the create
// failed. Errors: container.ErrImageMissing (the
// kubelet may not pull: imagePullPolicy Never), container.ErrWorkerFailed
// (the Pod ended before it ran), container.ErrAborted (ctx ended; the Pod
// is left for the caller's Delete), container.ErrEngine.
func (p *Pods) Start(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	created, err := p.api.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, engineErr(ctx, "create pod", err)
	}
	return p.awaitRunning(ctx, created)
}

// awaitRunning is Start after the create: it returns the Pod created once
// its worker runs, or created itself with Start's errors.
func (p *Pods) awaitRunning(ctx context.Context, created *corev1.Pod) (*corev1.Pod, error) {
	running, last := created, created
	err := p.follow(ctx, created.Name, created.UID, func(pod *corev1.Pod) (bool, error) {
		last = pod
		done, err := started(pod)
		if done && err == nil {
			running = pod
		}
		return done, err
	})
	if errors.Is(err, container.ErrAborted) {
		// Where it stood says which part of the cluster held it.
		err = fmt.Errorf("pod %s not running (phase %q, node %q): %w", created.Name, last.Status.Phase, last.Spec.NodeName, err)
	}
	return running, err
}

// started reports whether pod's worker runs (true, nil), can no longer run
// (true, the class), or may still start (false, nil).
func started(pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, fmt.Errorf("%w: pod %s ended (%s) before its worker ran: %s", container.ErrWorkerFailed, pod.Name, pod.Status.Phase, pod.Status.Reason)
	}
	cs := workerStatus(pod)
	switch {
	case cs == nil:
		return false, nil
	case cs.State.Running != nil:
		return true, nil
	case cs.State.Terminated != nil:
		return true, fmt.Errorf("%w: worker of pod %s ended (exit %d) before it ran", container.ErrWorkerFailed, pod.Name, cs.State.Terminated.ExitCode)
	case cs.State.Waiting != nil && imageMissing[cs.State.Waiting.Reason]:
		return true, fmt.Errorf("%w: pod %s: %s", container.ErrImageMissing, pod.Name, cs.State.Waiting.Reason)
	}
	return false, nil
}

// workerStatus is the status of pod's worker container, nil before the
// kubelet reported one.
func workerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == WorkerContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// imageMissing are the kubelet's waiting reasons of an image it does not
// have and may not pull.
var imageMissing = map[string]bool{"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true}

// errGone is a followed Pod's deletion, or another Pod now under its name.
var errGone = errors.New("pod gone")

// follow calls check with the Pod name of uid as it is now and after each
// change the API reports, until check is done, the Pod is gone (errGone
// wrapped in container.ErrEngine) or ctx ends (container.ErrAborted). A
// watch the API ends is opened again from the last version seen, so no
// change is missed; the Pod is read once after each opening, so one that
// changed before the watch began is seen too.
func (p *Pods) follow(ctx context.Context, name string, uid types.UID, check func(*corev1.Pod) (bool, error)) error {
	version := ""
	for {
		w, err := p.api.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: version,
		})
		if err != nil {
			return engineErr(ctx, "watch pod", err)
		}
		pod, err := p.api.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && pod.UID != uid):
			w.Stop()
			return fmt.Errorf("%w: pod %s: %w", container.ErrEngine, name, errGone)
		case err != nil:
			w.Stop()
			return engineErr(ctx, "get pod", err)
		}
		if done, err := check(pod); done {
			w.Stop()
			return err
		}
		var done bool
		version, done, err = p.drain(ctx, w, name, uid, pod.ResourceVersion, check)
		if done {
			return err
		}
	}
}

// drain reads w until check is done (done, with check's error), the Pod
// is gone or ctx ends (done, with the error), or the API ends the watch:
// then it returns the last version seen (from, before any event), to open
// the next watch from. After an error event (a version too old, say) it
// returns "": the next watch starts from now, and follow's read after
// opening it sees what changed between.
func (p *Pods) drain(ctx context.Context, w watch.Interface, name string, uid types.UID, from string, check func(*corev1.Pod) (bool, error)) (version string, done bool, err error) {
	defer w.Stop()
	version = from
	for {
		select {
		case <-ctx.Done():
			return "", true, fmt.Errorf("%w: %w", container.ErrAborted, context.Cause(ctx))
		case ev, ok := <-w.ResultChan():
			if !ok {
				return version, false, nil
			}
			if ev.Type == watch.Error {
				version = ""
				continue
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod || pod.Name != name {
				continue // another Pod (a fake API ignores field selectors)
			}
			if ev.Type == watch.Deleted || pod.UID != uid {
				return "", true, fmt.Errorf("%w: pod %s: %w", container.ErrEngine, name, errGone)
			}
			version = pod.ResourceVersion
			if done, err := check(pod); done {
				return "", true, err
			}
		}
	}
}

// Delete removes the Pod name of uid at once (grace period 0; the UID as a
// precondition, so a later Pod under the name is never touched) and
// returns once the API reports it gone. A Pod already gone is fine.
// Errors: container.ErrAborted, container.ErrEngine.
func (p *Pods) Delete(ctx context.Context, name string, uid types.UID) error {
	return p.remove(ctx, name, uid, 0)
}

// remove is Delete with a grace period of grace seconds: with one, the API
// keeps the Pod until its node reports its containers stopped.
func (p *Pods) remove(ctx context.Context, name string, uid types.UID, grace int64) error {
	err := p.api.Delete(ctx, name, deleteOptions(uid, grace))
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil // gone, or another Pod holds the name now
	case err != nil:
		return engineErr(ctx, "delete pod", err)
	}
	err = p.follow(ctx, name, uid, func(*corev1.Pod) (bool, error) { return false, nil })
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

// deleteOptions delete the Pod of uid alone, within grace seconds.
func deleteOptions(uid types.UID, grace int64) metav1.DeleteOptions {
	return metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}}
}

// Reap deletes every Pod of the installation in role (container.RoleTurn
// or container.RoleSession) and nothing else, and returns how many it
// asked to delete. It spares the Pods spare names (the engine's live
// turns; nil spares none) and every Pod a controller owns: a warm pool's
// Sandbox Pods are the agent-sandbox controller's, and go with their
// claim or pool. Errors: container.ErrInvalidSpec (an unknown role),
// container.ErrEngine.
func (p *Pods) Reap(ctx context.Context, role string, spare func(name string) bool) (int, error) {
	return p.reap(ctx, role, 0, func(pod *corev1.Pod) bool { return spare != nil && spare(pod.Name) })
}

// reap is Reap with a grace period of grace seconds, sparing the Pods
// spare holds for.
func (p *Pods) reap(ctx context.Context, role string, grace int64, spare func(*corev1.Pod) bool) (int, error) {
	if role != container.RoleTurn && role != container.RoleSession {
		return 0, fmt.Errorf("%w: role %q", container.ErrInvalidSpec, role)
	}
	selector := labels.SelectorFromSet(labels.Set{container.InstallationLabel: p.o.Installation, container.RoleLabel: role})
	list, err := p.api.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return 0, engineErr(ctx, "list pods", err)
	}
	n := 0
	var errs []error
	for i := range list.Items {
		pod := &list.Items[i]
		if !selector.Matches(labels.Set(pod.Labels)) {
			continue // a fake API ignores selectors; a real one never sends these
		}
		if metav1.GetControllerOf(pod) != nil || spare(pod) {
			continue
		}
		err := p.api.Delete(ctx, pod.Name, deleteOptions(pod.UID, grace))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%w: reap: %w", container.ErrCleanup, errors.Join(errs...))
	}
	return n, nil
}

// Watch follows the running Pod name (the container.LongLived watch
// contract): the channel receives one error wrapping
// container.ErrSessionDown as soon as that Pod (its UID) stops running:
// its phase leaves Running, its worker restarts (its restart count
// changes) or stops, its node is lost (nodeLost), it is being deleted or
// is gone, or another Pod took its name. A Pod that does not run now is
// refused at once (container.ErrSessionDown). The API going away is no
// fault: the watch is opened again every watchRetry until ctx ends, and
// its first read checks the same Pod still runs the same worker since the
// same start. Nothing is sent once ctx ends.
func (p *Pods) Watch(ctx context.Context, name string) (<-chan error, error) {
	gctx, cancel := context.WithTimeout(ctx, callTimeout)
	pod, err := p.api.Get(gctx, name, metav1.GetOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: pod %s is missing", container.ErrSessionDown, name)
	}
	if err != nil {
		return nil, engineErr(ctx, "get pod", err)
	}
	restarts, running := workerRunning(pod)
	if !running {
		return nil, fmt.Errorf("%w: pod %s does not run", container.ErrSessionDown, name)
	}
	down := make(chan error, 1)
	go p.watchRunning(ctx, pod, restarts, down)
	return down, nil
}

// Bounds of the engine's API calls.
const (
	// callTimeout bounds one API call whatever its context allows, as
	// Docker's session engine bounds each of its calls.
	callTimeout = 15 * time.Second
	// watchRetry is the pause before a watch whose API call failed is
	// opened again.
	watchRetry = time.Second
)

// watchRunning follows pod, running with restarts restarts of its
// worker, and sends its first fault to down; it returns then or when ctx
// ends.
func (p *Pods) watchRunning(ctx context.Context, pod *corev1.Pod, restarts int32, down chan<- error) {
	check := func(now *corev1.Pod) (bool, error) {
		switch n, ok := workerRunning(now); {
		case !ok:
			return true, fmt.Errorf("%w: pod %s stopped running (phase %s)", container.ErrSessionDown, pod.Name, now.Status.Phase)
		case n != restarts:
			return true, fmt.Errorf("%w: the worker of pod %s restarted", container.ErrSessionDown, pod.Name)
		case nodeLost(now):
			return true, fmt.Errorf("%w: pod %s: its node %s is not ready", container.ErrSessionDown, pod.Name, now.Spec.NodeName)
		}
		return false, nil
	}
	for {
		err := p.follow(ctx, pod.Name, pod.UID, check)
		switch {
		case ctx.Err() != nil:
			return // the watch ended by its caller, not a fault
		case errors.Is(err, container.ErrSessionDown):
			down <- err
			return
		case errors.Is(err, errGone):
			down <- fmt.Errorf("%w: %w", container.ErrSessionDown, err)
			return
		}
		// The API failed a watch or a read: no word on the Pod yet.
		t := time.NewTimer(watchRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// workerRunning reports the worker's restart count and whether the Pod
// and its worker run.
func workerRunning(pod *corev1.Pod) (int32, bool) {
	cs := workerStatus(pod)
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil || cs == nil {
		return 0, false
	}
	return cs.RestartCount, cs.State.Running != nil
}

// engineErr classifies a failed API call: an ended context wins.
func engineErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", container.ErrAborted, context.Cause(ctx))
	}
	return fmt.Errorf("%w: %s: %w", container.ErrEngine, op, err)
}

// Exit waits until the worker of the Pod name of uid has ended, as a watch
// reports it, and returns its exit code. Errors: container.ErrWorkerFailed
// (the Pod ended without the worker's exit code: evicted, or its node lost,
// as nodeLost hears it before the eviction),
// container.ErrEngine (the Pod was deleted or is gone), container.ErrAborted.
func (p *Pods) Exit(ctx context.Context, name string, uid types.UID) (int, error) {
	code := -1
	err := p.follow(ctx, name, uid, func(pod *corev1.Pod) (bool, error) {
		if cs := workerStatus(pod); cs != nil && cs.State.Terminated != nil {
			code = int(cs.State.Terminated.ExitCode)
			return true, nil
		}
		switch {
		case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
			return true, fmt.Errorf("%w: pod %s ended (%s): %s", container.ErrWorkerFailed, name, pod.Status.Phase, pod.Status.Reason)
		case pod.DeletionTimestamp != nil:
			return true, fmt.Errorf("%w: pod %s: %w", container.ErrEngine, name, errGone)
		case nodeLost(pod):
			return true, fmt.Errorf("%w: pod %s: its node %s is not ready", container.ErrWorkerFailed, name, pod.Spec.NodeName)
		}
		return false, nil
	})
	return code, err
}
