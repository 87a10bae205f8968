package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/rtsandbox/rtsandbox/container"
)

// Sessions is the Kubernetes engine of the session mode, a
// container.LongLived: one long-lived Pod per channel (SessionPod), named
// by its container name (SessionPodName), created under exactly the
// channel's spec, left running between turns and across host restarts
// (the kubelet restarts a worker that exits) and deleted only by its exact
// name. Its Pods carry the role container.RoleSession, which the sealed
// reaper never deletes. The worker reaches the broker over the network,
// as the hello file the host writes into its run directory says: its Pod
// holds no token, Secret or credential. Safe for concurrent use.
type Sessions struct {
	pods   *Pods
	engine string // engineDigest of the options
}

var _ container.LongLived = (*Sessions)(nil)

// Bounds of the session engine beyond each call's callTimeout.
const (
	// sessionStartWait bounds the wait for a created Pod's worker to run:
	// under the session runtime's 60 s for a start, so that a Pod stuck
	// (unschedulable, its volume not attached) is reported as where it
	// stood and deleted, not cut by the runtime.
	sessionStartWait = 45 * time.Second
	// sessionRemoveWait bounds a removal: the delete, the grace period
	// and the node's report that the worker stopped.
	sessionRemoveWait = 30 * time.Second
	// maxLogRead bounds the bytes of a log tail, as Docker's: 200 lines of
	// a hostile worker must not fill the host's memory.
	maxLogRead = 1 << 20
)

// NewSessions is the session engine of o's installation through core,
// the core/v1 client (a clientset's CoreV1()). o needs
// SessionClaim and SessionRoot. Errors wrap container.ErrInvalidSpec and
// name the field.
func NewSessions(core corev1client.CoreV1Interface, o Options) (*Sessions, error) {
	o, err := o.checkSessions()
	if err != nil {
		return nil, err
	}
	pods, err := NewPods(core, o)
	if err != nil {
		return nil, err
	}
	return &Sessions{pods: pods, engine: engineDigest(pods.o)}, nil
}

// Status reads the Pod of the container name: missing when the API does
// not know it; running when it runs, is not being deleted and its worker
// runs; stopped otherwise (pending, failed, its worker waiting to restart
// after a crash, terminating). Image is the worker container's; profile
// and digest are the Pod's annotations, the digest reported as stale when
// the Pod was built under other engine options. Errors wrap
// container.ErrEngine.
func (e *Sessions) Status(ctx context.Context, name string) (container.SessionStatus, error) {
	pod, err := e.get(ctx, name)
	if err != nil {
		return container.SessionStatus{}, asEngine(err)
	}
	if pod == nil {
		return container.SessionStatus{State: container.StateMissing}, nil
	}
	return e.status(pod), nil
}

// get reads the Pod of the container name, within callTimeout; nil when
// it is missing.
func (e *Sessions) get(ctx context.Context, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := bounded(ctx, callTimeout, "get pod", func(ctx context.Context) error {
		var err error
		pod, err = e.pods.api.Get(ctx, SessionPodName(name), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			pod, err = nil, nil
		}
		return callErr(ctx, "get pod", err)
	})
	return pod, err
}

// status is what a read Pod says.
func (e *Sessions) status(pod *corev1.Pod) container.SessionStatus {
	st := container.SessionStatus{State: container.StateStopped,
		Profile: pod.Annotations[container.ProfileLabel], Digest: pod.Annotations[container.SpecLabel]}
	// The image the worker runs under is the Pod's own field, not an
	// annotation a changed Pod would leave behind.
	for _, c := range pod.Spec.Containers {
		if c.Name == WorkerContainer {
			st.Image = c.Image
		}
	}
	if _, ok := workerRunning(pod); ok {
		st.State = container.StateRunning
	}
	if pod.Annotations[EngineAnnotation] != e.engine {
		st.Digest = staleEngine
	}
	return st
}

// EnsureRunning keeps the running Pod whose image, profile and digests
// match spec exactly; anything else under its name is deleted until gone,
// and spec's Pod is created and waited for, by a watch, until its worker
// runs (within sessionStartWait). Errors: container.ErrInvalidSpec,
// container.ErrImageMissing, container.ErrEngine (a Pod that ended or
// stayed pending is deleted), container.ErrAborted (wrapping ctx's cause)
// when ctx ended before the worker ran.
//
// A cancelled EnsureRunning leaves no Pod behind: the create is detached
// from ctx's end (the API server finishes a create whose client went away,
// so its outcome must be known), and a Pod created for a ctx that ended,
// or that does not run, is deleted by its UID before EnsureRunning
// returns.
func (e *Sessions) EnsureRunning(ctx context.Context, spec container.SessionSpec) error {
	pod, err := SessionPod(spec, e.pods.o)
	if err != nil {
		return err
	}
	old, err := e.get(ctx, spec.Name)
	if err != nil {
		return err
	}
	if old != nil {
		if e.status(old).Current(spec) {
			return nil
		}
		if err := e.delete(ctx, old); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return aborted(ctx)
	}
	return e.start(ctx, pod)
}

// start creates pod and waits until its worker runs; a Pod it created that
// does not run, or whose ctx ended, it deletes.
func (e *Sessions) start(ctx context.Context, pod *corev1.Pod) error {
	created, err := e.create(ctx, pod)
	if err != nil {
		return err
	}
	if ctx.Err() == nil {
		err = bounded(ctx, sessionStartWait, "wait for pod "+pod.Name, func(ctx context.Context) error {
			_, err := e.pods.awaitRunning(ctx, created)
			return err
		})
		if err == nil {
			return nil
		}
		if errors.Is(err, container.ErrWorkerFailed) {
			err = fmt.Errorf("%w: %w", container.ErrEngine, err)
		}
	}
	if ctx.Err() != nil && !errors.Is(err, container.ErrAborted) {
		err = errors.Join(aborted(ctx), err) // the wait's own says where the Pod stood
	}
	return errors.Join(err, asEngine(e.delete(context.WithoutCancel(ctx), created)))
}

// create creates pod within callTimeout whatever ctx says. A create whose
// outcome is unknown (no answer from the API) has the name deleted, so
// that no Pod of it is left.
func (e *Sessions) create(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	detached := context.WithoutCancel(ctx)
	var created *corev1.Pod
	err := bounded(detached, callTimeout, "create pod", func(cctx context.Context) error {
		var err error
		created, err = e.pods.api.Create(cctx, pod, metav1.CreateOptions{})
		return callErr(cctx, "create pod", err)
	})
	if err == nil {
		return created, nil
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		err = errors.Join(err, asEngine(e.Remove(detached, pod.Name)))
	}
	if ctx.Err() != nil {
		err = errors.Join(aborted(ctx), err)
	}
	return nil, err
}

// delete deletes pod by its name and UID and returns once the API reports
// it gone, within sessionRemoveWait.
func (e *Sessions) delete(ctx context.Context, pod *corev1.Pod) error {
	return bounded(ctx, sessionRemoveWait, "delete pod "+pod.Name, func(ctx context.Context) error {
		return e.pods.remove(ctx, pod.Name, pod.UID, sessionGrace)
	})
}

// Remove deletes the Pod of the container name, whatever its UID, and
// any Pod that takes the name meanwhile, and returns once the API reports
// the name free; a missing one is fine. The grace period (sessionGrace)
// makes "gone" mean the node stopped the worker: a Pod on a node that does
// not answer stays, and Remove fails after sessionRemoveWait rather than
// free the name for a second worker on the same workspace (an operator's
// forced delete frees it). Errors wrap container.ErrEngine.
func (e *Sessions) Remove(ctx context.Context, name string) error {
	err := bounded(ctx, sessionRemoveWait, "remove "+name, func(ctx context.Context) error {
		for {
			pod, err := e.pods.api.Get(ctx, SessionPodName(name), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return engineErr(ctx, "get pod", err)
			}
			if err := e.pods.remove(ctx, pod.Name, pod.UID, sessionGrace); err != nil {
				return err
			}
		}
	})
	return asEngine(err)
}

// Logs returns the last n (at least 1) lines of the worker container's
// log, at most maxLogRead bytes (bounded by the API server and again
// here); "" when the Pod is missing. The text is the worker's, untrusted.
// Errors wrap container.ErrEngine.
func (e *Sessions) Logs(ctx context.Context, name string, n int) (string, error) {
	var text string
	err := bounded(ctx, callTimeout, "logs "+name, func(ctx context.Context) error {
		tail, limit := int64(max(1, n)), int64(maxLogRead)
		rc, err := e.pods.api.GetLogs(SessionPodName(name), &corev1.PodLogOptions{
			Container: WorkerContainer, TailLines: &tail, LimitBytes: &limit,
		}).Stream(ctx)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return engineErr(ctx, "logs", err)
		}
		defer rc.Close()
		data, err := io.ReadAll(io.LimitReader(rc, maxLogRead))
		text = string(data)
		return callErr(ctx, "logs", err)
	})
	if err != nil {
		return "", asEngine(err)
	}
	return text, nil
}

// Watch follows the running Pod of the container name (Pods.Watch): one
// error wrapping container.ErrSessionDown as soon as that Pod fails, is
// deleted or evicted, or its worker restarts or stops; the API going away
// is no fault. A Pod that does not run is refused with
// container.ErrSessionDown.
func (e *Sessions) Watch(ctx context.Context, name string) (<-chan error, error) {
	return e.pods.Watch(ctx, SessionPodName(name))
}

// ReapSessions deletes every session Pod of installation, which must be
// the engine's, running or not (`rtsandbox reap`): the Pods labelled with
// the installation and the role container.RoleSession, and nothing else.
// It returns how many it asked to delete, without waiting for them to go.
// Errors: container.ErrInvalidSpec, container.ErrEngine,
// container.ErrCleanup.
func (e *Sessions) ReapSessions(ctx context.Context, installation string) (int, error) {
	return e.reap(ctx, installation, func(*corev1.Pod) bool { return false })
}

// ReapStrays deletes the session Pods of installation whose name is not
// the one name gives their channel (its annotation), mapped to a Pod name:
// those left under an earlier session container prefix, which would
// otherwise keep running on the channel's directories and announce
// themselves to its new broker beside the current one. A channel's
// current Pod stays. Returns and errors as ReapSessions.
func (e *Sessions) ReapStrays(ctx context.Context, installation string, name func(channel string) string) (int, error) {
	return e.reap(ctx, installation, func(pod *corev1.Pod) bool {
		return pod.Name == SessionPodName(name(pod.Annotations[container.ChannelLabel]))
	})
}

// reap deletes the installation's session Pods that spare does not hold
// for.
func (e *Sessions) reap(ctx context.Context, installation string, spare func(*corev1.Pod) bool) (int, error) {
	if !container.ValidInstallation(installation) || installation != e.pods.o.Installation {
		return 0, fmt.Errorf("%w: installation %q is not this engine's", container.ErrInvalidSpec, installation)
	}
	var n int
	err := bounded(ctx, sessionRemoveWait, "reap sessions", func(ctx context.Context) error {
		var err error
		n, err = e.pods.reap(ctx, container.RoleSession, sessionGrace, spare)
		return err
	})
	return n, err
}

// bounded runs call on ctx bounded by d. A bound that ended the call
// while ctx had not is the engine's failure (container.ErrEngine), not
// the caller's abort.
func bounded(ctx context.Context, d time.Duration, op string, call func(context.Context) error) error {
	bctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := call(bctx)
	if err != nil && ctx.Err() == nil && bctx.Err() != nil {
		return fmt.Errorf("%w: %s: no answer within %v: %v", container.ErrEngine, op, d, err)
	}
	return err
}

// callErr is engineErr of a call that failed, nil for one that did not.
func callErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	return engineErr(ctx, op, err)
}

// asEngine makes err, when there is one, wrap container.ErrEngine: the
// class of every error of Status, Remove and Logs.
func asEngine(err error) error {
	if err == nil || errors.Is(err, container.ErrEngine) {
		return err
	}
	return fmt.Errorf("%w: %w", container.ErrEngine, err)
}

// aborted is EnsureRunning's error for a ctx that ended.
func aborted(ctx context.Context) error {
	return fmt.Errorf("%w: %w", container.ErrAborted, context.Cause(ctx))
}
