package scripts_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestFuzzSmokeInstrumentsOwnPackagesOnly: scripts/fuzz-smoke.sh runs
// every fuzz target of a module (its root package's too) from binaries
// whose coverage counters cover the module's own packages and not the
// standard library or any other dependency (those compile as in the test
// command's other non-race builds, so the go command's cache shares them),
// and a target that fails fails the run.
func TestFuzzSmokeInstrumentsOwnPackagesOnly(t *testing.T) {
	mod := copyFixture(t, filepath.Join("testdata", "fuzzmod"))
	full := filepath.Join(t.TempDir(), "full.test")
	build := exec.Command("go", "test", "-c", "-fuzz=.", "-o", full, "./parse")
	build.Dir = mod
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c -fuzz=.: %v\n%s", err, b)
	}
	everything := counterBytes(t, full)
	if everything == 0 {
		t.Skipf("go test -fuzz instruments no package on %s", runtime.GOARCH)
	}

	bin := t.TempDir()
	out, err := runFuzzSmoke(t, mod, bin)
	if err != nil {
		t.Fatalf("fuzz-smoke.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"fuzz: ./parse FuzzPair (300x): ok", "fuzz: . FuzzWords (300x): ok", "fuzz: all 2 targets passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("fuzz-smoke.sh printed no %q:\n%s", want, out)
		}
	}
	// The package under test holds a few bytes of counters, the standard
	// library the testing package links some kilobytes: a tenth of
	// go test -fuzz's leaves room for the first and none for the second.
	if own := counterBytes(t, filepath.Join(bin, "parse.test")); own == 0 || own*10 > everything {
		t.Errorf("fuzz-smoke.sh's binary holds %d bytes of coverage counters, go test -fuzz's %d; want more than none and under a tenth", own, everything)
	}

	broken := copyFixture(t, filepath.Join("testdata", "fuzzmod"))
	failing := "package parse\n\nimport \"testing\"\n\nfunc FuzzAlwaysFails(f *testing.F) {\n\tf.Add(\"a=1\")\n\tf.Fuzz(func(t *testing.T, s string) { t.Fatalf(\"%q fails\", s) })\n}\n"
	if err := os.WriteFile(filepath.Join(broken, "parse", "fails_test.go"), []byte(failing), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runFuzzSmoke(t, broken, t.TempDir())
	if err == nil || !strings.Contains(out, "fuzz: ./parse FuzzAlwaysFails (300x): FAILED") {
		t.Errorf("fuzz-smoke.sh with a failing target: err %v, want a failure naming it:\n%s", err, out)
	}
}

func runFuzzSmoke(t *testing.T, root, bin string) (string, error) {
	t.Helper()
	cmd := exec.Command("./fuzz-smoke.sh")
	cmd.Env = append(os.Environ(), "FUZZROOT="+root, "FUZZBIN="+bin, "FUZZTIME=300x")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// counterBytes is the size of a binary's coverage counters, the section
// the linker gathers the compiler's -d=libfuzzer counters into.
func counterBytes(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".go.fuzzcntrs")
	if s == nil {
		return 0
	}
	return s.Size
}

// copyFixture copies a fixture into a new temporary directory: fuzzing
// writes a failing input under the package's testdata/fuzz, which must
// not land in the source tree.
func copyFixture(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}
