// Package hostbin builds this module's binaries for tests with the flags
// `make build` uses: CGO off and -trimpath.
//
// Build makes the host binary exactly as `make build` does: a static worker
// (GOOS=linux), then a static bin/rtsandbox that embeds it (tag
// embedworker), without writing into the checkout: a build overlay puts
// the worker where the embed directive looks. GoBuild is the one way a
// test compiles any other binary of the module (a worker, a stand-in).
//
// One set of flags, and one build at a time, because of what a build costs
// on a machine whose build cache is empty (CI's first run):
//   - the go command's cache keys a compile by its flags, so a package
//     built with CGO on and with CGO off, or with and without -trimpath,
//     is compiled twice. The test command's non-race phases, its fuzz
//     builds and the Kubernetes tools build with these same flags
//     (scripts/test.sh, scripts/fuzz-smoke.sh, scripts/k8s-tools.sh), so a
//     dependency compiles once for all of them. Built with CGO on, the host
//     binary's dependencies alone compiled a second time for 137
//     CPU-seconds;
//   - two go commands building at once do not share work: each compiles
//     every package neither finds in the cache. Test binaries run side by
//     side, and two of them building the host binary at once compiled its
//     whole tree twice. GoBuild holds an exclusive lock, a file in the
//     build cache's directory, while it builds, so the second build finds
//     the first's packages in the cache. Once the cache is warm a build is
//     mostly linking, and the wait is seconds.
package hostbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// WorkerFile is the worker's name beside the host binary and in
// workerimage/, where the embed directive reads it (workerimage.WorkerFile;
// a test holds them equal: this package may not import workerimage, which
// only cmd/ and host/ wire).
const WorkerFile = "rtsandbox-worker"

// Build compiles the module at root into dir/rtsandbox (with the worker
// beside it, dir/rtsandbox-worker) and returns the host binary's path.
func Build(tb testing.TB, root, dir string) string {
	tb.Helper()
	ctx := tb.Context()
	worker := filepath.Join(dir, WorkerFile)
	if err := GoBuild(ctx, root, []string{"GOOS=linux"}, "-ldflags=-s -w", "-o", worker, "./cmd/rtsandbox-worker"); err != nil {
		tb.Fatal(err)
	}
	overlay := filepath.Join(tb.TempDir(), "overlay.json")
	spec := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(root, "workerimage", WorkerFile), worker)
	if err := os.WriteFile(overlay, []byte(spec), 0o644); err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(dir, "rtsandbox")
	if err := GoBuild(ctx, root, nil, "-tags", "embedworker", "-overlay", overlay, "-o", bin, "./cmd/rtsandbox"); err != nil {
		tb.Fatal(err)
	}
	return bin
}

// GoBuild runs `go build -trimpath args...` in dir with CGO_ENABLED=0 and
// env added to this process's environment, while no other GoBuild that
// shares the build cache runs, in this process or another. The error
// carries the command's output.
func GoBuild(ctx context.Context, dir string, env []string, args ...string) error {
	unlock, err := lockBuilds(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-trimpath"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %q in %s: %w\n%s", args, dir, err, out)
	}
	return nil
}

// LockName is the lock file's name in the go command's build cache
// directory (GOCACHE), beside the cache's own files, which the go command
// alone names and trims.
const LockName = "rtsandbox-build.lock"

// lockBuilds takes the build cache's lock, waiting for it. The file lives
// in the cache directory because the cache is what it guards: every
// process that shares the cache sees the same lock, and a test that points
// GOCACHE at a directory of its own leaves nothing outside it.
func lockBuilds(ctx context.Context) (unlock func(), err error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOCACHE: %w", err)
	}
	cache := strings.TrimSpace(string(out))
	if !filepath.IsAbs(cache) {
		return nil, fmt.Errorf("build lock: GOCACHE is %q, not a directory", cache)
	}
	if err := os.MkdirAll(cache, 0o777); err != nil { // as the go command makes it
		return nil, fmt.Errorf("build lock: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(cache, LockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("build lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}
