package kubernetes

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rtsandbox/rtsandbox/container"
)

func testOptions() Options {
	return Options{Namespace: "rtsandbox", Installation: "test-inst", Broker: netip.MustParseAddrPort("10.0.0.5:8443")}
}

func testSpec(t testing.TB) container.Spec {
	t.Helper()
	labels, err := container.TurnLabels("test-inst")
	if err != nil {
		t.Fatal(err)
	}
	return container.Spec{
		Name: container.PoolName(), Image: "rtsandbox-worker:latest", UID: 1000, GID: 1001,
		RunDir: "/srv/run/turn-1", Limits: container.Limits{MemoryMB: 512, CPUs: 1.5, PIDs: 64, WorkspaceMB: 32},
		Labels: labels,
	}
}

// TestSealedPodHardening: the sealed profile as Pod fields, whole: a
// field added, dropped or loosened anywhere shows in the diff.
func TestSealedPodHardening(t *testing.T) {
	spec := testSpec(t)
	pod, err := SealedPod(spec, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := int64(1000), int64(1001)
	mem := *resource.NewQuantity(512<<20, resource.BinarySI)
	limits := corev1.ResourceList{
		corev1.ResourceMemory: mem, corev1.ResourceCPU: *resource.NewMilliQuantity(1500, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(DefaultEphemeralMB<<20, resource.BinarySI),
	}
	want := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: new(false), EnableServiceLinks: new(false),
		ShareProcessNamespace: new(false), TerminationGracePeriodSeconds: new(int64(0)),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: new(true), FSGroup: &gid,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name: WorkerContainer, Image: "rtsandbox-worker:latest", ImagePullPolicy: corev1.PullNever,
			Args:  []string{SealedWorkerArg},
			Stdin: true, StdinOnce: true, Env: []corev1.EnvVar{{Name: "HOME", Value: "/tmp/home"}},
			Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits},
			SecurityContext: &corev1.SecurityContext{
				RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: new(true), ReadOnlyRootFilesystem: new(true),
				AllowPrivilegeEscalation: new(false), Privileged: new(false),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			VolumeMounts:             []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "workspace", MountPath: "/workspace"}},
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
		Volumes: []corev1.Volume{memoryVolume("tmp", 64), memoryVolume("workspace", 32)},
	}
	if diff := cmp.Diff(want, pod.Spec); diff != "" {
		t.Errorf("sealed PodSpec (-want +got):\n%s", diff)
	}
	if pod.Name != spec.Name || pod.Namespace != "rtsandbox" || !cmp.Equal(pod.Labels, spec.Labels) || len(pod.Annotations) != 0 {
		t.Errorf("pod meta = %+v; want the spec's name and labels in the namespace, no annotations", pod.ObjectMeta)
	}
	if got := pod.Spec.Volumes[1].EmptyDir; got.Medium != corev1.StorageMediumMemory || got.SizeLimit.Value() != 32<<20 {
		t.Errorf("workspace volume = %+v; want memory of 32 MiB", got)
	}
}

// TestPodRuntimeClass: both Pod builders, sealed and session, map a
// spec's runtime to its RuntimeClass the same way.
func TestPodRuntimeClass(t *testing.T) {
	builders := map[string]func(runtime string, classes map[string]string) (*corev1.Pod, error){
		"sealed": func(runtime string, classes map[string]string) (*corev1.Pod, error) {
			spec, o := testSpec(t), testOptions()
			spec.Runtime, o.RuntimeClasses = runtime, classes
			return SealedPod(spec, o)
		},
		"session": func(runtime string, classes map[string]string) (*corev1.Pod, error) {
			spec, o := sessionSpec("/srv/channels"), sessionOptions()
			spec.Runtime, o.RuntimeClasses = runtime, classes
			return SessionPod(spec, o)
		},
	}
	tests := []struct {
		name, runtime string
		classes       map[string]string
		want          *string
	}{
		{"runc is the default handler", "", nil, nil},
		{"runc named", container.RuntimeRunc, nil, nil},
		{"runsc is gvisor", container.RuntimeRunsc, nil, new("gvisor")},
		{"runsc mapped", container.RuntimeRunsc, map[string]string{container.RuntimeRunsc: "gvisor-ptrace"}, new("gvisor-ptrace")},
		{"runc mapped", container.RuntimeRunc, map[string]string{container.RuntimeRunc: "kata"}, new("kata")},
	}
	for kind, build := range builders {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				pod, err := build(tt.runtime, tt.classes)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, pod.Spec.RuntimeClassName); diff != "" {
					t.Errorf("runtimeClassName (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// Fail closed: what a Pod cannot carry, or an engine setting that is not
// one, is refused before anything reaches the API.
func TestSealedPodRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(*container.Spec, *Options)
	}{
		{"name with underscore", func(s *container.Spec, _ *Options) { s.Name = "rtsandbox_a" }},
		{"name with dot", func(s *container.Spec, _ *Options) { s.Name = "rtsandbox.a" }},
		{"root user", func(s *container.Spec, _ *Options) { s.UID = 0 }},
		{"label value not a label", func(s *container.Spec, _ *Options) { s.Labels["rtsandbox.channel"] = "a b" }},
		{"unknown runtime", func(s *container.Spec, _ *Options) { s.Runtime = "kata" }},
		{"namespace", func(_ *container.Spec, o *Options) { o.Namespace = "Not_A_Namespace" }},
		{"installation", func(_ *container.Spec, o *Options) { o.Installation = "" }},
		{"no broker", func(_ *container.Spec, o *Options) { o.Broker = netip.AddrPort{} }},
		{"broker port 0", func(_ *container.Spec, o *Options) { o.Broker = netip.MustParseAddrPort("10.0.0.5:0") }},
		{"class for unknown runtime", func(_ *container.Spec, o *Options) { o.RuntimeClasses = map[string]string{"kata": "kata"} }},
		{"class not a name", func(_ *container.Spec, o *Options) {
			o.RuntimeClasses = map[string]string{container.RuntimeRunsc: "G Visor"}
		}},
		{"negative ephemeral", func(_ *container.Spec, o *Options) { o.EphemeralMB = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, o := testSpec(t), testOptions()
			tt.edit(&spec, &o)
			if _, err := SealedPod(spec, o); !errors.Is(err, container.ErrInvalidSpec) {
				t.Errorf("SealedPod = %v; want ErrInvalidSpec", err)
			}
		})
	}
}

// TestWorkerPolicyOnlyBroker: no ingress, egress only to the broker: its
// address and port, and the namespace's serve Pods on the port the broker
// listens on (a Service's targetPort, or the address's port when unset),
// over both roles of the installation's workers.
func TestWorkerPolicyOnlyBroker(t *testing.T) {
	for _, tt := range []struct {
		broker           string
		listen, wantPort uint16
	}{{"10.0.0.5:8443", 0, 8443}, {"[fd00::5]:8443", 0, 8443}, {"10.96.0.10:7443", 9443, 9443}} {
		o := testOptions()
		o.Broker, o.ListenPort = netip.MustParseAddrPort(tt.broker), tt.listen
		p, err := WorkerPolicy(o)
		if err != nil {
			t.Fatal(err)
		}
		s := p.Spec
		if len(s.PolicyTypes) != 2 || s.Ingress == nil || len(s.Ingress) != 0 || len(s.Egress) != 2 {
			t.Fatalf("policy %s = %+v; want both types, no ingress rule, two egress rules", tt.broker, s)
		}
		tcp := func(port int) []networkingv1.NetworkPolicyPort {
			p := intstr.FromInt(port)
			return []networkingv1.NetworkPolicyPort{{Protocol: new(corev1.ProtocolTCP), Port: &p}}
		}
		want := []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(o.Broker.Addr(), o.Broker.Addr().BitLen()).String()}}},
			Ports: tcp(int(o.Broker.Port())),
		}, {
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{container.RoleLabel: RoleServe}}}},
			Ports: tcp(int(tt.wantPort)),
		}}
		if diff := cmp.Diff(want, s.Egress); diff != "" {
			t.Errorf("egress %s listening on %d (-want +got):\n%s", tt.broker, tt.listen, diff)
		}
		sel := s.PodSelector
		if sel.MatchLabels[container.InstallationLabel] != "test-inst" || len(sel.MatchExpressions) != 1 ||
			!cmp.Equal(sel.MatchExpressions[0].Values, []string{container.RoleTurn, container.RoleSession}) {
			t.Errorf("selector = %+v; want the installation's turn and session workers", sel)
		}
	}
}

// TestSealedWarmPool: the template is the sealed Pod, claims can add
// nothing, and a claim names only the pool.
func TestSealedWarmPool(t *testing.T) {
	spec := testSpec(t)
	w, err := SealedWarmPool("sealed", 3, spec, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	pod, _ := SealedPod(spec, testOptions())
	if diff := cmp.Diff(pod.Spec, w.Template.Spec.PodTemplate.Spec); diff != "" {
		t.Errorf("template pod spec (-sealed pod +template):\n%s", diff)
	}
	ts := w.Template.Spec
	if ts.EnvVarsInjectionPolicy != "Disallowed" || ts.VolumeClaimTemplatesPolicy != "Disallowed" || ts.NetworkPolicyManagement != "Unmanaged" {
		t.Errorf("template policies = %+v", ts)
	}
	if *w.Pool.Spec.Replicas != 3 || w.Pool.Spec.TemplateRef.Name != "sealed" || w.Pool.Namespace != "rtsandbox" {
		t.Errorf("pool = %+v", w.Pool)
	}
	c, err := w.Claim("rtsandbox-warm-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.WarmPoolRef.Name != "sealed" || len(c.Spec.Env) != 0 || len(c.Spec.VolumeClaimTemplates) != 0 ||
		c.Spec.Lifecycle.ShutdownPolicy != "Delete" || c.Labels[container.InstallationLabel] != "test-inst" {
		t.Errorf("claim = %+v", c)
	}
	for _, bad := range []string{"Bad_Name", ""} {
		if _, err := SealedWarmPool(bad, 1, spec, testOptions()); !errors.Is(err, container.ErrInvalidSpec) {
			t.Errorf("SealedWarmPool(%q) = %v; want ErrInvalidSpec", bad, err)
		}
		if _, err := w.Claim(bad); !errors.Is(err, container.ErrInvalidSpec) {
			t.Errorf("Claim(%q) = %v; want ErrInvalidSpec", bad, err)
		}
	}
}
