package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/subpath"
	"github.com/rtsandbox/rtsandbox/wire"
)

// EngineAnnotation carries, on a session Pod, the digest of the engine's
// own part of it (engineDigest): a Pod built under other engine options,
// or by another release's builder, reads as stale and is recreated.
// The spec's own digest is container.SpecLabel's annotation.
const EngineAnnotation = "rtsandbox.session-engine"

// staleEngine is the digest Status reports for a Pod whose engine digest
// is not the engine's: never a spec's digest, so SessionStatus.Stale
// holds and Current does not.
const staleEngine = "engine-changed"

// The session Pod's volumes: /tmp in memory of container.SessionTmpfs's
// size, and the operator's claim, mounted twice by subPath.
const (
	sessionTmpMB  = 512
	channelVolume = "channel"
)

// sessionGrace is the session Pod's termination grace period, in seconds,
// and the one its removal asks for. Not 0: a Pod deleted with no grace
// leaves the API at once while its worker may still run on its node,
// writing the workspace and polling the channel's broker beside the Pod
// that replaces it. With one, the API keeps the Pod until its node reports
// the worker stopped: "gone" means gone, as Docker's forced removal does.
const sessionGrace = 1

// SessionPodName is the Pod name of the session container name: name
// with each "_" (which the channel's segment of container.PrefixedSessionName
// may hold) made "-", a DNS-1123 subdomain. The mapping merges no two
// channels' names: their last 16 hex digits hash the installation and the
// channel, and differ.
func SessionPodName(name string) string { return strings.ReplaceAll(name, "_", "-") }

// SessionPod is the Pod of one channel's session worker under spec, in
// o's namespace, named SessionPodName(spec.Name): the same worker image
// with the command "session", running until removed (restartPolicy
// Always: Docker's unless-stopped), under the sealed Pod's seal. Its run
// directory (read-only, at /run/sandbox) and workspace (read-write, at
// /workspace) are mounted from o.SessionClaim by their paths below
// o.SessionRoot, where both must lie. Its labels are the installation's
// and the role's (container.RoleSession), which the workers'
// NetworkPolicy selects; the channel, the profile, the spec's digest and
// the engine's (EngineAnnotation), which need not fit a label value, are
// annotations. Errors wrap container.ErrInvalidSpec.
func SessionPod(spec container.SessionSpec, o Options) (*corev1.Pod, error) {
	o, err := o.checkSessions()
	if err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Installation != o.Installation {
		// The Pod would escape the installation's NetworkPolicy and reaper.
		return nil, fmt.Errorf("%w: installation %q is not the engine's %q", container.ErrInvalidSpec, spec.Installation, o.Installation)
	}
	name := SessionPodName(spec.Name)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("%w: Pod name %q: %s", container.ErrInvalidSpec, name, errs[0])
	}
	run, err := claimPath(o.SessionRoot, spec.RunDir, "run directory")
	if err != nil {
		return nil, err
	}
	ws, err := claimPath(o.SessionRoot, spec.WorkspaceDir, "workspace")
	if err != nil {
		return nil, err
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: o.Namespace,
			Labels: map[string]string{container.InstallationLabel: o.Installation, container.RoleLabel: container.RoleSession},
			Annotations: map[string]string{
				container.ChannelLabel: spec.Channel,
				container.ProfileLabel: spec.Profile,
				container.SpecLabel:    spec.Digest(),
				EngineAnnotation:       engineDigest(o),
			},
		},
		Spec: sessionPodSpec(spec, o, run, ws),
	}, nil
}

// claimPath is dir's path below root, the subPath of the claim that holds
// it: dir must lie strictly below root (fail closed: a directory the host
// does not see on the claim would be a directory the Pod does not get).
// Symbolic links on the volume are the host's to keep out; the kubelet
// refuses a subPath that resolves outside the volume.
func claimPath(root, dir, what string) (string, error) {
	rel, ok := subpath.Rel(root, dir)
	if !ok {
		return "", fmt.Errorf("%w: session %s %q is not below the session root %q", container.ErrInvalidSpec, what, dir, root)
	}
	return rel, nil
}

// sessionPodSpec is the PodSpec of a validated session spec whose run
// directory and workspace are run and ws on the claim: the one place the
// session profile becomes Kubernetes fields. What a Pod cannot express as
// Docker does is the cluster's, as for the sealed Pod: the PID limit is
// the kubelet's podPidsLimit (spec.Limits.PIDs has no Pod field), nofile
// is the runtime's default, and /tmp cannot be mounted noexec. The spec's
// log driver does not apply: the kubelet keeps the worker's log, within
// the ephemeral storage bound.
func sessionPodSpec(spec container.SessionSpec, o Options, run, ws string) corev1.PodSpec {
	ps := sealedBase(spec.UID, spec.GID, spec.Image, o.runtimeClass(spec.Runtime))
	ps.RestartPolicy = corev1.RestartPolicyAlways
	ps.TerminationGracePeriodSeconds = new(int64(sessionGrace))
	// No fsGroup: the kubelet would change the group of the whole claim,
	// every channel's directories and the host's, at each start. The host
	// hands the channel's directories to the worker's user itself.
	w := &ps.Containers[0]
	// The worker reaches the broker through the hello file the host
	// writes into the run directory, never a socket.
	w.Args = []string{container.SessionCommand, wire.SessionHelloArg}
	for _, kv := range spec.Env() {
		k, v, _ := strings.Cut(kv, "=")
		w.Env = append(w.Env, corev1.EnvVar{Name: k, Value: v})
	}
	l := spec.Limits
	w.Resources = workerResources(container.Limits{MemoryMB: l.MemoryMB, CPUs: l.CPUs, PIDs: l.PIDs}, o.EphemeralMB)
	w.VolumeMounts = []corev1.VolumeMount{
		{Name: "tmp", MountPath: tmpPath},
		{Name: channelVolume, MountPath: wire.SessionRunDir, SubPath: run, ReadOnly: true},
		{Name: channelVolume, MountPath: wire.SessionWorkspace, SubPath: ws},
	}
	ps.Volumes = []corev1.Volume{
		memoryVolume("tmp", sessionTmpMB),
		{Name: channelVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.SessionClaim},
		}},
	}
	return ps
}

// engineDigest is a short hash of the engine's own part of every session
// Pod it builds under o (checked): the options themselves (the claim, the
// root, the broker the workers reach, the runtime classes, the ephemeral
// bound, and any option added later) and the PodSpec a fixed reference
// spec gets, so that a change of either, an option or this package's
// builder in a later release, recreates each channel's Pod at its next
// start. SessionSpec.Digest covers the spec's part.
func engineDigest(o Options) string {
	ref := container.SessionSpec{Image: "reference", Profile: "reference", UID: 1, GID: 1}.WithDefaults()
	data, _ := json.Marshal(struct { // strings, numbers and API types: never fails
		Options Options
		Pod     corev1.PodSpec
	}{o, sessionPodSpec(ref, o, "run", "workspace")})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
