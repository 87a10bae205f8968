package docker

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
)

// TestIntegrationReaperSparesWarmWorkers: the periodic reaper queues the
// labelled containers nobody owns, and never a warm worker that waits for
// its claim (the Driver owns it from its prestart): after a pass the
// worker still runs and answers its claim, while an orphan beside it is
// removed.
func TestIntegrationReaperSparesWarmWorkers(t *testing.T) {
	needDocker(t)
	d := newDriver(integ.cli)
	t.Cleanup(func() { closeDriver(t, d) })
	ctx := context.Background()
	w, err := d.Prestart(ctx, turnSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	// An orphan: a container of the installation that this Driver does
	// not own (another Driver made it, as a crashed serve would have).
	other := newDriver(integ.cli)
	orphan, err := other.Prestart(ctx, turnSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := d.reapOnce(ctx, integ.installation, listTimeout, nil)
	if err != nil || n != 1 {
		t.Fatalf("reapOnce = %d, %v; want the orphan queued, and only it", n, err)
	}
	waitGone(t, d, orphan.Name())
	other.untrack(orphan.Name()) // removed behind its back, as in a crash
	closeDriver(t, other)
	if _, err := integ.cli.ContainerInspect(ctx, w.Name(), client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("the warm worker after the reaper's pass: %v", err)
	}
	res, err := w.Run(ctx, []byte(`{"text":"still here"}`))
	if want := (rtsandbox.Reply{OK: true, Text: "echo: still here"}); err != nil || res.Reply != want {
		t.Fatalf("the warm worker's claim = %+v, %v; want %+v", res.Reply, err, want)
	}
}

// waitGone waits until the background remover of d has nothing queued
// (it polls: the remover reports no event), then checks name is gone.
func waitGone(t *testing.T, d *Driver, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for d.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still queued for removal after 30 s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := integ.cli.ContainerInspect(context.Background(), name, client.ContainerInspectOptions{}); err == nil {
		t.Fatalf("%s still exists after its removal", name)
	}
}
