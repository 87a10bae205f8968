package enginetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox/container"
)

// sessionSpec is a long-lived spec of the suite's image on fresh
// directories; its container is removed when t ends.
func sessionSpec(t *testing.T, h Harness) container.SessionSpec {
	t.Helper()
	runDir, workspaceDir := workerDirs(t, h)
	uid, gid := user()
	channel := "enginetest:" + t.Name()
	spec := container.SessionSpec{
		Name: container.SessionName(h.Installation, channel), Image: h.Image,
		Installation: h.Installation, Channel: channel, Profile: "studio",
		UID: uid, GID: gid, RunDir: runDir, WorkspaceDir: workspaceDir, Runtime: h.Runtime,
	}
	t.Cleanup(func() {
		if err := h.LongLived.Remove(context.Background(), spec.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		noContainers(t, h, "after Remove")
	})
	return spec
}

// ensureFromMissing checks that spec's container is missing, runs
// EnsureRunning and checks that Status then reads spec back.
func ensureFromMissing(ctx context.Context, t *testing.T, h Harness, spec container.SessionSpec) {
	t.Helper()
	if st, err := h.LongLived.Status(ctx, spec.Name); err != nil || st.State != container.StateMissing {
		t.Fatalf("Status before EnsureRunning = %+v, %v", st, err)
	}
	if err := h.LongLived.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	st, err := h.LongLived.Status(ctx, spec.Name)
	want := container.SessionStatus{State: container.StateRunning, Image: spec.Image, Profile: spec.Profile, Digest: spec.Digest()}
	if err != nil || st != want {
		t.Errorf("Status = %+v, %v; want %+v", st, err, want)
	}
}

// id is the engine's identity of name.
func id(ctx context.Context, t *testing.T, h Harness, name string) string {
	t.Helper()
	got, err := h.ID(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// awaitLogs returns the worker's log once it holds want. The interface
// offers no event for a log line, so the log is read on a ticker, within
// logsShown.
func awaitLogs(ctx context.Context, t *testing.T, h Harness, name, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, logsShown)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := h.LongLived.Logs(ctx, name, 200)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, want) {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("log never held %q within %v; it holds %q", want, logsShown, got)
		case <-tick.C:
		}
	}
}

// testLifecycle: ensure → running, with the session profile felt from
// inside; ensure again keeps the container; a changed spec recreates it;
// Remove → missing, twice; Logs of a missing container is "".
func testLifecycle(t *testing.T, h Harness) {
	ctx := context.Background()
	d := h.LongLived
	spec := sessionSpec(t, h)
	ensureFromMissing(ctx, t, h, spec)

	logs := sessionProbe(ctx, t, h, spec)
	if tail, err := d.Logs(ctx, spec.Name, 1); err != nil || strings.TrimSpace(tail) == strings.TrimSpace(logs) {
		t.Errorf("Logs(1) = %q, %v; want the last line only", tail, err)
	}

	first := id(ctx, t, h, spec.Name)
	if err := d.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := id(ctx, t, h, spec.Name); got != first {
		t.Error("a matching running container was recreated")
	}
	spec.Profile = "other"
	if err := d.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := id(ctx, t, h, spec.Name); got == first {
		t.Error("a profile change kept the container")
	}
	if st, err := d.Status(ctx, spec.Name); err != nil || !st.Current(spec) {
		t.Errorf("Status after the change = %+v, %v; want the changed spec running", st, err)
	}

	for range 2 { // a missing container is fine
		if err := d.Remove(ctx, spec.Name); err != nil {
			t.Fatalf("Remove = %v", err)
		}
	}
	if st, err := d.Status(ctx, spec.Name); err != nil || st.State != container.StateMissing {
		t.Errorf("Status after Remove = %+v, %v; want missing", st, err)
	}
	if got, err := d.Logs(ctx, spec.Name, 200); err != nil || got != "" {
		t.Errorf("Logs after Remove = %q, %v; want \"\"", got, err)
	}
}

// sessionProbe waits for spec's running worker to log its probe, checks
// that the worker feels the session profile and returns the log.
func sessionProbe(ctx context.Context, t *testing.T, h Harness, spec container.SessionSpec) string {
	t.Helper()
	logs := awaitLogs(ctx, t, h, spec.Name, "session worker ready")
	for _, line := range append([]string{
		"uid=" + itoa(spec.UID), "gid=" + itoa(spec.GID),
		"run-write=no", "root-write=no", "tmp-write=yes", "workspace-write=yes",
	}, h.View.common()...) {
		if !strings.Contains(logs, line+"\n") {
			t.Errorf("probe lacks %q:\n%s", line, logs)
		}
	}
	if line := h.View.pidsMax(256); showsCgroup(h) && !strings.Contains(logs, line+"\n") {
		t.Errorf("probe lacks %q:\n%s", line, logs)
	}
	return logs
}

// testSessionSeal: a session container of the harness's runtime feels the
// session profile under the kernel of its runtime; a change of runtime (to
// runc) recreates it.
func testSessionSeal(t *testing.T, h Harness) {
	ctx := context.Background()
	spec := sessionSpec(t, h)
	ensureFromMissing(ctx, t, h, spec)
	kernel := probeLine(sessionProbe(ctx, t, h, spec), "kernel=")
	first := id(ctx, t, h, spec.Name)
	spec.Runtime = container.RuntimeRunc
	if err := h.LongLived.EnsureRunning(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if got := id(ctx, t, h, spec.Name); got == first {
		t.Error("a runtime change kept the container")
	}
	// The worker's system calls went to another kernel than runc's (the
	// host's): the runtime the spec named really ran it.
	if runc := probeLine(sessionProbe(ctx, t, h, spec), "kernel="); kernel == "" || kernel == runc {
		t.Errorf("kernel under %s %q, under runc %q; want two kernels", h.Runtime, kernel, runc)
	}
}

// probeLine is the value of the probe's line starting with prefix.
func probeLine(logs, prefix string) string {
	for l := range strings.Lines(logs) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), prefix); ok {
			return v
		}
	}
	return ""
}

// testWatch: a missing container is not watched; a watched container's
// kill is heard at once, and the killed container is stopped and not
// watched again.
func testWatch(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := h.LongLived
	spec := sessionSpec(t, h)
	if _, err := d.Watch(ctx, spec.Name); !errors.Is(err, container.ErrSessionDown) {
		t.Errorf("Watch of a missing container = %v; want ErrSessionDown", err)
	}
	ensureFromMissing(ctx, t, h, spec)
	faults, err := d.Watch(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := h.Kill(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-faults:
		if !errors.Is(err, container.ErrSessionDown) {
			t.Errorf("fault = %v; want ErrSessionDown", err)
		}
		t.Logf("kill heard after %v: %v", time.Since(began), err)
	case <-time.After(watchHeard):
		t.Fatalf("kill not heard within %v", watchHeard)
	}
	if st, err := d.Status(ctx, spec.Name); err != nil || st.State != container.StateStopped {
		t.Errorf("Status = %+v, %v; want stopped", st, err)
	}
	if _, err := d.Watch(ctx, spec.Name); !errors.Is(err, container.ErrSessionDown) {
		t.Errorf("Watch of a killed container = %v; want ErrSessionDown", err)
	}
}
