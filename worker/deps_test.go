package worker

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/hostbin"
)

// The worker runs inside the sealed container, so its dependency set is
// policy: only the standard library, the root domain package and the
// stdlib-only leaves jsonjs, brokerclient, skills, internal/privdir and
// internal/subpath.
// Anything else could bring network clients, cgo or host code in.
func TestWorkerImportsOnlyStdlibAndRoot(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rtsandbox/rtsandbox/cmd/rtsandbox-worker").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{
		"github.com/rtsandbox/rtsandbox":                      true,
		"github.com/rtsandbox/rtsandbox/wire":                 true,
		"github.com/rtsandbox/rtsandbox/jsonjs":               true,
		"github.com/rtsandbox/rtsandbox/brokerclient":         true,
		"github.com/rtsandbox/rtsandbox/skills":               true,
		"github.com/rtsandbox/rtsandbox/internal/privdir":     true,
		"github.com/rtsandbox/rtsandbox/internal/subpath":     true,
		"github.com/rtsandbox/rtsandbox/worker":               true,
		"github.com/rtsandbox/rtsandbox/cmd/rtsandbox-worker": true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(pkg, "/")
		if !strings.Contains(first, ".") || allowed[pkg] {
			continue
		}
		t.Errorf("rtsandbox-worker depends on %s; want only the standard library, the root package, wire, jsonjs, brokerclient, skills, privdir and subpath", pkg)
	}
}

// The image is distroless or scratch, so the binary must link statically.
func TestWorkerBuildsWithoutCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	if err := hostbin.GoBuild(t.Context(), ".", nil, "-o", filepath.Join(t.TempDir(), "rtsandbox-worker"), "github.com/rtsandbox/rtsandbox/cmd/rtsandbox-worker"); err != nil {
		t.Fatalf("CGO_ENABLED=0 %v", err)
	}
}
