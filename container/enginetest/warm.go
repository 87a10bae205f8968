package enginetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// runWarm runs the warm subtests when the engine is a
// container.Prestarter: a prestarted worker answers its claim as a cold
// one does, under the same profile, and sees what its run directory got
// after it started (where a pool makes the turn's broker socket); a
// discarded one leaves nothing; one killed while it waited is reported by
// Exited without a claim and fails its claim at once, not at the deadline,
// and leaves nothing. Image is the ID ImageID gives its spec's image.
func runWarm(t *testing.T, h Harness) {
	if _, ok := h.OneShot(t).(container.Prestarter); !ok {
		return
	}
	t.Run("Warm/Reply", func(t *testing.T) { testWarmReply(t, h) })
	t.Run("Warm/Profile", func(t *testing.T) { testWarmProfile(t, h) })
	t.Run("Warm/Discard", func(t *testing.T) { testWarmDiscard(t, h) })
	t.Run("Warm/KilledWhileIdle", func(t *testing.T) { testWarmKilled(t, h) })
}

// prestart starts spec on a fresh engine; the installation must have no
// container once the engine settled.
func prestart(t *testing.T, h Harness, spec container.Spec) container.Warm {
	t.Helper()
	t.Cleanup(func() { noContainers(t, h, "after the engine settled") })
	p, ok := h.OneShot(t).(container.Prestarter)
	if !ok {
		t.Fatal("the engine cannot prestart a worker")
	}
	w, err := p.Prestart(context.Background(), spec)
	if err != nil {
		t.Fatalf("Prestart = %v", err)
	}
	if w.Name() != spec.Name {
		t.Errorf("Name = %q; want %q", w.Name(), spec.Name)
	}
	return w
}

// claim runs the warm worker with input; no container is left once the
// run settled.
func claim(ctx context.Context, t *testing.T, h Harness, w container.Warm, input string) (container.Result, error) {
	t.Helper()
	res, err := w.Run(ctx, []byte(input))
	settled(t, h, res)
	return res, err
}

func testWarmReply(t *testing.T, h Harness) {
	spec := turnSpec(t, h)
	w := prestart(t, h, spec)
	id, err := h.OneShot(t).(container.Prestarter).ImageID(context.Background(), spec.Image)
	if err != nil || id == "" || w.Image() != id {
		t.Errorf("Image = %q, ImageID(%q) = %q, %v; want the same non-empty ID", w.Image(), spec.Image, id, err)
	}
	select {
	case <-w.Exited():
		t.Error("Exited is closed for a worker that waits for its claim")
	default:
	}
	res, err := claim(context.Background(), t, h, w, `{"text":"hello"}`)
	if err != nil {
		t.Fatalf("warm Run = %v", err)
	}
	if want := (rtsandbox.Reply{OK: true, Text: "echo: hello"}); res.Reply != want || res.ExitCode != 0 {
		t.Errorf("warm Run = %+v, exit %d; want %+v, exit 0", res.Reply, res.ExitCode, want)
	}
	if res.Created.IsZero() || res.Started.IsZero() || res.Began.Before(res.Started) {
		t.Errorf("timestamps created %v, started %v, began %v: want the prestart's before the claim", res.Created, res.Started, res.Began)
	}
}

// testWarmProfile: the warm worker is confined as a cold one, and a file
// put in its run directory after it started is there for it.
func testWarmProfile(t *testing.T, h Harness) {
	spec := turnSpec(t, h)
	w := prestart(t, h, spec)
	if err := os.WriteFile(filepath.Join(spec.RunDir, "probe.txt"), []byte("socket-dir"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := claim(context.Background(), t, h, w, `{"mode":"probe"}`)
	if err != nil {
		t.Fatalf("warm Run = %v", err)
	}
	checkProbe(t, h, spec, res)
}

func testWarmDiscard(t *testing.T, h Harness) {
	w := prestart(t, h, turnSpec(t, h))
	if err := w.Discard(context.Background()); err != nil {
		t.Fatalf("Discard = %v", err)
	}
}

func testWarmKilled(t *testing.T, h Harness) {
	w := prestart(t, h, turnSpec(t, h))
	if err := h.Kill(context.Background(), w.Name()); err != nil {
		t.Fatal(err)
	}
	// A pool hears the death without a claim.
	select {
	case <-w.Exited():
	case <-time.After(watchHeard):
		t.Errorf("Exited still open %v after the kill", watchHeard)
	}
	const deadline = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err := claim(ctx, t, h, w, `{"text":"hello"}`)
	if !errors.Is(err, container.ErrEngine) && !errors.Is(err, container.ErrWorkerFailed) {
		t.Errorf("claim of a killed worker = %v; want ErrEngine or ErrWorkerFailed", err)
	}
	if took := time.Since(start); took > schedulingSlack+watchHeard {
		t.Errorf("the claim failed after %v; want it at once, not at the %v deadline", took, deadline)
	}
}
