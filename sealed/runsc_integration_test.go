package sealed

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/internal/dockertest"
)

// needRunsc skips t, or fails it under CI (which registers runsc), unless
// the daemon runs runsc as the seal needs it.
func needRunsc(t *testing.T) {
	t.Helper()
	needDocker(t)
	dockertest.RequireRuntime(t, container.RuntimeRunsc, func(ctx context.Context) error {
		return docker.CheckRuntime(ctx, integ.cli, container.RuntimeRunsc)
	})
}

// TestIntegrationSealedTurnRunsc is one real sealed turn of the real
// worker under gVisor: the model asks for a host tool, which inspects
// the live container (runtime runsc, no network, read-only root, no key
// in its environment, command, labels, mounts or run directory), and the
// worker's answer comes back through the broker. The container and run
// directory are gone afterwards (dockerFixture).
func TestIntegrationSealedTurnRunsc(t *testing.T) {
	needRunsc(t)
	model := newModelServer(t, completion(nil, toolCall("c1", "host_probe", `{}`)), completion("Sealed under gVisor."))
	var (
		rec    *recordingDriver
		probed bool
		stats  TurnStats
	)
	probe := func(ctx context.Context, _ json.RawMessage, _ rtsandbox.Binding) (string, error) {
		assertKeyAbsent(t, ctx, rec.lastSpec(), []string{integrationKey})
		probed = true
		return "probed", nil
	}
	var f *fixture
	f, rec = dockerFixture(t, integ.workerImage, func(f *fixture) {
		f.cfg.ModelURL = model.url()
		f.cfg.APIKey = func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) { return integrationKey, nil }
		f.cfg.Tools = []broker.Tool{hostTool("probe", probe)}
		f.opts.Runtime = container.RuntimeRunsc
		f.opts.OnTurn = func(s TurnStats) { stats = s }
	})
	reply, err := f.rt.RunTurn(context.Background(), rtsandbox.Binding{Channel: "fake:guests", Speaker: speaker("guest")}, "probe and answer")
	if err != nil || reply != (rtsandbox.Reply{OK: true, Text: "Sealed under gVisor."}) {
		t.Fatalf("RunTurn = %+v, %v; want ok Sealed under gVisor.", reply, err)
	}
	logStats(t, stats)
	if spec := rec.lastSpec(); !probed || spec.Runtime != container.RuntimeRunsc {
		t.Errorf("probed %v, spec runtime %q; want the live runsc container inspected", probed, spec.Runtime)
	}
}
