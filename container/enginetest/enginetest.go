// Package enginetest is the conformance suite of a container engine: every
// engine (container/docker, and container/kubernetes on real Pods) passes
// Run, so the modes can rely on the contracts of container.OneShot and
// container.LongLived without knowing the engine (docs/engines.md). Where
// an engine keeps a part of the seal by other means than Docker's (a Pod's
// network interface bounded by a policy, no rlimits), its Harness states
// it (View), and the suite checks what it states.
//
// What the suite holds an engine to:
//
//   - OneShot: a run returns the worker's reply and leaves no container
//     behind (none once Run returned without Settled, none once Settled
//     closed, which a pending removal must set); the sealed profile holds as the
//     worker feels it from inside (its uid and gid, no capabilities, no
//     new privileges, no network device but loopback, a read-only root,
//     the run directory readable and not writable, a writable noexec
//     /tmp and workspace, the PID and open-file limits); a worker that
//     fails, floods its output or replies too long fails with its class;
//     a worker that ignores SIGTERM past a 1 s deadline is cut and Run
//     returns by the deadline plus the engine's stated overrun (at most a
//     second) with ErrAborted wrapping context.DeadlineExceeded; a
//     missing image fails with ErrImageMissing and is not pulled.
//   - LongLived: EnsureRunning from missing makes a running container
//     that Status reads back (image, profile, digest) and whose worker
//     feels the session profile; ensuring the same spec again keeps that
//     very container, a changed spec recreates it; Remove makes it
//     missing, a second Remove is fine, and Logs of a missing container
//     is ""; Watch refuses a missing container, and hears a kill at once
//     (well before any turn deadline): ErrSessionDown, Status stopped,
//     and a new Watch refused.
//
// The subtests run one after another, never in parallel: a real engine
// starts one container at a time here (Docker 20.10 deadlocks under
// bursts). They need the stand-in worker of WorkerPackage as the image's
// entrypoint. The package is test support: only _test files import it.
package enginetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// WorkerPackage is the stand-in worker every engine's test image runs as
// its entrypoint, built static (CGO_ENABLED=0) into a FROM-scratch image:
// it answers a sealed run by its input's mode, and as a long-lived worker
// (command "session") logs what its sandbox allows and waits.
const WorkerPackage = "github.com/rtsandbox/rtsandbox/container/enginetest/testdata/echo"

// Harness is the engine under test and what the suite needs to look at it
// from outside.
type Harness struct {
	// OneShot returns the sealed engine for one subtest. It registers on
	// t whatever lets the engine settle (Docker: Close, which waits for
	// the background remover); the suite checks for leftovers after that.
	OneShot func(t *testing.T) container.OneShot
	// LongLived is the long-lived engine.
	LongLived container.LongLived
	// Image is a local image of WorkerPackage.
	Image string
	// Installation labels every container of the suite; no other test
	// uses it while the suite runs.
	Installation string
	// Overrun is how long after a deadline the engine's Run returns at
	// most (Docker: ReturnBound(d) - d). The contract allows a second.
	Overrun time.Duration
	// ImageExists reports whether ref is in the engine's local store.
	ImageExists func(ctx context.Context, ref string) (bool, error)
	// Containers lists this installation's containers the engine knows,
	// running or not, by name.
	Containers func(ctx context.Context) ([]string, error)
	// ID is the engine's identity of the container name: a recreated
	// container has a new one.
	ID func(ctx context.Context, name string) (string, error)
	// Kill kills the long-lived worker's process from outside, as the
	// kernel's OOM killer or an operator would (Docker: SIGKILL).
	Kill func(ctx context.Context, name string) error
	// Runtime is the OCI runtime every spec of the suite names ("" the
	// default, runc): the suite holds the engine to the same contract
	// under each runtime it offers (container.Runtimes).
	Runtime string
	// View is how a worker sees the parts of the profile whose means
	// differ between engines; the zero value is Docker's.
	View View
	// Dirs makes a fresh run directory and workspace for a worker of t,
	// private to the worker's user; nil makes them under t.TempDir(). An
	// engine that mounts a long-lived worker's directories from a volume
	// of its own (a Pod's claim) makes them there.
	Dirs func(t *testing.T) (runDir, workspaceDir string)
}

// View states how an engine's workers, sealed and long-lived, see the
// parts of their profile that engines express by different means
// (docs/engines.md, the guarantees table). The suite holds the engine to what it states: a
// stated difference is checked as stated, never skipped unseen. The zero
// value is Docker's: only loopback, the run directory at /broker, the
// spec's workspace directory, a noexec /tmp, nofile 256:256, and the
// spec's PID limit in the worker's cgroup.
type View struct {
	// Net is the network devices the worker sees, as the probe lists
	// them ("lo" when empty). A Pod has its interface; its egress is a
	// NetworkPolicy's to bound, which the worker cannot see.
	Net string
	// NoRunDir: the sealed worker does not see its run directory (a Pod
	// reaches its broker through the network with a token, not a
	// mounted socket); the probe must find /broker absent.
	NoRunDir bool
	// NoHostWorkspace: a sealed worker's workspace is the engine's own
	// memory volume, not spec.WorkspaceDir (the sealed mode never gives
	// one), so OneShot/Workspace holds the engine to writing there only.
	NoHostWorkspace bool
	// TmpExec: /tmp is not noexec (a Pod's emptyDir cannot be).
	TmpExec bool
	// NoFile is the open-files limit the worker sees ("256:256" when
	// empty); "-" states that the engine sets none (a Pod cannot set
	// rlimits: the node's runtime's limit applies).
	NoFile string
	// PIDsMax is the worker's cgroup pids.max under runc (the spec's
	// limit when empty): a Pod's PID bound is the node's podPidsLimit,
	// on the Pod's cgroup above the container's.
	PIDsMax string
}

// pidsMax is the pids.max line a worker under spec limit pids should show.
func (v View) pidsMax(pids int) string { return "pids-max=" + cmp.Or(v.PIDsMax, itoa(pids)) }

// common is the probe's lines of the hardening every worker shares, as v
// states them: no capabilities, no new privileges, the network devices,
// /tmp noexec, and the open-files limit.
func (v View) common() []string {
	lines := []string{"capeff=0000000000000000", "nonewprivs=1", "net=" + cmp.Or(v.Net, "lo"), "tmp-noexec=yes"}
	if v.TmpExec {
		lines[3] = "tmp-noexec=no"
	}
	if nofile := cmp.Or(v.NoFile, "256:256"); nofile != "-" {
		lines = append(lines, "nofile="+nofile)
	}
	return lines
}

// schedulingSlack is what a loaded 2-core machine running the race
// detector may add to an engine's own bound (goroutine wake-ups, the
// engine answering a cancelled call): time bounds here are the engine's
// bound plus this, never a guess.
const schedulingSlack = 2 * time.Second

// watchHeard bounds how long a kill may take to be heard: generous for a
// loaded CI machine, and far below any turn timeout (the fault is heard
// by watching, not found at the deadline).
const watchHeard = 10 * time.Second

// logsShown bounds how long a started worker's first lines may take to
// reach the engine's log.
const logsShown = 10 * time.Second

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	RunOneShot(t, h)
	t.Run("LongLived/Lifecycle", func(t *testing.T) { testLifecycle(t, h) })
	t.Run("LongLived/Watch", func(t *testing.T) { testWatch(t, h) })
}

// RunOneShot runs the sealed half of the suite: OneShot/* and, for a
// container.Prestarter, Warm/*. h.LongLived and h.ID are not used.
func RunOneShot(t *testing.T, h Harness) {
	t.Run("OneShot/Reply", func(t *testing.T) { testReply(t, h) })
	t.Run("OneShot/Profile", func(t *testing.T) { testProfile(t, h) })
	t.Run("OneShot/PIDs", func(t *testing.T) { testPIDs(t, h) })
	t.Run("OneShot/Workspace", func(t *testing.T) { testWorkspace(t, h) })
	t.Run("OneShot/Failures", func(t *testing.T) { testFailures(t, h) })
	t.Run("OneShot/EarlyReply", func(t *testing.T) { testEarlyReply(t, h) })
	t.Run("OneShot/Deadline", func(t *testing.T) { testDeadline(t, h) })
	t.Run("OneShot/ImageMissing", func(t *testing.T) { testImageMissing(t, h) })
	runWarm(t, h)
}

// RunSeal runs the part of the suite that proves the sealed profile as
// the worker feels it, sealed (OneShot/Reply, OneShot/Profile,
// OneShot/PIDs) and
// long-lived (LongLived/Seal: the profile, and a runtime change
// recreates the container), for h.Runtime, a runtime other than runc, of
// an engine that passes Run under runc: the lifecycle parts are the
// engine's, the same whatever runtime runs the worker.
func RunSeal(t *testing.T, h Harness) {
	if container.EngineRuntime(h.Runtime) == container.RuntimeRunc {
		t.Fatal("RunSeal is for a runtime other than runc; Run covers runc")
	}
	t.Run("OneShot/Reply", func(t *testing.T) { testReply(t, h) })
	t.Run("OneShot/Profile", func(t *testing.T) { testProfile(t, h) })
	t.Run("OneShot/PIDs", func(t *testing.T) { testPIDs(t, h) })
	t.Run("LongLived/Seal", func(t *testing.T) { testSessionSeal(t, h) })
	t.Run("Warm/Profile", func(t *testing.T) { testWarmProfile(t, h) })
}

// user is the worker's non-root user: the test's own, or 1000:1000 when
// the test runs as root (the directories are then handed to it).
func user() (uid, gid int) {
	if uid, gid = os.Getuid(), os.Getgid(); uid == 0 {
		return 1000, 1000
	}
	return uid, gid
}

// dirs returns a fresh run directory and workspace directory, private to
// the worker's user.
func dirs(t *testing.T) (runDir, workspaceDir string) {
	t.Helper()
	base := t.TempDir()
	runDir, workspaceDir = filepath.Join(base, "run"), filepath.Join(base, "ws")
	uid, gid := user()
	for _, d := range []string{runDir, workspaceDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if os.Getuid() == 0 {
			if err := os.Chown(d, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return runDir, workspaceDir
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// workerDirs is h's Dirs, or dirs.
func workerDirs(t *testing.T, h Harness) (runDir, workspaceDir string) {
	t.Helper()
	if h.Dirs != nil {
		return h.Dirs(t)
	}
	return dirs(t)
}

// turnSpec is a sealed spec of the suite's image on fresh directories.
func turnSpec(t *testing.T, h Harness) container.Spec {
	t.Helper()
	runDir, workspaceDir := workerDirs(t, h)
	uid, gid := user()
	labels, err := container.TurnLabels(h.Installation)
	if err != nil {
		t.Fatal(err)
	}
	return container.Spec{
		Name: container.Name("enginetest:" + t.Name()), Image: h.Image, UID: uid, GID: gid,
		RunDir: runDir, WorkspaceDir: workspaceDir, Limits: container.DefaultLimits(), Labels: labels,
		Runtime: h.Runtime,
	}
}

// noContainers fails t if the installation has a container left.
func noContainers(t *testing.T, h Harness, when string) {
	t.Helper()
	left, err := h.Containers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("containers %v left %s", left, when)
	}
}

// run runs input in a fresh engine: the installation must have no
// container once Run returned (unless its removal is pending, or comes
// after an early reply: then once Settled closed) and none once the
// engine settled.
func run(ctx context.Context, t *testing.T, h Harness, spec container.Spec, input string) (container.Result, error) {
	t.Helper()
	t.Cleanup(func() { noContainers(t, h, "after the engine settled") })
	res, err := h.OneShot(t).Run(ctx, spec, []byte(input))
	settled(t, h, res)
	return res, err
}

// settled checks the removal rule of a returned run: a pending removal
// comes with Settled, and once Settled closed (or at once when there is
// none) the installation has no container.
func settled(t *testing.T, h Harness, res container.Result) {
	t.Helper()
	if res.CleanupPending && res.Settled == nil {
		t.Errorf("CleanupPending without Settled: a caller cannot tell when the container is gone")
	}
	if res.Settled != nil {
		select {
		case <-res.Settled:
		case <-time.After(watchHeard):
			t.Errorf("a returned run's container not settled %v after Run returned", watchHeard)
			return
		}
	}
	noContainers(t, h, "once the run settled")
}

func testReply(t *testing.T, h Harness) {
	res, err := run(context.Background(), t, h, turnSpec(t, h), `{"text":"hello"}`)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if want := (rtsandbox.Reply{OK: true, Text: "echo: hello"}); res.Reply != want || res.ExitCode != 0 {
		t.Errorf("Run = %+v, exit %d; want %+v, exit 0", res.Reply, res.ExitCode, want)
	}
}

// testProfile asks the worker what it can do.
func testProfile(t *testing.T, h Harness) {
	spec := turnSpec(t, h)
	if err := os.WriteFile(filepath.Join(spec.RunDir, "probe.txt"), []byte("socket-dir"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := run(context.Background(), t, h, spec, `{"mode":"probe"}`)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	checkProbe(t, h, spec, res)
}

// checkProbe holds a probe's answer to the sealed profile of spec.
func checkProbe(t *testing.T, h Harness, spec container.Spec, res container.Result) {
	t.Helper()
	got := strings.Split(res.Reply.Text, "\n")
	brokerRead := `broker-read="socket-dir"/true`
	if h.View.NoRunDir {
		brokerRead = `broker-read=""/false`
	}
	// The hardening as the process sees it (View.common): no
	// capabilities, no new privileges, only loopback, /tmp noexec, the
	// PID and file limits, as the engine states them.
	for _, want := range append([]string{
		"uid=" + itoa(spec.UID), "gid=" + itoa(spec.GID),
		brokerRead, "broker-write=no", "root-write=no", "tmp-write=yes", "workspace-write=yes",
	}, h.View.common()...) {
		if !slices.Contains(got, want) {
			t.Errorf("probe = %q; want a line %q", got, want)
		}
	}
	// The PID limit as the worker reads it: runc shows the container's
	// cgroup; gVisor shows none (OneShot/PIDs proves its bound instead).
	if want := h.View.pidsMax(spec.Limits.PIDs); showsCgroup(h) && !slices.Contains(got, want) {
		t.Errorf("probe = %q; want a line %q", got, want)
	}
}

// showsCgroup reports whether the worker sees its cgroup's limits: under
// runc it does; gVisor applies them to the whole sandbox from outside.
func showsCgroup(h Harness) bool { return container.EngineRuntime(h.Runtime) == container.RuntimeRunc }

// testPIDs: a worker that starts processes until refused never runs more
// than the PID limit: its starts are refused below it (runc) or its
// sandbox ends, failing the run (gVisor, whose own threads count against
// the limit).
func testPIDs(t *testing.T, h Harness) {
	spec := turnSpec(t, h)
	res, err := run(context.Background(), t, h, spec, `{"mode":"spawn"}`)
	if err != nil {
		if !errors.Is(err, container.ErrWorkerFailed) {
			t.Fatalf("Run = %v; want a reply or ErrWorkerFailed", err)
		}
		t.Logf("the sandbox ended: %v (exit %d)", err, res.ExitCode)
		return
	}
	n, convErr := strconv.Atoi(strings.TrimPrefix(res.Reply.Text, "spawned="))
	t.Logf("%d processes started under a limit of %d", n, spec.Limits.PIDs)
	if convErr != nil || n >= spec.Limits.PIDs {
		t.Errorf("reply %q; want spawned=N with N below the PID limit %d", res.Reply.Text, spec.Limits.PIDs)
	}
}

// testWorkspace: what the worker writes in a workspace directory is there
// after the run; an engine whose sealed workspace is its own memory volume
// (View.NoHostWorkspace) lets the worker write it and leaves nothing in
// spec.WorkspaceDir.
func testWorkspace(t *testing.T, h Harness) {
	spec := turnSpec(t, h)
	res, err := run(context.Background(), t, h, spec, `{"mode":"write","text":"kept"}`)
	if err != nil || !res.Reply.OK {
		t.Fatalf("Run = %+v, %v", res.Reply, err)
	}
	if h.View.NoHostWorkspace {
		if entries, err := os.ReadDir(spec.WorkspaceDir); err != nil || len(entries) != 0 {
			t.Errorf("the spec's workspace directory holds %v, %v; want nothing (the engine's workspace is its own)", entries, err)
		}
		return
	}
	b, err := os.ReadFile(filepath.Join(spec.WorkspaceDir, "out.txt"))
	if err != nil || string(b) != "kept" {
		t.Errorf("workspace file = %q, %v; want kept", b, err)
	}
}

func testFailures(t *testing.T, h Harness) {
	tests := []struct {
		name, input string
		want        error
	}{
		{"exit-1-with-ok-false", `{"mode":"fail"}`, container.ErrWorkerFailed},
		{"stdout-3-mib", `{"mode":"big"}`, container.ErrOutputLimit},
		{"stderr-200-kib", `{"mode":"noisy"}`, container.ErrOutputLimit},
		{"text-100001", `{"mode":"long"}`, container.ErrInvalidReply},
		{"input-not-json-exit-4", `not json`, container.ErrWorkerFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(context.Background(), t, h, turnSpec(t, h), tc.input)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run = %v; want %v", err, tc.want)
			}
		})
	}
}

// testEarlyReply: a worker that ends its reply with wire.ReplyEnd and
// then never exits (it ignores SIGTERM) has its reply taken at the mark:
// Run returns it, without what followed the mark, where waiting for the
// exit would have run into the deadline, and the container is gone once
// Settled closes. An end mark after no valid reply fails the run with
// ErrInvalidReply and leaves nothing.
func testEarlyReply(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := run(ctx, t, h, turnSpec(t, h), `{"mode":"early","text":"hi"}`)
	if err != nil {
		t.Fatalf("Run = %v; want the reply taken at its end mark", err)
	}
	if want := (rtsandbox.Reply{OK: true, Text: "early: hi"}); res.Reply != want {
		t.Errorf("Reply = %+v; want %+v", res.Reply, want)
	}
	if res.Settled == nil || res.Replied.IsZero() || !res.Exited.IsZero() {
		t.Errorf("Settled %v, Replied %v, Exited %v; want a removal after Run, a reply time and no exit",
			res.Settled != nil, res.Replied, res.Exited)
	}
	_, err = run(ctx, t, h, turnSpec(t, h), `{"mode":"early-invalid"}`)
	if !errors.Is(err, container.ErrInvalidReply) {
		t.Fatalf("Run of an end mark after no reply = %v; want ErrInvalidReply", err)
	}
}

// testDeadline is the docs/protocol.md, "The sealed reply" requirement: a PID 1 that ignores SIGTERM,
// with a 1 s deadline, fails in under 8 s and leaves no container. The
// bound asserted is the engine's own (the deadline plus its overrun plus
// schedulingSlack), which must itself be under the spec's 8 s.
func testDeadline(t *testing.T, h Harness) {
	if h.Overrun <= 0 || h.Overrun > time.Second {
		t.Fatalf("the engine's overrun %v is not within the contract's second", h.Overrun)
	}
	limit := time.Second + h.Overrun + schedulingSlack
	if limit >= 8*time.Second {
		t.Fatalf("the engine's bound %v is not under the spec's 8 s", limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := run(ctx, t, h, turnSpec(t, h), `{"mode":"hostile"}`)
	elapsed := time.Since(start)
	if !errors.Is(err, container.ErrAborted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v; want ErrAborted wrapping DeadlineExceeded", err)
	}
	if elapsed >= limit {
		t.Errorf("Run took %v; want < %v (the 1 s deadline, the engine's overrun, scheduling slack)", elapsed, limit)
	}
	t.Logf("hostile run failed after %v", elapsed)
}

// testImageMissing: a missing image fails the run with ErrImageMissing
// and is still missing after it (never pulled).
func testImageMissing(t *testing.T, h Harness) {
	ctx := context.Background()
	spec := turnSpec(t, h)
	spec.Image = "rtsandbox-test-missing:" + randomHex(4)
	_, err := run(ctx, t, h, spec, `{}`)
	if !errors.Is(err, container.ErrImageMissing) {
		t.Fatalf("Run = %v; want ErrImageMissing", err)
	}
	for ref, want := range map[string]bool{spec.Image: false, h.Image: true} {
		if ok, err := h.ImageExists(ctx, ref); ok != want || err != nil {
			t.Errorf("ImageExists(%q) = %v, %v; want %v", ref, ok, err, want)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
