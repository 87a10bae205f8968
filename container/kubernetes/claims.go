package kubernetes

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	sandboxv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sandboxclient "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/rtsandbox/rtsandbox/container"
)

// Claims serves sealed turns from an agent-sandbox SandboxWarmPool: a turn
// creates a SandboxClaim on the pool, the controller binds it to a
// Sandbox whose Pod already runs (or starts one when the pool is empty),
// and the engine attaches to that Pod. After the turn the claim is
// deleted (its Sandbox goes with it: ShutdownPolicyDelete) and the Pod by
// its UID at once; the controller refills the pool.
type Claims struct {
	ext  extclient.Interface
	sbx  sandboxclient.Interface
	pods *Pods
	pool WarmPool
}

// NewClaims is the warm pool name of size workers under spec's profile
// (SealedWarmPool) among pods' installation, to be put in place with
// Ensure.
func NewClaims(ext extclient.Interface, sbx sandboxclient.Interface, pods *Pods, name string, size int32, spec container.Spec) (*Claims, error) {
	pool, err := SealedWarmPool(name, size, spec, pods.o)
	if err != nil {
		return nil, err
	}
	return &Claims{ext: ext, sbx: sbx, pods: pods, pool: pool}, nil
}

// Ensure creates the pool's SandboxTemplate and SandboxWarmPool, or
// updates them to this spec and size (the pool's Recreate strategy then
// replaces workers of an older template). Errors: container.ErrEngine.
func (c *Claims) Ensure(ctx context.Context) error {
	ns := c.pool.Template.Namespace
	tmpls := c.ext.ExtensionsV1beta1().SandboxTemplates(ns)
	if _, err := tmpls.Create(ctx, c.pool.Template, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		// Another writer (the controller's status) may come between the
		// read and the write: read again and retry on a conflict.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := tmpls.Get(ctx, c.pool.Template.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec, cur.Labels = c.pool.Template.Spec, c.pool.Template.Labels
			_, err = tmpls.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return engineErr(ctx, "update sandbox template", err)
		}
	} else if err != nil {
		return engineErr(ctx, "create sandbox template", err)
	}
	pools := c.ext.ExtensionsV1beta1().SandboxWarmPools(ns)
	if _, err := pools.Create(ctx, c.pool.Pool, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := pools.Get(ctx, c.pool.Pool.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Spec, cur.Labels = c.pool.Pool.Spec, c.pool.Pool.Labels
			_, err = pools.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return engineErr(ctx, "update warm pool", err)
		}
	} else if err != nil {
		return engineErr(ctx, "create warm pool", err)
	}
	return nil
}

// Serves reports whether a turn under spec may be served from the pool:
// its Pod would be exactly the template's (the same image, profile,
// runtime and labels). A turn that differs runs in a Pod of its own.
func (c *Claims) Serves(spec container.Spec) bool {
	pod, err := SealedPod(spec, c.pods.o)
	if err != nil {
		return false
	}
	t := c.pool.Template.Spec.PodTemplate
	return equality.Semantic.DeepEqual(pod.Spec, t.Spec) && equality.Semantic.DeepEqual(pod.Labels, t.ObjectMeta.Labels)
}

// claimed is one claim and the Pod it was bound to.
type claimed struct {
	name string
	pod  *corev1.Pod
}

// Claim creates a claim named name and returns it once the controller
// bound it to a ready Sandbox, with that Sandbox's Pod, which must carry
// the installation's turn labels. On an error after the create it returns
// the claim's name, for Release. Errors: container.ErrEngine,
// container.ErrAborted.
func (c *Claims) Claim(ctx context.Context, name string) (claimed, error) {
	claim, err := c.pool.Claim(name)
	if err != nil {
		return claimed{}, err
	}
	api := c.ext.ExtensionsV1beta1().SandboxClaims(claim.Namespace)
	if _, err := api.Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return claimed{}, engineErr(ctx, "create sandbox claim", err)
	}
	got := claimed{name: name}
	var sandbox string
	err = watchUntil(ctx,
		func(ctx context.Context) (watch.Interface, error) {
			return api.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		},
		func(ctx context.Context) (any, error) { return api.Get(ctx, name, metav1.GetOptions{}) },
		func(obj any) (bool, error) {
			cl, ok := obj.(*extv1.SandboxClaim)
			if !ok || cl.Name != name {
				return false, nil
			}
			if meta.IsStatusConditionTrue(cl.Status.Conditions, string(sandboxv1.SandboxConditionReady)) && cl.Status.SandboxStatus.Name != "" {
				sandbox = cl.Status.SandboxStatus.Name
				return true, nil
			}
			return false, nil
		})
	if err != nil {
		return got, err
	}
	sb, err := c.sbx.AgentsV1beta1().Sandboxes(claim.Namespace).Get(ctx, sandbox, metav1.GetOptions{})
	if err != nil {
		return got, engineErr(ctx, "get sandbox", err)
	}
	podName := sb.Name
	if n := sb.Annotations[sandboxv1.SandboxPodNameAnnotation]; n != "" {
		podName = n
	}
	got.pod, err = c.claimedPod(ctx, podName)
	return got, err
}

// claimedPod is the claimed Sandbox's Pod, refused unless it is one of the
// installation's sealed workers and runs.
func (c *Claims) claimedPod(ctx context.Context, name string) (*corev1.Pod, error) {
	pod, err := c.pods.api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, engineErr(ctx, "get claimed pod", err)
	}
	want := labels.SelectorFromSet(labels.Set{
		container.InstallationLabel: c.pool.Pool.Labels[container.InstallationLabel],
		container.RoleLabel:         container.RoleTurn,
	})
	if !want.Matches(labels.Set(pod.Labels)) {
		return nil, fmt.Errorf("%w: claimed pod %s is not this installation's sealed worker", container.ErrEngine, name)
	}
	if done, err := started(pod); !done || err != nil {
		return nil, errors.Join(fmt.Errorf("%w: claimed pod %s does not run", container.ErrEngine, name), err)
	}
	return pod, nil
}

// Release deletes the claim name (its Sandbox goes with it). A claim
// already gone is fine. Errors: container.ErrEngine.
func (c *Claims) Release(ctx context.Context, name string) error {
	err := c.ext.ExtensionsV1beta1().SandboxClaims(c.pool.Pool.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return engineErr(ctx, "delete sandbox claim", err)
	}
	return nil
}

// Reap deletes every claim of the installation but those spare names
// (the engine's live turns; nil spares none): a crash's leftovers.
func (c *Claims) Reap(ctx context.Context, spare func(name string) bool) (int, error) {
	api := c.ext.ExtensionsV1beta1().SandboxClaims(c.pool.Pool.Namespace)
	selector := labels.SelectorFromSet(labels.Set(c.pool.Pool.Labels))
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return 0, engineErr(ctx, "list sandbox claims", err)
	}
	n := 0
	var errs []error
	for _, cl := range list.Items {
		if !selector.Matches(labels.Set(cl.Labels)) || (spare != nil && spare(cl.Name)) {
			continue
		}
		if err := api.Delete(ctx, cl.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%w: reap claims: %w", container.ErrCleanup, errors.Join(errs...))
	}
	return n, nil
}

// watchUntil calls check with the object get returns, and then with each
// object a watch reports, until check is done or ctx ends. A watch the
// API ends is opened again, and the object read again after it opened, so
// no change is missed.
func watchUntil(ctx context.Context, open func(context.Context) (watch.Interface, error), get func(context.Context) (any, error), check func(any) (bool, error)) error {
	for {
		w, err := open(ctx)
		if err != nil {
			return engineErr(ctx, "watch", err)
		}
		obj, err := get(ctx)
		if err != nil {
			w.Stop()
			return engineErr(ctx, "get", err)
		}
		if done, err := check(obj); done {
			w.Stop()
			return err
		}
		done, err := drainUntil(ctx, w, check)
		if done || err != nil {
			return err
		}
	}
}

// drainUntil reads w until check is done, ctx ends or the watch closes
// (done false: open it again).
func drainUntil(ctx context.Context, w watch.Interface, check func(any) (bool, error)) (bool, error) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, fmt.Errorf("%w: %w", container.ErrAborted, context.Cause(ctx))
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			if ev.Type == watch.Deleted {
				return true, fmt.Errorf("%w: watched object deleted", container.ErrEngine)
			}
			if done, err := check(ev.Object); done {
				return true, err
			}
		}
	}
}
