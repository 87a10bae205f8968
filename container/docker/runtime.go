package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// Refusals of CheckRuntime.
var (
	// ErrRuntimeUnregistered: the daemon does not know the runtime a
	// config names, so every create naming it would fail.
	ErrRuntimeUnregistered = errors.New("runtime is not registered with the Docker daemon")
	// ErrRuntimeArgs: runsc is registered without the arguments the seal
	// needs (RegisterRunsc): the last --network flag must be "none" and the
	// last --host-uds flag "open".
	//
	// --network=none gives every sandbox loopback only, whatever network
	// the engine set up for the container: the seal's "no network" then
	// holds in gVisor's own kernel as well as in the engine's empty network
	// namespace, so one mistake in either still leaves none.
	// --host-uds=open lets the worker connect to a host Unix socket its
	// mounts show, which is how it reaches its broker (the run directory's
	// broker.sock); without it every broker call fails. "all" (or
	// "create") would also let it create host sockets in a read-write bind
	// (a session's workspace), which it never needs: refused.
	ErrRuntimeArgs = errors.New("runsc is registered without --network=none --host-uds=open")
)

// RegisterRunsc is the daemon.json entry that registers runsc as the
// sealed profile needs it; the daemon reads it at start and on SIGHUP.
const RegisterRunsc = `{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--host-uds=open"]}}}`

// infoer is the part of the Engine API CheckRuntime asks.
type infoer interface {
	Info(ctx context.Context, options client.InfoOptions) (client.SystemInfoResult, error)
}

// CheckRuntime asks the daemon whether it can run containers under name
// (container.ValidRuntime) as the sealed profile needs: runc is always
// there; runsc must be registered, with --network=none and
// --host-uds=open in effect among its runtimeArgs. Errors:
// container.ErrInvalidSpec for a name no spec may carry, ErrEngine (the
// daemon did not answer), ErrRuntimeUnregistered, ErrRuntimeArgs.
func CheckRuntime(ctx context.Context, api infoer, name string) error {
	if !rtcontainer.ValidRuntime(name) {
		return fmt.Errorf("%w: runtime %q", rtcontainer.ErrInvalidSpec, name)
	}
	name = rtcontainer.EngineRuntime(name)
	if name == rtcontainer.RuntimeRunc {
		return nil // the daemon's own; a spec names it explicitly anyway
	}
	res, err := api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return engineErr("info", err)
	}
	return checkRegistered(res.Info.Runtimes, name)
}

// checkRegistered applies CheckRuntime's rule to the daemon's runtimes.
func checkRegistered(runtimes map[string]system.RuntimeWithStatus, name string) error {
	rt, ok := runtimes[name]
	switch {
	case !ok:
		return fmt.Errorf("%w: %s (the daemon has %s)", ErrRuntimeUnregistered, name, runtimeNames(runtimes))
	case name == rtcontainer.RuntimeRunsc && (flagValue(rt.Args, "network") != "none" || flagValue(rt.Args, "host-uds") != "open"):
		return fmt.Errorf("%w: its runtimeArgs are %q", ErrRuntimeArgs, rt.Args)
	}
	return nil
}

// flagValue is the value runsc takes for its flag name from args: the
// last of "--name=V", "-name=V", "--name V" or "-name V" (Go flags: the
// last one wins), "" when there is none (runsc's own default: its full
// netstack, no host sockets).
func flagValue(args []string, flag string) string {
	v := ""
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-"), "=")
		if name != flag || !strings.HasPrefix(args[i], "-") {
			continue
		}
		switch {
		case hasVal:
			v = val
		case i+1 < len(args):
			i++
			v = args[i]
		default:
			v = ""
		}
	}
	return v
}

func runtimeNames(runtimes map[string]system.RuntimeWithStatus) string {
	var names []string
	for n := range runtimes {
		names = append(names, n)
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
