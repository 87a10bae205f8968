package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
)

// runtimeCheckName prefixes the check of each OCI runtime in use.
const runtimeCheckName = "runtime "

// runscFix registers runsc as the seal needs it (docs/operations.md,
// "gVisor").
var runscFix = fmt.Sprintf("install runsc (apt-get install runsc), merge %s into /etc/docker/daemon.json and reload dockerd (kill -HUP <dockerd pid>; containers keep running), or run scripts/runsc-register.sh; see docs/operations.md, \"gVisor\"",
	docker.RegisterRunsc)

// runtimeChecks checks that the engine has each runtime the config's
// channels run under (config.Runtimes) registered as the seal needs it.
// runc, the engine's own, needs no check: a config that names only runc
// adds none, so doctor's output is as before runtimes existed.
func runtimeChecks(ctx context.Context, runtimes []string) []Check {
	var checks []Check
	for _, name := range runtimes {
		if container.EngineRuntime(name) == container.RuntimeRunc {
			continue
		}
		checks = append(checks, dockerRuntimeCheck(ctx, name))
	}
	return checks
}

// dockerRuntimeCheck asks the local daemon about one runtime.
func dockerRuntimeCheck(ctx context.Context, name string) Check {
	e, closeClient, err := dockerEngine()
	if err != nil {
		return runtimeCheck(ctx, nil, name, err)
	}
	defer closeClient()
	return runtimeCheck(ctx, e.cli, name, nil)
}

// runtimeCheck is the verdict on one runtime, asked of api (nil when the
// client could not be made: dialErr says why).
func runtimeCheck(ctx context.Context, api interface {
	Info(context.Context, client.InfoOptions) (client.SystemInfoResult, error)
}, name string, dialErr error) Check {
	check := runtimeCheckName + name
	if dialErr != nil {
		return warn(check, "fix the docker check first", "not checked: %v", dialErr)
	}
	ictx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	switch err := docker.CheckRuntime(ictx, api, name); {
	case errors.Is(err, container.ErrEngine):
		return warn(check, "fix the docker check first", "not checked: %v", err)
	case errors.Is(err, docker.ErrRuntimeUnregistered), errors.Is(err, docker.ErrRuntimeArgs):
		return fail(check, runscFix, "%v", err)
	case err != nil:
		return fail(check, "set sandbox.runtime and profiles.<name>.runtime to runc or runsc", "%v", err)
	}
	return ok(check, "registered with the Docker daemon, with --network=none --host-uds=open")
}
