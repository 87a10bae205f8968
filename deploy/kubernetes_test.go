package deploy

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/kubernetes"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// build renders a kustomize base of this directory as kubectl apply -k
// would.
func build(t *testing.T, dir string) resmap.ResMap {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return m
}

// TestKubernetesBaseBuilds: both bases render, every object of the main
// one lands in the rtsandbox namespace, and the config it ships parses.
func TestKubernetesBaseBuilds(t *testing.T) {
	m := build(t, "kubernetes")
	kinds := map[string]bool{}
	for _, r := range m.Resources() {
		kinds[r.GetKind()] = true
		if r.GetKind() == "ClusterRole" || r.GetKind() == "ClusterRoleBinding" {
			continue
		}
		if r.GetNamespace() != "rtsandbox" {
			t.Errorf("%s %s in namespace %q", r.GetKind(), r.GetName(), r.GetNamespace())
		}
	}
	for _, k := range []string{"ServiceAccount", "Role", "RoleBinding", "Service", "NetworkPolicy", "PersistentVolumeClaim", "Deployment", "ConfigMap"} {
		if !kinds[k] {
			t.Errorf("no %s in the base", k)
		}
	}
	if g := build(t, "kubernetes/gvisor"); len(g.Resources()) != 1 || g.Resources()[0].GetKind() != "RuntimeClass" {
		t.Errorf("gvisor base: %d resources", len(g.Resources()))
	}
	raw, err := os.ReadFile("kubernetes/rtsandbox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(raw)
	if err != nil {
		t.Fatalf("the shipped config: %v", err)
	}
	if !cfg.IsKubernetes() || cfg.Kubernetes.Namespace != "rtsandbox" || cfg.Kubernetes.BrokerAddress.String() != "10.96.0.10:7443" {
		t.Errorf("the shipped config's engine: %+v", cfg.Kubernetes)
	}
}

// TestKubernetesSessionsOverlay: the sessions overlay adds the channels'
// claim, mounts it in serve where its config's kubernetes.session.root
// says, and ships a config with a session profile on that claim.
func TestKubernetesSessionsOverlay(t *testing.T) {
	raw, err := os.ReadFile("kubernetes-sessions/rtsandbox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(raw)
	if err != nil {
		t.Fatalf("the sessions config: %v", err)
	}
	k := cfg.Kubernetes
	if !cfg.UsesSessions() || k.SessionClaim == "" {
		t.Fatalf("the sessions config has no session profile on a claim: %+v", k)
	}
	var claim, mounted bool
	for _, r := range build(t, "kubernetes-sessions").Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		switch r.GetKind() {
		case "PersistentVolumeClaim":
			claim = claim || r.GetName() == k.SessionClaim
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &d); err != nil {
				t.Fatal(err)
			}
			vols := map[string]string{}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					vols[v.Name] = v.PersistentVolumeClaim.ClaimName
				}
			}
			for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
				mounted = mounted || (m.MountPath == k.SessionRoot && vols[m.Name] == k.SessionClaim)
			}
		case "ConfigMap":
			if data, _, _ := unstructured.NestedString(obj, "data", "rtsandbox.yaml"); data != string(raw) {
				t.Errorf("the overlay's ConfigMap is not its config")
			}
		}
	}
	if !claim || !mounted {
		t.Errorf("claim %s in the overlay: %v; mounted in serve at %s: %v", k.SessionClaim, claim, k.SessionRoot, mounted)
	}
}

// TestKubernetesRoleIsExactlyTheEngines: the Role grants exactly the
// verbs the engine uses (kubernetes.Permissions with the warm pool; with
// the session engine's too in the sessions overlay, and only there), and
// the ClusterRole exactly doctor's reads (kubernetes.ClusterReads of the
// base's namespace): no more, no fewer. The ClusterRoleBinding names the
// base's ServiceAccount in the base's namespace.
func TestKubernetesRoleIsExactlyTheEngines(t *testing.T) {
	for dir, sessions := range map[string]bool{"kubernetes": false, "kubernetes-sessions": true} {
		t.Run(dir, func(t *testing.T) { roleIsExactlyTheEngines(t, dir, sessions) })
	}
}

func roleIsExactlyTheEngines(t *testing.T, dir string, sessions bool) {
	want := map[string][]rbacv1.PolicyRule{"Role": kubernetes.Permissions(true, sessions), "ClusterRole": kubernetes.ClusterReads("rtsandbox")}
	seen := map[string]bool{}
	for _, r := range build(t, dir).Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		switch r.GetKind() {
		case "Role", "ClusterRole":
			var role rbacv1.ClusterRole // a Role's fields are a subset
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &role); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want[r.GetKind()], role.Rules); diff != "" {
				t.Errorf("%s rules (-engine +deploy):\n%s", r.GetKind(), diff)
			}
			seen[r.GetKind()] = true
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &b); err != nil {
				t.Fatal(err)
			}
			if s := b.Subjects; len(s) != 1 || s[0].Kind != "ServiceAccount" || s[0].Name != "rtsandbox" || s[0].Namespace != "rtsandbox" {
				t.Errorf("ClusterRoleBinding subjects %+v", s)
			}
		}
	}
	if !seen["Role"] || !seen["ClusterRole"] {
		t.Fatalf("roles in the base: %v", seen)
	}
}

// TestKubernetesBaseAppliesOnACluster: the API server accepts every
// object of both bases (a server-side dry run, which validates each
// against its schema, in the namespace the base names).
func TestKubernetesBaseAppliesOnACluster(t *testing.T) {
	c := k8stest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "rtsandbox"}}}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	apply := func(u *unstructured.Unstructured, dryRun bool) {
		t.Helper()
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		opts := metav1.CreateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		ri := dyn.Resource(mapping.Resource)
		var rerr error
		if u.GetNamespace() != "" {
			_, rerr = ri.Namespace(u.GetNamespace()).Create(ctx, u, opts)
		} else {
			_, rerr = ri.Create(ctx, u, opts)
		}
		if rerr != nil && !apierrors.IsAlreadyExists(rerr) {
			t.Errorf("apply %s %s: %v", u.GetKind(), u.GetName(), rerr)
		}
	}
	apply(ns, false)
	for _, base := range []string{"kubernetes", "kubernetes/gvisor", "kubernetes-sessions"} {
		for _, r := range build(t, base).Resources() {
			obj, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			apply(&unstructured.Unstructured{Object: obj}, true)
		}
	}
}
