package kubernetes

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rtsandbox/rtsandbox/container"
)

// Options are what the engine needs beyond a spec: where its objects live
// and what its workers may reach.
type Options struct {
	// Namespace holds every object of the installation: a DNS-1123 label.
	Namespace string
	// Installation is the id every object is labelled with
	// (container.InstallationLabel).
	Installation string
	// RuntimeClasses names the RuntimeClass a spec's runtime maps to.
	// Unset entries take DefaultRuntimeClasses; "" means the cluster's
	// default handler (no runtimeClassName).
	RuntimeClasses map[string]string
	// Broker is the broker's listener as workers reach it: the only
	// destination the workers' NetworkPolicy allows (WorkerPolicy).
	Broker netip.AddrPort
	// ListenPort is the port the broker listens on where it runs, when
	// workers reach it through an address that forwards (a Service's
	// ClusterIP to serve's Pods, RoleServe, on their targetPort); 0 means
	// Broker's port.
	ListenPort uint16
	// EphemeralMB bounds what a worker may write outside its memory-backed
	// volumes (its logs, mostly), in MiB; 0 means DefaultEphemeralMB.
	EphemeralMB int

	// SessionClaim names the operator's PersistentVolumeClaim (a DNS-1123
	// subdomain) that holds the session channels' run directories and
	// workspaces, shared with the host; SessionRoot is the absolute, clean
	// path where the host (rtsandbox serve) sees that volume's root. A
	// channel's Pod mounts its two directories from the claim by their
	// paths below SessionRoot. Only the session engine needs them
	// (NewSessions refuses them missing).
	SessionClaim string
	SessionRoot  string
}

// DefaultRuntimeClasses maps runc to the cluster's default handler and
// runsc to the RuntimeClass named "gvisor" (deploy/kubernetes ships it).
func DefaultRuntimeClasses() map[string]string {
	return map[string]string{container.RuntimeRunc: "", container.RuntimeRunsc: "gvisor"}
}

// DefaultEphemeralMB bounds a worker's ephemeral storage: its root is
// read-only and its scratch space is memory, so what remains is the
// container log the kubelet keeps.
const DefaultEphemeralMB = 64

// check validates o and fills its defaults. Errors wrap
// container.ErrInvalidSpec and name the field.
func (o Options) check() (Options, error) {
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return o, fmt.Errorf("%w: namespace %q: %s", container.ErrInvalidSpec, o.Namespace, errs[0])
	}
	if !container.ValidInstallation(o.Installation) {
		return o, fmt.Errorf("%w: installation %q", container.ErrInvalidSpec, o.Installation)
	}
	if !o.Broker.IsValid() || o.Broker.Port() == 0 {
		return o, fmt.Errorf("%w: broker address %q: want an IP address and a port", container.ErrInvalidSpec, o.Broker)
	}
	classes := DefaultRuntimeClasses()
	for rt, class := range o.RuntimeClasses {
		if !container.ValidRuntime(rt) || rt == "" {
			return o, fmt.Errorf("%w: runtime class for unknown runtime %q", container.ErrInvalidSpec, rt)
		}
		if errs := validation.IsDNS1123Subdomain(class); class != "" && len(errs) > 0 {
			return o, fmt.Errorf("%w: runtime class %q for %s: %s", container.ErrInvalidSpec, class, rt, errs[0])
		}
		classes[rt] = class
	}
	o.RuntimeClasses = classes
	if o.ListenPort == 0 {
		o.ListenPort = o.Broker.Port()
	}
	if o.EphemeralMB < 0 {
		return o, fmt.Errorf("%w: ephemeral storage %d MiB", container.ErrInvalidSpec, o.EphemeralMB)
	}
	if o.EphemeralMB == 0 {
		o.EphemeralMB = DefaultEphemeralMB
	}
	return o, nil
}

// checkSessions is check plus the session engine's fields. Errors wrap
// container.ErrInvalidSpec and name the field.
func (o Options) checkSessions() (Options, error) {
	o, err := o.check()
	if err != nil {
		return o, err
	}
	if errs := validation.IsDNS1123Subdomain(o.SessionClaim); len(errs) > 0 {
		return o, fmt.Errorf("%w: session claim %q: %s", container.ErrInvalidSpec, o.SessionClaim, errs[0])
	}
	if !filepath.IsAbs(o.SessionRoot) || filepath.Clean(o.SessionRoot) != o.SessionRoot || o.SessionRoot == "/" {
		return o, fmt.Errorf("%w: session root %q: want an absolute, clean path other than /", container.ErrInvalidSpec, o.SessionRoot)
	}
	return o, nil
}

// runtimeClass is the RuntimeClass name for a spec's runtime, nil for the
// default handler.
func (o Options) runtimeClass(runtime string) *string {
	if runtime == "" {
		runtime = container.RuntimeRunc
	}
	if c := o.RuntimeClasses[runtime]; c != "" {
		return &c
	}
	return nil
}
