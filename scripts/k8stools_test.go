package scripts_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestK8sControllersShareTheMainModulesVersions: every module
// tools/k8scontrollers (kwok, the agent-sandbox controller) requires at
// a version the main module also requires is at the main module's
// version. The tools build (scripts/k8s-tools.sh) compiles with the test
// command's shared flags (CGO off, -trimpath: internal/hostbin), so its
// compile of the client libraries, the API types and kustomize is the one
// go vet, staticcheck, the fuzz phase and the tests' builds reuse from the
// go command's cache; one version apart anywhere below them and a new
// machine compiles them twice.
func TestK8sControllersShareTheMainModulesVersions(t *testing.T) {
	main := requires(t, filepath.Join("..", "go.mod"))
	tools := requires(t, filepath.Join("..", "tools", "k8scontrollers", "go.mod"))
	shared := 0
	for path, v := range tools {
		mv, ok := main[path]
		if !ok {
			continue
		}
		shared++
		if mv != v {
			t.Errorf("tools/k8scontrollers requires %s %s, the main module %s: pin it to the main module's (go get %s@%s there)", path, v, mv, path, mv)
		}
	}
	if shared < 20 {
		t.Errorf("the two modules share %d requirements; the client libraries alone are more", shared)
	}
}

// requires reads a go.mod's requirements, path → version.
func requires(t *testing.T, gomod string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", gomod).Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s: %v", gomod, err)
	}
	var f struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, r := range f.Require {
		m[r.Path] = r.Version
	}
	return m
}
