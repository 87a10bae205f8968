package kubernetes

import (
	"fmt"
	"net/netip"

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
	// destination the workers' NetworkPolicy allows.
	Broker netip.AddrPort
	// EphemeralMB bounds what a worker may write outside its memory-backed
	// volumes (its logs, mostly), in MiB; 0 means DefaultEphemeralMB.
	EphemeralMB int
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
	if o.EphemeralMB < 0 {
		return o, fmt.Errorf("%w: ephemeral storage %d MiB", container.ErrInvalidSpec, o.EphemeralMB)
	}
	if o.EphemeralMB == 0 {
		o.EphemeralMB = DefaultEphemeralMB
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
