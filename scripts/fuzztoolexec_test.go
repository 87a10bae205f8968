package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTool stands in for the compiler and the linker: it prints its
// version line as the real ones do, or the arguments it was given.
const fakeTool = `#!/usr/bin/env bash
if [ "$*" = "-V=full" ]; then echo "$(basename "$0") version go1.26.8"; exit 0; fi
echo "$*"
`

// TestFuzzToolexecInstrumentsOwnPackagesOnly: scripts/fuzz-toolexec.sh
// drops the compiler's coverage instrumentation (-d=libfuzzer) from every
// package outside the module, keeps it for the module's own (their test
// variants included), passes every other tool through untouched, and
// gives the compiler's version line a suffix so that the go command's
// cache keeps the two kinds of build apart.
func TestFuzzToolexecInstrumentsOwnPackagesOnly(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"compile", "link"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(fakeTool), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		tool string
		args string
		want string
	}{
		{"dependency", "compile", "-o x.a -p golang.org/x/net/html -d=libfuzzer a.go", "-o x.a -p golang.org/x/net/html a.go"},
		{"standard-library", "compile", "-p encoding/json -d=libfuzzer a.go", "-p encoding/json a.go"},
		{"test-main", "compile", "-p main -d=libfuzzer _testmain.go", "-p main _testmain.go"},
		{"look-alike-module", "compile", "-p github.com/rtsandbox/rtsandboxes/x -d=libfuzzer a.go", "-p github.com/rtsandbox/rtsandboxes/x a.go"},
		{"module-root", "compile", "-p github.com/rtsandbox/rtsandbox -d=libfuzzer a.go", "-p github.com/rtsandbox/rtsandbox -d=libfuzzer a.go"},
		{"own-package", "compile", "-p github.com/rtsandbox/rtsandbox/worker -d=libfuzzer a.go", "-p github.com/rtsandbox/rtsandbox/worker -d=libfuzzer a.go"},
		{"own-external-test", "compile", "-p github.com/rtsandbox/rtsandbox/worker_test -d=libfuzzer a_test.go", "-p github.com/rtsandbox/rtsandbox/worker_test -d=libfuzzer a_test.go"},
		{"compiler-version", "compile", "-V=full", "compile version go1.26.8 rtsandbox-fuzz-own-packages"},
		{"linker-version", "link", "-V=full", "link version go1.26.8"},
		{"linker", "link", "-o a.test -d=libfuzzer a.a", "-o a.test -d=libfuzzer a.a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{filepath.Join(dir, tt.tool)}, strings.Fields(tt.args)...)
			out, err := exec.Command("./fuzz-toolexec.sh", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("fuzz-toolexec.sh %s: %v\n%s", tt.args, err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Errorf("fuzz-toolexec.sh %s %s ran %q; want %q", tt.tool, tt.args, got, tt.want)
			}
		})
	}
}
