// Package hostbin builds the host binary for tests exactly as `make build`
// does: a static worker (CGO off, GOOS=linux), then a static
// bin/rtsandbox that embeds it (tag embedworker), without writing into
// the checkout: a build overlay puts the worker where the embed directive
// looks.
package hostbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	worker := filepath.Join(dir, WorkerFile)
	goBuild(tb, root, []string{"GOOS=linux"}, "-ldflags=-s -w", "-o", worker, "./cmd/rtsandbox-worker")
	overlay := filepath.Join(tb.TempDir(), "overlay.json")
	spec := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(root, "workerimage", WorkerFile), worker)
	if err := os.WriteFile(overlay, []byte(spec), 0o644); err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(dir, "rtsandbox")
	goBuild(tb, root, nil, "-tags", "embedworker", "-overlay", overlay, "-o", bin, "./cmd/rtsandbox")
	return bin
}

func goBuild(tb testing.TB, root string, env []string, args ...string) {
	tb.Helper()
	cmd := exec.Command("go", append([]string{"build", "-trimpath"}, args...)...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %q: %v\n%s", args, err, out)
	}
}
