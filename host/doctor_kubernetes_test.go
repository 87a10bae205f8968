package host

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/k8stest"
)

// kubeCfg is an engine: kubernetes config on the test cluster as the user
// of kubeconfig.
func kubeCfg(t *testing.T, kubeconfig, ns string, pool int) *config.Config {
	return &config.Config{StateDir: t.TempDir(), Engine: config.EngineKubernetes,
		Sandbox: config.Sandbox{Runtime: container.RuntimeRunsc},
		Kubernetes: &config.Kubernetes{Kubeconfig: kubeconfig, Namespace: ns, SealedPool: pool,
			BrokerListen: "127.0.0.1:0", BrokerAddress: netip.MustParseAddrPort("10.96.0.10:7443")}}
}

// byName indexes checks by their name.
func byName(checks []Check) map[string]Check {
	m := map[string]Check{}
	for _, c := range checks {
		m[c.name] = c
	}
	return m
}

// TestKubeChecks: doctor's cluster checks pass for an identity bound to
// deploy/kubernetes' Role on a cluster with agent-sandbox and the gVisor
// RuntimeClass; an identity without the Role fails rbac naming what it
// may not do; a missing RuntimeClass fails naming the fix.
func TestKubeChecks(t *testing.T) {
	c := k8stest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := c.Namespace(t)
	user := "serve-" + ns
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	var role rbacv1.Role
	readManifest(t, "role.yaml", &role)
	role.Namespace = ns
	rbac := c.Clientset.RbacV1()
	if _, err := rbac.Roles(ns).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rtsandbox", Namespace: ns},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: subject}
	if _, err := rbac.RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var reads rbacv1.ClusterRole
	readManifest(t, "clusterrole.yaml", &reads)
	reads.Name, reads.Rules[0].ResourceNames = "read-"+ns, []string{ns}
	if _, err := rbac.ClusterRoles().Create(ctx, &reads, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reads.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reads.Name}, Subjects: subject}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serve := c.AddUser(t, user)
	stranger := c.AddUser(t, "stranger-"+ns)

	if err := c.Clientset.NodeV1().RuntimeClasses().Delete(ctx, "gvisor", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	got := byName(kubeChecks(ctx, kubeCfg(t, serve, ns, 2)))
	for _, name := range []string{"kubernetes", "namespace", "rbac", "agent-sandbox"} {
		if got[name].status != statusOK {
			t.Errorf("%s: %v", name, got[name])
		}
	}
	if rc := got["runtime runsc"]; rc.status != statusFail || !strings.Contains(rc.fix, "RuntimeClass gvisor") {
		t.Errorf("runtime runsc without its RuntimeClass: %v", rc)
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}
	if _, err := c.Clientset.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if got := byName(kubeChecks(ctx, kubeCfg(t, serve, ns, 2))); got["runtime runsc"].status != statusOK {
		t.Errorf("runtime runsc with its RuntimeClass: %v", got["runtime runsc"])
	}
	denied := byName(kubeChecks(ctx, kubeCfg(t, stranger, ns, 0)))
	if r := denied["rbac"]; r.status != statusFail || !strings.Contains(r.msg, "create pods") || !strings.Contains(r.msg, "create pods/attach") {
		t.Errorf("rbac of an identity without the Role: %v", r)
	}
	if n := denied["namespace"]; n.status != statusWarn || n.fix != readFix {
		t.Errorf("namespace of an identity that may not read it: %v", n)
	}
}

// readManifest decodes one file of deploy/kubernetes, strictly.
func readManifest(t *testing.T, name string, into any) {
	t.Helper()
	raw, err := os.ReadFile("../deploy/kubernetes/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestKubeClaimCheck: doctor wants the claim of the channels' directories
// to exist and be bound, and warns when a channel's Pod could not move
// to another node with it (not ReadWriteMany).
func TestKubeClaimCheck(t *testing.T) {
	c := k8stest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := c.Namespace(t)
	k := &config.Kubernetes{Namespace: ns, SessionClaim: "channels", SessionRoot: "/srv/channels"}
	if got := claimCheck(ctx, c.Clientset.CoreV1(), k); got.status != statusFail || !strings.Contains(got.msg, "does not exist") {
		t.Errorf("no claim: %v", got)
	}
	pvcs := c.Clientset.CoreV1().PersistentVolumeClaims(ns)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "channels"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	pvc, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := claimCheck(ctx, c.Clientset.CoreV1(), k); got.status != statusFail || !strings.Contains(got.msg, "not Bound") {
		t.Errorf("a pending claim: %v", got)
	}
	// No volume controller runs in the tier: the test binds it.
	pvc.Status.Phase = corev1.ClaimBound
	if _, err = pvcs.UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := claimCheck(ctx, c.Clientset.CoreV1(), k); got.status != statusWarn || !strings.Contains(got.msg, "not ReadWriteMany") {
		t.Errorf("a bound ReadWriteOnce claim: %v", got)
	}
	if err := pvcs.Delete(ctx, "channels", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rwx := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "channels-rwx"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if rwx, err = pvcs.Create(ctx, rwx, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rwx.Status.Phase = corev1.ClaimBound
	if _, err = pvcs.UpdateStatus(ctx, rwx, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.SessionClaim = "channels-rwx"
	if got := claimCheck(ctx, c.Clientset.CoreV1(), k); got.status != statusOK {
		t.Errorf("a bound ReadWriteMany claim: %v", got)
	}
}
