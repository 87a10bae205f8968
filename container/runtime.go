package container

// The OCI runtimes an engine may be asked to run a worker under
// (Spec.Runtime, SessionSpec.Runtime). runc is the engine's usual runtime:
// the worker's system calls reach the host kernel, filtered by the
// engine's seccomp profile. runsc is gVisor: an application kernel in user
// space answers them, so a kernel bug reachable from the worker no longer
// reaches the host's. The engine must have it registered with
// --network=none (docs/operations.md, "gVisor"): the sealed profile's "no
// network" is then also gVisor's, not only the engine's empty namespace.
const (
	RuntimeRunc  = "runc"
	RuntimeRunsc = "runsc"
)

// Runtimes lists the runtimes a spec may name, the default first.
func Runtimes() []string { return []string{RuntimeRunc, RuntimeRunsc} }

// ValidRuntime reports whether a spec may name r: "" (RuntimeRunc),
// RuntimeRunc or RuntimeRunsc. Anything else is refused, never passed to
// the engine: a runtime the engine knows under another name could run the
// worker without the sealed profile's guarantees.
func ValidRuntime(r string) bool { return r == "" || r == RuntimeRunc || r == RuntimeRunsc }

// EngineRuntime is the runtime an engine runs a spec naming r under: r, or
// RuntimeRunc for "". It is named explicitly in every request, so an
// engine whose own default is another runtime still runs runc.
func EngineRuntime(r string) string {
	if r == "" {
		return RuntimeRunc
	}
	return r
}
