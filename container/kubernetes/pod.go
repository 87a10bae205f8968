package kubernetes

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rtsandbox/rtsandbox/container"
)

// WorkerContainer is the name of the worker's container in every Pod.
const WorkerContainer = "worker"

// SealedWorkerArg is the sealed worker's argument on Kubernetes
// (cmd/rtsandbox-worker): read the broker hello before the turn.
const SealedWorkerArg = "--broker-from-stdin"

// Where the worker's memory-backed volumes are mounted, and /tmp's size
// (container.Spec: a 64 MiB /tmp, HOME under it).
const (
	tmpPath    = "/tmp"
	workPath   = "/workspace"
	tmpMB      = 64
	homeEnvVal = "/tmp/home"
)

// SealedPod is the Pod of one sealed worker under spec's profile, in
// o's namespace, named spec.Name. The differences from Docker's profile
// that a Pod cannot express are the cluster's to close, and
// docs/kubernetes.md names them: the PID limit is the kubelet's
// podPidsLimit, nofile is the runtime's default, and an emptyDir cannot be
// mounted noexec. Errors wrap container.ErrInvalidSpec.
func SealedPod(spec container.Spec, o Options) (*corev1.Pod, error) {
	o, err := o.check()
	if err != nil {
		return nil, err
	}
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: o.Namespace, Labels: maps.Clone(spec.Labels)},
		Spec:       sealedPodSpec(spec, o),
	}, nil
}

// checkSpec is spec.Validate plus what Kubernetes asks of names: a Pod
// name is a DNS-1123 subdomain, and rtsandbox's names are DNS-1123 labels
// (no "_" or "."), and every label a valid label.
func checkSpec(spec container.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Label(spec.Name); len(errs) > 0 {
		return fmt.Errorf("%w: Pod name %q: %s", container.ErrInvalidSpec, spec.Name, errs[0])
	}
	for k, v := range spec.Labels {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			return fmt.Errorf("%w: label %q: %s", container.ErrInvalidSpec, k, errs[0])
		}
	}
	return nil
}

// sealedPodSpec is the hardened PodSpec of a sealed worker: the one place
// the sealed profile becomes Kubernetes fields.
func sealedPodSpec(spec container.Spec, o Options) corev1.PodSpec {
	ps := sealedBase(spec.UID, spec.GID, spec.Image, o.runtimeClass(spec.Runtime))
	gid := int64(spec.GID)
	ps.RestartPolicy = corev1.RestartPolicyNever
	ps.TerminationGracePeriodSeconds = new(int64(0))
	ps.SecurityContext.FSGroup = &gid
	w := &ps.Containers[0]
	// The worker reads the broker's address and its token from its stdin
	// (wire.BrokerHello): it shares no socket with the host.
	w.Args = []string{SealedWorkerArg}
	// The turn (and the broker's token before it) arrive on stdin through
	// an attach, once: nothing of a turn is in the Pod's spec.
	w.Stdin, w.StdinOnce = true, true
	w.Env = []corev1.EnvVar{{Name: "HOME", Value: homeEnvVal}}
	w.Resources = workerResources(spec.Limits, o.EphemeralMB)
	w.VolumeMounts = []corev1.VolumeMount{
		{Name: "tmp", MountPath: tmpPath},
		{Name: "workspace", MountPath: workPath},
	}
	ps.Volumes = []corev1.Volume{
		memoryVolume("tmp", tmpMB),
		memoryVolume("workspace", spec.Limits.WorkspaceMB),
	}
	return ps
}

// sealedBase is the seal every worker Pod shares, sealed or session: no
// service-account token, no service links, no host namespaces, no shared
// process namespace, the runtime's RuntimeClass, a non-root user under
// seccomp RuntimeDefault, and one worker container running image (never
// pulled) under sealedContainer. The caller adds the restart policy, the
// grace period, the worker's arguments, environment, resources and mounts,
// and the volumes.
func sealedBase(uid, gid int, image string, runtimeClass *string) corev1.PodSpec {
	u, g := int64(uid), int64(gid)
	return corev1.PodSpec{
		AutomountServiceAccountToken: new(false),
		EnableServiceLinks:           new(false),
		HostNetwork:                  false,
		HostPID:                      false,
		HostIPC:                      false,
		ShareProcessNamespace:        new(false),
		RuntimeClassName:             runtimeClass,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser: &u, RunAsGroup: &g, RunAsNonRoot: new(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:                     WorkerContainer,
			Image:                    image,
			ImagePullPolicy:          corev1.PullNever,
			SecurityContext:          sealedContainer(u, g),
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}},
	}
}

// sealedContainer is the worker container's security context: the user
// again, a read-only root, every capability dropped, no privilege
// escalation, seccomp RuntimeDefault.
func sealedContainer(uid, gid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: new(true),
		ReadOnlyRootFilesystem:   new(true),
		AllowPrivilegeEscalation: new(false),
		Privileged:               new(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// workerResources are limits equal to requests (the Guaranteed QoS class:
// a worker is never the first evicted for another's burst), and a bound
// on ephemeral storage.
func workerResources(l container.Limits, ephemeralMB int) corev1.ResourceRequirements {
	list := corev1.ResourceList{
		corev1.ResourceMemory:           *resource.NewQuantity(l.MemoryBytes(), resource.BinarySI),
		corev1.ResourceCPU:              *resource.NewMilliQuantity(max(1, l.NanoCPUs()/1e6), resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(ephemeralMB)<<20, resource.BinarySI),
	}
	return corev1.ResourceRequirements{Limits: list, Requests: list.DeepCopy()}
}

// memoryVolume is a tmpfs of mb MiB: it counts against the Pod's memory
// and dies with it.
func memoryVolume(name string, mb int) corev1.Volume {
	size := resource.NewQuantity(int64(mb)<<20, resource.BinarySI)
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size},
	}}
}
