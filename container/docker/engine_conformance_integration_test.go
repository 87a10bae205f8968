package docker

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/enginetest"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

// TestIntegrationEngineConformance runs the engine conformance suite
// against the Docker engine on the real daemon: Driver as the OneShot
// lifecycle (a fresh one per run, closed before the suite looks for
// leftovers), SessionDriver as the LongLived one.
func TestIntegrationEngineConformance(t *testing.T) {
	needDocker(t)
	enginetest.Run(t, harness())
}

// harness is the Docker engine under the conformance suite: Driver as
// the OneShot lifecycle (a fresh one per run, closed before the suite
// looks for leftovers), SessionDriver as the LongLived one.
func harness() enginetest.Harness {
	return enginetest.Harness{
		OneShot: func(t *testing.T) rtcontainer.OneShot {
			d := newDriver(integ.cli)
			t.Cleanup(func() { closeDriver(t, d) })
			return d
		},
		LongLived:    newSessionDriver(integ.cli),
		Image:        integ.image,
		Installation: integ.installation,
		Overrun:      ReturnBound(0),
		ImageExists:  newDriver(integ.cli).ImageExists,
		Containers:   installationContainers,
		ID: func(ctx context.Context, name string) (string, error) {
			res, err := integ.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
			return res.Container.ID, err
		},
		Kill: func(ctx context.Context, name string) error {
			_, err := integ.cli.ContainerKill(ctx, name, client.ContainerKillOptions{Signal: "KILL"})
			return err
		},
	}
}

// installationContainers names every container labelled with this test
// run's installation, running or not.
func installationContainers(ctx context.Context) ([]string, error) {
	list, err := integ.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", rtcontainer.InstallationLabel+"="+integ.installation),
	})
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.Join(c.Names, ","))
	}
	return names, err
}

// TestIntegrationEngineConformanceRunsc proves the seal under gVisor: the
// suite's seal probes (enginetest.RunSeal: no network but loopback, a
// read-only root, no capabilities, no new privileges, the non-root user,
// the limits, sealed and long-lived) with every spec naming runsc, and the
// worker's system calls answered by gVisor's kernel, not the host's.
// Under CI=true it fails when runsc is not registered with --network=none.
func TestIntegrationEngineConformanceRunsc(t *testing.T) {
	needDocker(t)
	dockertest.RequireRuntime(t, rtcontainer.RuntimeRunsc, func(ctx context.Context) error {
		return CheckRuntime(ctx, integ.cli, rtcontainer.RuntimeRunsc)
	})
	h := harness()
	h.Runtime = rtcontainer.RuntimeRunsc
	enginetest.RunSeal(t, h)
	t.Run("OneShot/GuestKernel", func(t *testing.T) {
		spec := turnSpec(t)
		spec.Runtime = rtcontainer.RuntimeRunsc
		d := newDriver(integ.cli)
		defer closeDriver(t, d)
		res, err := d.Run(context.Background(), spec, []byte(`{"mode":"probe"}`))
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		var host syscall.Utsname
		if err := syscall.Uname(&host); err != nil {
			t.Fatal(err)
		}
		hostLine := "kernel=" + utsString(host.Release[:])
		if !strings.Contains(res.Reply.Text, "\nkernel=") || strings.Contains(res.Reply.Text+"\n", hostLine+"\n") {
			t.Errorf("probe = %q; want a kernel other than the host's (%s)", res.Reply.Text, hostLine)
		}
	})
}

func utsString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}
