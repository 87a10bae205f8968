package host

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"
)

// fakeInfo is a daemon's /info answer.
type fakeInfo struct {
	runtimes map[string]system.RuntimeWithStatus
	err      error
}

func (f fakeInfo) Info(context.Context, client.InfoOptions) (client.SystemInfoResult, error) {
	return client.SystemInfoResult{Info: system.Info{Runtimes: f.runtimes}}, f.err
}

func runscWith(args ...string) map[string]system.RuntimeWithStatus {
	return map[string]system.RuntimeWithStatus{
		"runc":  {Runtime: system.Runtime{Path: "runc"}},
		"runsc": {Runtime: system.Runtime{Path: "/usr/bin/runsc", Args: args}},
	}
}

// TestRuntimeCheck: doctor (and serve's start) fails a runsc the daemon
// does not know or knows without --network=none --host-uds=open, with the daemon.json
// fix; an unreachable daemon is the docker check's failure, not this one's.
func TestRuntimeCheck(t *testing.T) {
	tests := []struct {
		name    string
		api     fakeInfo
		dialErr error
		want    brief
		fixHas  string
	}{
		{"ok", fakeInfo{runtimes: runscWith("--network=none", "--host-uds=open")}, nil, brief{Status: "ok", Name: "runtime runsc"}, ""},
		{"unregistered", fakeInfo{runtimes: map[string]system.RuntimeWithStatus{"runc": {}}}, nil,
			brief{Status: "fail", Name: "runtime runsc", HasFix: true}, `"runtimeArgs": ["--network=none", "--host-uds=open"]`},
		{"without-network-none", fakeInfo{runtimes: runscWith("--host-uds=open")}, nil,
			brief{Status: "fail", Name: "runtime runsc", HasFix: true}, `"runtimeArgs": ["--network=none", "--host-uds=open"]`},
		{"without-host-uds", fakeInfo{runtimes: runscWith("--network=none")}, nil,
			brief{Status: "fail", Name: "runtime runsc", HasFix: true}, `"runtimeArgs": ["--network=none", "--host-uds=open"]`},
		{"daemon-down", fakeInfo{err: errors.New("connection refused")}, nil,
			brief{Status: "warn", Name: "runtime runsc", HasFix: true}, "docker check"},
		{"no-client", fakeInfo{}, errors.New("bad DOCKER_HOST"),
			brief{Status: "warn", Name: "runtime runsc", HasFix: true}, "docker check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := runtimeCheck(context.Background(), tt.api, "runsc", tt.dialErr)
			if diff := cmp.Diff(tt.want, briefOf(c)); diff != "" {
				t.Errorf("runtimeCheck (-want +got):\n%s", diff)
			}
			if !strings.Contains(c.fix, tt.fixHas) {
				t.Errorf("fix %q; want it to contain %q", c.fix, tt.fixHas)
			}
		})
	}
}

// A config naming only runc adds no runtime check (and asks the daemon
// nothing), so doctor's output is what it was before runtimes existed.
func TestRuntimeChecksOnlyWhenNamed(t *testing.T) {
	if got := runtimeChecks(context.Background(), []string{"runc"}); got != nil {
		t.Errorf("runtimeChecks(runc) = %v; want none", got)
	}
}
