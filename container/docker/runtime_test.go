package docker

import (
	"context"
	"errors"
	"testing"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

// infoFunc scripts the daemon's /info answer.
type infoFunc func() (system.Info, error)

func (f infoFunc) Info(context.Context, client.InfoOptions) (client.SystemInfoResult, error) {
	info, err := f()
	return client.SystemInfoResult{Info: info}, err
}

func runtimesOf(args ...[]string) map[string]system.RuntimeWithStatus {
	m := map[string]system.RuntimeWithStatus{"runc": {Runtime: system.Runtime{Path: "runc"}}}
	for _, a := range args {
		m["runsc"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: a}}
	}
	return m
}

// TestCheckRuntime: runsc must be registered, with --network=none and
// --host-uds=open as the flags that win; runc is the daemon's own and not
// asked for.
func TestCheckRuntime(t *testing.T) {
	tests := []struct {
		name     string
		runtime  string
		runtimes map[string]system.RuntimeWithStatus
		infoErr  error
		want     error // nil: ok
	}{
		{"runc-never-asks", "runc", nil, errors.New("unreachable"), nil},
		{"default-is-runc", "", nil, errors.New("unreachable"), nil},
		{"runsc-ok", "runsc", runtimesOf([]string{"--network=none", "--host-uds=open"}), nil, nil},
		{"runsc-ok-among-others", "runsc", runtimesOf([]string{"--platform=ptrace", "--host-uds=open", "--network=none", "--debug"}), nil, nil},
		{"runsc-ok-separate-value", "runsc", runtimesOf([]string{"--network", "none", "--host-uds", "open"}), nil, nil},
		{"runsc-ok-single-dash", "runsc", runtimesOf([]string{"-network=none", "-host-uds=open"}), nil, nil},
		// Without host-uds=open the worker cannot reach its broker's socket.
		{"runsc-without-host-uds", "runsc", runtimesOf([]string{"--network=none"}), nil, ErrRuntimeArgs},
		{"runsc-host-uds-none", "runsc", runtimesOf([]string{"--network=none", "--host-uds=none"}), nil, ErrRuntimeArgs},
		// More than the worker needs: it could create host sockets in a
		// read-write bind.
		{"runsc-host-uds-all", "runsc", runtimesOf([]string{"--network=none", "--host-uds=all"}), nil, ErrRuntimeArgs},
		{"runsc-host-uds-create", "runsc", runtimesOf([]string{"--network=none", "--host-uds=create"}), nil, ErrRuntimeArgs},
		{"runsc-unregistered", "runsc", runtimesOf(), nil, ErrRuntimeUnregistered},
		{"runsc-no-args", "runsc", runtimesOf(nil), nil, ErrRuntimeArgs},
		{"runsc-host-network", "runsc", runtimesOf([]string{"--network=host", "--host-uds=open"}), nil, ErrRuntimeArgs},
		{"runsc-sandbox-network", "runsc", runtimesOf([]string{"--network=sandbox", "--host-uds=open"}), nil, ErrRuntimeArgs},
		// The last flag wins in runsc's flag parsing, so a later one undoes
		// an earlier --network=none.
		{"runsc-none-then-host", "runsc", runtimesOf([]string{"--network=none", "--host-uds=open", "--network=host"}), nil, ErrRuntimeArgs},
		{"runsc-open-then-all", "runsc", runtimesOf([]string{"--host-uds=open", "--network=none", "--host-uds=all"}), nil, ErrRuntimeArgs},
		{"runsc-dangling-flag", "runsc", runtimesOf([]string{"--host-uds=open", "--network=none", "--network"}), nil, ErrRuntimeArgs},
		{"runsc-lookalike-flag", "runsc", runtimesOf([]string{"--host-uds=open", "--networkx=none"}), nil, ErrRuntimeArgs},
		{"runsc-value-not-a-flag", "runsc", runtimesOf([]string{"--host-uds=open", "network=none"}), nil, ErrRuntimeArgs},
		{"daemon-down", "runsc", nil, errors.New("connection refused"), rtcontainer.ErrEngine},
		{"invalid-name", "kata", runtimesOf([]string{"--network=none", "--host-uds=open"}), nil, rtcontainer.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := infoFunc(func() (system.Info, error) { return system.Info{Runtimes: tt.runtimes}, tt.infoErr })
			err := CheckRuntime(context.Background(), api, tt.runtime)
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("CheckRuntime(%q) = %v; want %v", tt.runtime, err, tt.want)
			}
		})
	}
}
