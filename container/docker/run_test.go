package docker

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
	rtcontainer "github.com/rtsandbox/rtsandbox/container"
)

func fakeSpec(t *testing.T) rtcontainer.Spec {
	t.Helper()
	runDir, workspaceDir := testDirs(t)
	return rtcontainer.Spec{
		Name: "sandbox-one", Image: "sandbox:local", UID: 1000, GID: 1000,
		RunDir: runDir, WorkspaceDir: workspaceDir, Limits: rtcontainer.DefaultLimits(),
	}
}

// replyWorker reads stdin to EOF and prints stdout with the exit code.
func replyWorker(stdout string, code int) func(<-chan struct{}, io.Reader, io.Writer, io.Writer) int {
	return func(_ <-chan struct{}, in io.Reader, out, _ io.Writer) int {
		if _, err := io.ReadAll(in); err != nil {
			return 99
		}
		_, _ = io.WriteString(out, stdout)
		return code
	}
}

// hostileWorker ignores everything until it is killed.
func hostileWorker(killed <-chan struct{}, _ io.Reader, _, _ io.Writer) int {
	<-killed
	return 137
}

// TestRunNormalTurn is the reference's test "Driver normal turn": the reply comes back and
// the container is removed exactly once, by name.
func TestRunNormalTurn(t *testing.T) {
	f := newFakeEngine()
	f.worker = replyWorker(`{"ok":true,"text":"done"}`, 0)
	res, err := newDriver(f).Run(context.Background(), fakeSpec(t), []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if want := (rtsandbox.Reply{OK: true, Text: "done"}); res.Reply != want {
		t.Errorf("Reply = %+v; want %+v", res.Reply, want)
	}
	want := []string{"create", "attach", "wait", "start", "remove"}
	if diff := cmp.Diff(want, f.ops()); diff != "" {
		t.Errorf("engine calls mismatch (-want +got):\n%s", diff)
	}
	if rm := f.callsOf("remove"); len(rm) != 1 || rm[0].ref != "sandbox-one" {
		t.Errorf("removals = %+v; want one of sandbox-one", rm)
	}
	for name, ts := range map[string]time.Time{"Began": res.Began, "Created": res.Created, "Started": res.Started, "Exited": res.Exited, "Removed": res.Removed} {
		if ts.IsZero() {
			t.Errorf("Result.%s is zero", name)
		}
	}
}

// TestRunAbortPath is the driver abort path of the reference's extra tests: SIGKILL, then remove,
// then 100 ms, then remove again.
func TestRunAbortPath(t *testing.T) {
	f := newFakeEngine()
	f.worker = hostileWorker
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := newDriver(f).Run(ctx, fakeSpec(t), []byte(`{}`))
	if !errors.Is(err, rtcontainer.ErrAborted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want ErrAborted wrapping DeadlineExceeded", err)
	}
	ops := f.ops()
	if diff := cmp.Diff([]string{"kill", "remove", "remove"}, ops[len(ops)-3:]); diff != "" {
		t.Errorf("cleanup calls mismatch (-want +got):\n%s", diff)
	}
	kill, rm := f.callsOf("kill"), f.callsOf("remove")
	if kill[0].ref != "sandbox-one" || rm[0].ref != "sandbox-one" || rm[1].ref != "sandbox-one" {
		t.Errorf("kill/remove refs = %v, %v; want the exact name", kill, rm)
	}
	if gap := rm[1].at.Sub(rm[0].at); gap < secondRemovalGap {
		t.Errorf("gap between removals = %v; want >= %v", gap, secondRemovalGap)
	}
}

// TestRunStoppedDuringCreateLeavesNoContainer: a turn stopped while its
// create is in flight must not leave the container the engine makes
// after the client gave up on the call (a stop under load left such
// containers until the periodic reap). The create is not cut by the
// turn's end; once it answers, the container is known and removed.
func TestRunStoppedDuringCreateLeavesNoContainer(t *testing.T) {
	f := newFakeEngine()
	f.worker = hostileWorker
	f.createGate, f.existing = make(chan struct{}), map[string]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := newDriver(f).Run(ctx, fakeSpec(t), []byte(`{}`))
		done <- err
	}()
	for len(f.callsOf("create")) == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel() // the owner's stop, while the engine still creates
	// What must not happen is Run giving up on the create and cleaning up
	// (kill, remove, the second removal 100 ms later) before the engine
	// made the container: wait well past that cleanup.
	select {
	case err := <-done:
		close(f.createGate) // the engine finishes the create after Run gave up
		t.Fatalf("Run returned before its create was answered (%v): the engine's container would be left", err)
	case <-time.After(10 * secondRemovalGap):
	}
	close(f.createGate)
	if err := <-done; !errors.Is(err, rtcontainer.ErrAborted) {
		t.Fatalf("Run = %v; want ErrAborted", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.existing) != 0 {
		t.Errorf("containers left = %v; want none", f.existing)
	}
}

func TestRunAlreadyAborted(t *testing.T) {
	f := newFakeEngine()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newDriver(f).Run(ctx, fakeSpec(t), nil); !errors.Is(err, rtcontainer.ErrAborted) {
		t.Fatalf("Run = %v; want ErrAborted", err)
	}
	if ops := f.ops(); len(ops) != 0 {
		t.Errorf("engine calls = %v; want none", ops)
	}
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		name        string
		worker      func(<-chan struct{}, io.Reader, io.Writer, io.Writer) int
		want        error
		wantRemoves int
		wantKill    bool
	}{
		// A well-formed ok:false reply with exit code 1 throws (docs/sealed-turn.md, "The container").
		{"exit-1", replyWorker(`{"ok":false,"text":"x"}`, 1), rtcontainer.ErrWorkerFailed, 2, false},
		{"stdout-over-limit", replyWorker(strings.Repeat("x", rtcontainer.StdoutLimit+1), 0), rtcontainer.ErrOutputLimit, 2, true},
		{"text-over-limit", replyWorker(`{"ok":true,"text":"`+strings.Repeat("a", 100001)+`"}`, 0), rtcontainer.ErrInvalidReply, 1, false},
		{"not-json", replyWorker(`hello`, 0), rtcontainer.ErrInvalidReply, 1, false},
		{"stderr-over-limit", func(_ <-chan struct{}, in io.Reader, _, errw io.Writer) int {
			_, _ = io.ReadAll(in)
			_, _ = io.WriteString(errw, strings.Repeat("e", rtcontainer.StderrLimit+1))
			return 0
		}, rtcontainer.ErrOutputLimit, 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine()
			f.worker = tc.worker
			_, err := newDriver(f).Run(context.Background(), fakeSpec(t), []byte(`{}`))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v; want %v", err, tc.want)
			}
			if n := len(f.callsOf("remove")); n != tc.wantRemoves {
				t.Errorf("remove calls = %d; want %d", n, tc.wantRemoves)
			}
			if got := len(f.callsOf("kill")) > 0; got != tc.wantKill {
				t.Errorf("killed = %v; want %v", got, tc.wantKill)
			}
		})
	}
}

func TestRunImageMissing(t *testing.T) {
	f := newFakeEngine()
	f.createErr = cerrdefs.ErrNotFound.WithMessage("No such image: sandbox:local")
	_, err := newDriver(f).Run(context.Background(), fakeSpec(t), nil)
	if !errors.Is(err, rtcontainer.ErrImageMissing) {
		t.Fatalf("Run = %v; want ErrImageMissing", err)
	}
	if !strings.Contains(err.Error(), "rtsandbox image build") {
		t.Errorf("Run error %q does not tell the operator what to run", err)
	}
}

func TestRunRefusesInvalidSpec(t *testing.T) {
	f := newFakeEngine()
	s := fakeSpec(t)
	s.RunDir = s.WorkspaceDir + "/run"
	if _, err := newDriver(f).Run(context.Background(), s, nil); !errors.Is(err, rtcontainer.ErrInvalidSpec) {
		t.Fatalf("Run = %v; want ErrInvalidSpec", err)
	}
	if ops := f.ops(); len(ops) != 0 {
		t.Errorf("engine calls = %v; want none", ops)
	}
}

// The reference's test "Removal-conflict retry", at the level of a whole run: the
// engine's own removal races ours ("already in progress"), then the
// container is gone; the turn still succeeds, after exactly two removals.
func TestRunRemovalConflictRetry(t *testing.T) {
	f := newFakeEngine()
	f.worker = replyWorker(`{"ok":true,"text":"Done."}`, 0)
	f.removeErrs = []error{
		cerrdefs.ErrConflict.WithMessage("removal of container sandbox-one is already in progress"),
		cerrdefs.ErrNotFound.WithMessage("No such container: sandbox-one"),
	}
	res, err := newDriver(f).Run(context.Background(), fakeSpec(t), []byte(`{"text":"hi"}`))
	if err != nil || res.Reply != (rtsandbox.Reply{OK: true, Text: "Done."}) {
		t.Fatalf("Run = %+v, %v; want ok Done.", res.Reply, err)
	}
	if n := len(f.callsOf("remove")); n != 2 {
		t.Errorf("remove calls = %d; want exactly 2", n)
	}
}

// A name already taken belongs to a container this run did not create;
// it is never removed (review finding: force-removing by name would
// delete the other container).
func TestRunNameConflictRemovesNothing(t *testing.T) {
	f := newFakeEngine()
	f.createErr = cerrdefs.ErrConflict.WithMessage(`Conflict. The container name "/sandbox-one" is already in use`)
	_, err := newDriver(f).Run(context.Background(), fakeSpec(t), []byte(`{}`))
	if !errors.Is(err, rtcontainer.ErrEngine) {
		t.Fatalf("Run = %v; want ErrEngine", err)
	}
	if n := len(f.callsOf("remove")); n != 0 {
		t.Errorf("remove calls = %d; want 0", n)
	}
}
