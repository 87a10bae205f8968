package kubernetes

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rtsandbox/rtsandbox/container"
)

// sessionOptions are testOptions with the channels' claim, seen by the
// host at /srv/channels.
func sessionOptions() Options {
	o := testOptions()
	o.SessionClaim, o.SessionRoot = "rtsandbox-channels", "/srv/channels"
	return o
}

// sessionSpec is a channel's spec whose directories lie on root's claim.
func sessionSpec(root string) container.SessionSpec {
	channel := "discord:Guild_42/general"
	return container.SessionSpec{
		Name: container.SessionName("test-inst", channel), Image: "rtsandbox-worker:latest",
		Installation: "test-inst", Channel: channel, Profile: "studio", UID: 1000, GID: 1001,
		RunDir: root + "/party/run/c1", WorkspaceDir: root + "/party/workspaces/c1",
		Limits: container.SessionLimits{MemoryMB: 1024, CPUs: 0.5, PIDs: 128},
	}
}

// TestSessionPodSeal: the session profile as Pod fields, whole: the seal
// the sealed Pod has, restart Always, the command "session", exactly the
// spec's environment, the limits, /tmp in memory, and the claim mounted
// twice by subPath (the run directory read-only).
func TestSessionPodSeal(t *testing.T) {
	spec, o := sessionSpec("/srv/channels"), sessionOptions()
	pod, err := SessionPod(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := int64(1000), int64(1001)
	limits := corev1.ResourceList{
		corev1.ResourceMemory:           *resource.NewQuantity(1024<<20, resource.BinarySI),
		corev1.ResourceCPU:              *resource.NewMilliQuantity(500, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(DefaultEphemeralMB<<20, resource.BinarySI),
	}
	var env []corev1.EnvVar
	for _, kv := range spec.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	want := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyAlways, AutomountServiceAccountToken: new(false), EnableServiceLinks: new(false),
		ShareProcessNamespace: new(false), TerminationGracePeriodSeconds: new(int64(1)),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: new(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name: WorkerContainer, Image: "rtsandbox-worker:latest", ImagePullPolicy: corev1.PullNever,
			Args: []string{"session", "--broker-from-file"}, Env: env,
			Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits},
			SecurityContext: &corev1.SecurityContext{
				RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: new(true), ReadOnlyRootFilesystem: new(true),
				AllowPrivilegeEscalation: new(false), Privileged: new(false),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "tmp", MountPath: "/tmp"},
				{Name: "channel", MountPath: "/run/sandbox", SubPath: "party/run/c1", ReadOnly: true},
				{Name: "channel", MountPath: "/workspace", SubPath: "party/workspaces/c1"},
			},
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
		Volumes: []corev1.Volume{
			memoryVolume("tmp", 512),
			{Name: "channel", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "rtsandbox-channels"},
			}},
		},
	}
	if diff := cmp.Diff(want, pod.Spec); diff != "" {
		t.Errorf("session PodSpec (-want +got):\n%s", diff)
	}
	if got := env; len(got) != 4 || got[3].Name != "CLAUDE_CODE_OAUTH_TOKEN" || strings.Contains(got[3].Value, "sk-") {
		t.Errorf("env %v: want the spec's four variables, the token a dummy", got)
	}
	if tmp := pod.Spec.Volumes[0].EmptyDir; tmp.Medium != corev1.StorageMediumMemory || tmp.SizeLimit.Value() != 512<<20 {
		t.Errorf("/tmp = %+v; want memory of 512 MiB", tmp)
	}
}

// TestSessionPodMeta: the name is the container name made a DNS-1123
// subdomain, the labels are exactly the installation's and the role's
// (what the workers' NetworkPolicy and the reaper select), and the
// annotations carry the channel, the profile and both digests.
func TestSessionPodMeta(t *testing.T) {
	spec, o := sessionSpec("/srv/channels"), sessionOptions()
	if !strings.Contains(spec.Name, "_") {
		t.Fatalf("the test's name %q should hold an underscore", spec.Name)
	}
	pod, err := SessionPod(spec, o)
	if err != nil {
		t.Fatal(err)
	}
	wantName := strings.ReplaceAll(spec.Name, "_", "-")
	if pod.Name != wantName || pod.Namespace != "rtsandbox" || len(validation.IsDNS1123Subdomain(pod.Name)) > 0 {
		t.Errorf("pod %s/%s; want rtsandbox/%s, a DNS-1123 subdomain", pod.Namespace, pod.Name, wantName)
	}
	wantLabels := map[string]string{container.InstallationLabel: "test-inst", container.RoleLabel: container.RoleSession}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	sel := workerSelector("test-inst")
	if sel.MatchLabels[container.InstallationLabel] != pod.Labels[container.InstallationLabel] ||
		!strings.Contains(strings.Join(sel.MatchExpressions[0].Values, ","), pod.Labels[container.RoleLabel]) {
		t.Errorf("the workers' NetworkPolicy selector %+v misses the session Pod's labels %v", sel, pod.Labels)
	}
	wantAnn := map[string]string{
		container.ChannelLabel: spec.Channel, container.ProfileLabel: "studio",
		container.SpecLabel: spec.Digest(), EngineAnnotation: engineDigest(mustCheck(t, o)),
	}
	if diff := cmp.Diff(wantAnn, pod.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
}

func mustCheck(t *testing.T, o Options) Options {
	t.Helper()
	o, err := o.checkSessions()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestSessionPodName: "_" becomes "-", nothing else changes, and the
// names of two channels stay apart.
func TestSessionPodName(t *testing.T) {
	tests := []struct{ name, want string }{
		{"rtsandbox-session-discord_1_2-0123456789abcdef", "rtsandbox-session-discord-1-2-0123456789abcdef"},
		{"rtsandbox-session-_a-0123456789abcdef", "rtsandbox-session--a-0123456789abcdef"},
		{"plain-name", "plain-name"},
	}
	for _, tt := range tests {
		if got := SessionPodName(tt.name); got != tt.want {
			t.Errorf("SessionPodName(%q) = %q; want %q", tt.name, got, tt.want)
		}
	}
	a, b := container.SessionName("i", "a:b"), container.SessionName("i", "a_b")
	if SessionPodName(a) == SessionPodName(b) {
		t.Errorf("channels a:b and a_b share Pod name %s", SessionPodName(a))
	}
}

// Fail closed: a directory the claim does not hold, an engine without
// its claim or root, a spec of another installation or one the spec rules
// refuse: refused before anything reaches the API.
func TestSessionPodRefusals(t *testing.T) {
	tests := []struct {
		name string
		edit func(*container.SessionSpec, *Options)
	}{
		{"run dir outside the root", func(s *container.SessionSpec, _ *Options) { s.RunDir = "/srv/other/run" }},
		{"workspace outside the root", func(s *container.SessionSpec, _ *Options) { s.WorkspaceDir = "/var/lib/ws" }},
		{"root's sibling with its prefix", func(s *container.SessionSpec, _ *Options) { s.WorkspaceDir = "/srv/channels-x/ws" }},
		{"run dir is the root", func(s *container.SessionSpec, _ *Options) { s.RunDir = "/srv/channels" }},
		{"run dir above the root", func(s *container.SessionSpec, _ *Options) { s.RunDir = "/srv" }},
		{"dot-dot", func(s *container.SessionSpec, _ *Options) { s.RunDir = "/srv/channels/../etc" }},
		{"relative", func(s *container.SessionSpec, _ *Options) { s.RunDir = "srv/channels/run" }},
		{"no claim", func(_ *container.SessionSpec, o *Options) { o.SessionClaim = "" }},
		{"claim not a name", func(_ *container.SessionSpec, o *Options) { o.SessionClaim = "Channels_PVC" }},
		{"no root", func(_ *container.SessionSpec, o *Options) { o.SessionRoot = "" }},
		{"relative root", func(_ *container.SessionSpec, o *Options) { o.SessionRoot = "srv/channels" }},
		{"unclean root", func(_ *container.SessionSpec, o *Options) { o.SessionRoot = "/srv/channels/" }},
		{"root is /", func(_ *container.SessionSpec, o *Options) { o.SessionRoot = "/" }},
		{"another installation", func(s *container.SessionSpec, _ *Options) { s.Installation = "other-inst" }},
		{"root user", func(s *container.SessionSpec, _ *Options) { s.UID = 0 }},
		{"nested dirs", func(s *container.SessionSpec, _ *Options) { s.WorkspaceDir = s.RunDir + "/ws" }},
		{"name not a subdomain", func(s *container.SessionSpec, _ *Options) { s.Name = "rtsandbox-session-a._b-0123456789abcdef" }},
		{"unknown runtime", func(s *container.SessionSpec, _ *Options) { s.Runtime = "kata" }},
		{"no broker", func(_ *container.SessionSpec, o *Options) { o.Broker = netip.AddrPort{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, o := sessionSpec("/srv/channels"), sessionOptions()
			tt.edit(&spec, &o)
			if pod, err := SessionPod(spec, o); !errors.Is(err, container.ErrInvalidSpec) {
				t.Errorf("SessionPod = %v, %v; want ErrInvalidSpec", pod, err)
			}
		})
	}
	o := sessionOptions()
	o.SessionClaim = ""
	if _, err := NewSessions(nil, o); !errors.Is(err, container.ErrInvalidSpec) || !strings.Contains(err.Error(), "session claim") {
		t.Errorf("NewSessions without a claim = %v; want ErrInvalidSpec naming the claim", err)
	}
	o = sessionOptions()
	o.SessionRoot = "relative"
	if _, err := NewSessions(nil, o); !errors.Is(err, container.ErrInvalidSpec) || !strings.Contains(err.Error(), "session root") {
		t.Errorf("NewSessions with a relative root = %v; want ErrInvalidSpec naming the root", err)
	}
}

// TestSessionEngineDigest: each engine option a session Pod depends on
// changes the engine's digest (so Status reads the Pod as stale); the
// defaults spelt out do not.
func TestSessionEngineDigest(t *testing.T) {
	base := engineDigest(mustCheck(t, sessionOptions()))
	changes := map[string]func(*Options){
		"claim":         func(o *Options) { o.SessionClaim = "other-claim" },
		"root":          func(o *Options) { o.SessionRoot = "/srv/elsewhere" },
		"broker":        func(o *Options) { o.Broker = netip.MustParseAddrPort("10.0.0.6:8443") },
		"runtime class": func(o *Options) { o.RuntimeClasses = map[string]string{container.RuntimeRunsc: "gvisor-kvm"} },
		"ephemeral":     func(o *Options) { o.EphemeralMB = 128 },
	}
	for name, change := range changes {
		o := sessionOptions()
		change(&o)
		if engineDigest(mustCheck(t, o)) == base {
			t.Errorf("a change of the %s keeps the engine digest", name)
		}
	}
	o := sessionOptions()
	o.EphemeralMB, o.RuntimeClasses = DefaultEphemeralMB, DefaultRuntimeClasses()
	if engineDigest(mustCheck(t, o)) != base {
		t.Error("the defaults spelt out change the engine digest")
	}
}

// TestClaimPath: a directory's subPath on the claim, strictly below the
// root, or a refusal, whatever the spec's own rules let through.
func TestClaimPath(t *testing.T) {
	tests := []struct{ dir, want string }{
		{"/srv/channels/a", "a"},
		{"/srv/channels/party/run/c1", "party/run/c1"},
		{"/srv/channels", ""},
		{"/srv", ""},
		{"/srv/channelsx/a", ""},
		{"/srv/channels/../etc", ""},
		{"/srv/channels/a/../../etc", ""},
		{"/srv/channels/a/", ""},
		{"channels/a", ""},
		{"/etc", ""},
	}
	for _, tt := range tests {
		got, err := claimPath("/srv/channels", tt.dir, "run directory")
		if got != tt.want || (tt.want == "") != errors.Is(err, container.ErrInvalidSpec) {
			t.Errorf("claimPath(%q) = %q, %v; want %q", tt.dir, got, err, tt.want)
		}
	}
}
