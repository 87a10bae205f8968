package host

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	authzv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	nodev1client "k8s.io/client-go/kubernetes/typed/node/v1"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/kubernetes"
	"github.com/rtsandbox/rtsandbox/internal/kubeclient"
)

// kubeChecks are doctor's checks of engine: kubernetes, in place of the
// Docker ones: the API server answers, the namespace exists, this
// identity may do exactly what the engine does there (one
// SelfSubjectAccessReview per verb of kubernetes.Permissions), the
// agent-sandbox CRDs are served when a warm pool is configured, and each
// RuntimeClass the config's runtimes map to exists.
func kubeChecks(ctx context.Context, cfg *config.Config) []Check {
	const api = "kubernetes"
	rc, err := KubeConfig(cfg)
	if err != nil {
		return []Check{fail(api, "set kubernetes.kubeconfig to a kubeconfig file, or run serve in a Pod", "%v", err)}
	}
	cs, err := kubeclient.New(rc)
	if err != nil {
		return []Check{fail(api, "fix the kubeconfig", "%v", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return []Check{fail(api, "check the cluster is up and the kubeconfig's server and credentials", "API server unreachable: %v", err)}
	}
	k := cfg.Kubernetes
	checks := []Check{ok(api, "API server %s at %s", v.GitVersion, rc.Host)}
	_, err = cs.CoreV1().Namespaces().Get(ctx, k.Namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		checks = append(checks, warn("namespace", readFix, "%s: not checked: this identity may not read it", k.Namespace))
	case err != nil:
		checks = append(checks, fail("namespace", "kubectl create namespace "+k.Namespace, "%s: %v", k.Namespace, err))
	default:
		checks = append(checks, ok("namespace", "%s", k.Namespace))
	}
	checks = append(checks, rbacCheck(ctx, cs.AuthorizationV1(), k.Namespace, k.SealedPool > 0, cfg.UsesSessions()))
	if k.SealedPool > 0 {
		checks = append(checks, crdCheck(cs.Discovery()))
	}
	if cfg.UsesSessions() {
		checks = append(checks, claimCheck(ctx, cs.CoreV1(), k))
	}
	return append(checks, runtimeClassChecks(ctx, cs.NodeV1(), cfg)...)
}

// claimCheck wants the claim that holds the channels' directories
// (kubernetes.session.claim) bound, and warns when it is not
// ReadWriteMany: a channel's Pod can then be recreated only on the node
// that has the volume, and serve must run there too.
func claimCheck(ctx context.Context, core corev1client.CoreV1Interface, k *config.Kubernetes) Check {
	const name = "session claim"
	pvc, err := core.PersistentVolumeClaims(k.Namespace).Get(ctx, k.SessionClaim, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return warn(name, readFix, "%s: not checked: this identity may not read PersistentVolumeClaims", k.SessionClaim)
	case apierrors.IsNotFound(err):
		return fail(name, "create the claim (deploy/kubernetes-sessions/channels-pvc.yaml) and mount it in serve at kubernetes.session.root", "PersistentVolumeClaim %s does not exist in %s", k.SessionClaim, k.Namespace)
	case err != nil:
		return fail(name, "check the API server", "PersistentVolumeClaim %s: %v", k.SessionClaim, err)
	case pvc.Status.Phase != corev1.ClaimBound:
		return fail(name, "give the claim a volume (a StorageClass that provisions it, or a PersistentVolume it binds)", "PersistentVolumeClaim %s is %s, not Bound", k.SessionClaim, pvc.Status.Phase)
	case !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany):
		return warn(name, "use a ReadWriteMany volume so a channel's Pod can move to another node", "PersistentVolumeClaim %s is bound but not ReadWriteMany: channels' Pods and serve must share its node", k.SessionClaim)
	}
	return ok(name, "PersistentVolumeClaim %s is bound, ReadWriteMany, mounted by serve at %s", k.SessionClaim, k.SessionRoot)
}

// readFix is the fix of a check doctor could not make for want of a read.
const readFix = "apply deploy/kubernetes' ClusterRole rtsandbox-read (bound to serve's identity), or check by hand"

// rbacCheck asks the API server, verb by verb, whether this identity may
// do what the engine does in ns (with the session engine's verbs when
// sessions).
func rbacCheck(ctx context.Context, authz authzv1client.AuthorizationV1Interface, ns string, warmPool, sessions bool) Check {
	const name = "rbac"
	var missing []string
	for _, r := range kubernetes.Permissions(warmPool, sessions) {
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, verb := range r.Verbs {
				review := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb,
						Group: r.APIGroups[0], Resource: resource, Subresource: sub}}}
				got, err := authz.SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err != nil {
					return fail(name, "check the API server and the kubeconfig's credentials", "access review: %v", err)
				}
				if !got.Status.Allowed {
					missing = append(missing, verb+" "+res)
				}
			}
		}
	}
	if len(missing) > 0 {
		return fail(name, "bind the Role of deploy/kubernetes to this identity", "may not %s in %s", strings.Join(missing, ", "), ns)
	}
	return ok(name, "every verb the engine uses is allowed in %s", ns)
}

// crdCheck wants agent-sandbox's resources served.
func crdCheck(disc discovery.DiscoveryInterface) Check {
	const name = "agent-sandbox"
	want := map[string][]string{
		kubernetes.SandboxGroup + "/v1beta1":    {"sandboxes"},
		kubernetes.ExtensionsGroup + "/v1beta1": {"sandboxclaims", "sandboxtemplates", "sandboxwarmpools"},
	}
	var missing []string
	for gv, resources := range want {
		list, err := disc.ServerResourcesForGroupVersion(gv)
		for _, r := range resources {
			if err != nil || !slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == r }) {
				missing = append(missing, gv+" "+r)
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fail(name, "install agent-sandbox v1.0.1 with its extensions, or set kubernetes.pool.sealed: 0", "not served: %s", strings.Join(missing, ", "))
	}
	return ok(name, "SandboxClaim, SandboxTemplate, SandboxWarmPool and Sandbox are served")
}

// runtimeClassChecks wants the RuntimeClass of each runtime in use.
func runtimeClassChecks(ctx context.Context, node nodev1client.NodeV1Interface, cfg *config.Config) []Check {
	classes := kubernetes.DefaultRuntimeClasses()
	for rt, c := range cfg.Kubernetes.RuntimeClasses {
		classes[rt] = c
	}
	var checks []Check
	for _, rt := range cfg.Runtimes() {
		name := "runtime " + rt
		class := classes[container.EngineRuntime(rt)]
		if class == "" {
			checks = append(checks, ok(name, "the cluster's default handler"))
			continue
		}
		_, err := node.RuntimeClasses().Get(ctx, class, metav1.GetOptions{})
		switch {
		case apierrors.IsForbidden(err):
			checks = append(checks, warn(name, readFix, "RuntimeClass %s: not checked: this identity may not read RuntimeClasses", class))
		case apierrors.IsNotFound(err):
			checks = append(checks, fail(name, fmt.Sprintf("create the RuntimeClass %s (deploy/kubernetes/runtimeclass-gvisor.yaml) or map %s to another in kubernetes.runtime_classes", class, rt), "RuntimeClass %s does not exist", class))
		case err != nil:
			checks = append(checks, fail(name, "check the API server", "RuntimeClass %s: %v", class, err))
		default:
			checks = append(checks, ok(name, "RuntimeClass %s", class))
		}
	}
	return checks
}
