package docker

import (
	"context"
	"strings"
	"testing"

	"github.com/moby/moby/client"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/enginetest"
)

// TestIntegrationEngineConformance runs the engine conformance suite
// against the Docker engine on the real daemon: Driver as the OneShot
// lifecycle (a fresh one per run, closed before the suite looks for
// leftovers), SessionDriver as the LongLived one.
func TestIntegrationEngineConformance(t *testing.T) {
	needDocker(t)
	enginetest.Run(t, enginetest.Harness{
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
	})
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
