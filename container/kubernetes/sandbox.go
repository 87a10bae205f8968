package kubernetes

import (
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sandboxv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/rtsandbox/rtsandbox/container"
)

// WarmPool is the agent-sandbox objects of a warm pool of sealed workers:
// a SandboxTemplate carrying the sealed Pod's spec and its labels, and a
// SandboxWarmPool of size copies of it. A turn claims one with Claim.
type WarmPool struct {
	Template *extv1.SandboxTemplate
	Pool     *extv1.SandboxWarmPool
}

// SealedWarmPool builds the warm pool name of size workers under spec's
// profile (spec.Name is not used: each Pod gets the pool's generated
// name, which carries no channel). The template sets no NetworkPolicy of
// its own (networkPolicyManagement Unmanaged): WorkerPolicy covers every
// worker of the installation, claimed or not. Claims may not add
// environment variables or volumes: nothing of a turn reaches a Pod but
// its stdin. Errors wrap container.ErrInvalidSpec.
func SealedWarmPool(name string, size int32, spec container.Spec, o Options) (WarmPool, error) {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return WarmPool{}, fmt.Errorf("%w: warm pool name %q: %s", container.ErrInvalidSpec, name, errs[0])
	}
	if size < 0 {
		return WarmPool{}, fmt.Errorf("%w: warm pool size %d", container.ErrInvalidSpec, size)
	}
	pod, err := SealedPod(spec, o)
	if err != nil {
		return WarmPool{}, err
	}
	labels := map[string]string{container.InstallationLabel: o.Installation}
	meta := metav1.ObjectMeta{Name: name, Namespace: pod.Namespace, Labels: labels}
	tmpl := &extv1.SandboxTemplate{
		ObjectMeta: meta,
		Spec: extv1.SandboxTemplateSpec{
			SandboxBlueprint: sandboxv1.SandboxBlueprint{PodTemplate: sandboxv1.PodTemplate{
				ObjectMeta: sandboxv1.PodMetadata{Labels: maps.Clone(pod.Labels)},
				Spec:       pod.Spec,
			}},
			NetworkPolicyManagement:    extv1.NetworkPolicyManagementUnmanaged,
			EnvVarsInjectionPolicy:     extv1.EnvVarsInjectionPolicyDisallowed,
			VolumeClaimTemplatesPolicy: extv1.VolumeClaimTemplatesPolicyDisallowed,
		},
	}
	meta.Labels = maps.Clone(labels)
	pool := &extv1.SandboxWarmPool{
		ObjectMeta: meta,
		Spec: extv1.SandboxWarmPoolSpec{
			Replicas:       &size,
			TemplateRef:    extv1.SandboxTemplateRef{Name: name},
			UpdateStrategy: &extv1.SandboxWarmPoolUpdateStrategy{Type: extv1.RecreateSandboxWarmPoolUpdateStrategyType},
		},
	}
	return WarmPool{Template: tmpl, Pool: pool}, nil
}

// Claim is the SandboxClaim of one turn on the pool: its name (a turn's
// container.PoolName-like name, no channel), the pool, the installation's
// labels, and deletion of the Sandbox with the claim. Nothing of the turn
// is in it.
func (w WarmPool) Claim(name string) (*extv1.SandboxClaim, error) {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("%w: claim name %q: %s", container.ErrInvalidSpec, name, errs[0])
	}
	return &extv1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Pool.Namespace, Labels: maps.Clone(w.Pool.Labels)},
		Spec: extv1.SandboxClaimSpec{
			WarmPoolRef: extv1.SandboxWarmPoolRef{Name: w.Pool.Name},
			Lifecycle:   &extv1.Lifecycle{ShutdownPolicy: extv1.ShutdownPolicyDelete},
		},
	}, nil
}
