package workerimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/internal/hostbin"
)

// builtWorker compiles the real worker once per test binary through the
// go-build source, the path a fresh checkout takes.
var builtWorker = sync.OnceValues(func() ([]byte, error) {
	f := finder{executable: os.Executable, getwd: os.Getwd, lookPath: exec.LookPath}
	bin, source, err := f.find(context.Background())
	if err == nil && !strings.HasPrefix(source, "go build in ") {
		err = errors.New("unexpected source " + source)
	}
	return bin, err
})

func mustWorker(t *testing.T) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles the worker")
	}
	bin, err := builtWorker()
	if err != nil {
		t.Fatalf("building the worker from this checkout: %v", err)
	}
	return bin
}

func TestDockerfile(t *testing.T) {
	worker := []byte("not really a binary")
	sum := sha256.Sum256(worker)
	want := `FROM scratch
LABEL org.opencontainers.image.title="rtsandbox-worker" rtsandbox.worker.sha256="` + hex.EncodeToString(sum[:]) + `"
COPY rtsandbox-worker /rtsandbox-worker
USER 65534:65534
ENTRYPOINT ["/rtsandbox-worker"]
`
	if diff := cmp.Diff(want, Dockerfile(worker)); diff != "" {
		t.Errorf("Dockerfile mismatch (-want +got):\n%s", diff)
	}
	files := Context(worker)
	if len(files) != 2 || string(files["Dockerfile"]) != want || string(files[WorkerFile]) != string(worker) {
		t.Errorf("Context = %q; want the Dockerfile and %s only", files, WorkerFile)
	}
}

func TestCheckStaticRefuses(t *testing.T) {
	ls, err := os.ReadFile("/bin/ls")
	if err != nil {
		t.Skip("no /bin/ls to use as a dynamic binary:", err)
	}
	tests := []struct {
		name string
		bin  []byte
	}{
		{"empty", nil},
		{"not-elf", []byte("#!/bin/sh\necho hi\n")},
		{"dynamic-bin-ls", ls},
		{"truncated-elf", ls[:64]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckStatic(tt.bin); !errors.Is(err, ErrWorker) {
				t.Errorf("CheckStatic(%s) = %v; want ErrWorker", tt.name, err)
			}
			if err := CheckWorker(tt.bin); !errors.Is(err, ErrWorker) {
				t.Errorf("CheckWorker(%s) = %v; want ErrWorker", tt.name, err)
			}
		})
	}
}

func TestCheckAcceptsBuiltWorker(t *testing.T) {
	bin := mustWorker(t)
	if err := CheckStatic(bin); err != nil {
		t.Errorf("CheckStatic(worker) = %v; want nil", err)
	}
	if err := CheckWorker(bin); err != nil {
		t.Errorf("CheckWorker(worker) = %v; want nil", err)
	}
}

// A static binary of another package must not become the worker.
func TestCheckWorkerRefusesOtherProgram(t *testing.T) {
	mustWorker(t)
	out := filepath.Join(t.TempDir(), "other")
	if err := hostbin.GoBuild(t.Context(), ".", []string{"GOOS=linux"}, "-o", out, ModulePath+"/container/enginetest/testdata/echo"); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckStatic(bin); err != nil {
		t.Fatalf("CheckStatic(echo) = %v; want nil (it is static)", err)
	}
	if err := CheckWorker(bin); !errors.Is(err, ErrWorker) {
		t.Errorf("CheckWorker(echo) = %v; want ErrWorker", err)
	}
}

func TestModulePath(t *testing.T) {
	tests := []struct{ name, gomod, want string }{
		{"plain", "module github.com/rtsandbox/rtsandbox\n\ngo 1.26\n", ModulePath},
		{"quoted", "// c\nmodule \"github.com/rtsandbox/rtsandbox\"\n", ModulePath},
		{"other", "module example.com/other\n", "example.com/other"},
		{"prefix-word", "modules x\n", ""},
		{"none", "go 1.26\n", ""},
	}
	for _, tt := range tests {
		if got := modulePath([]byte(tt.gomod)); got != tt.want {
			t.Errorf("modulePath(%q) = %q; want %q", tt.gomod, got, tt.want)
		}
	}
}

// noExe is an executable path with no worker beside it.
func noExe(t *testing.T) func() (string, error) {
	dir := t.TempDir()
	return func() (string, error) { return filepath.Join(dir, "rtsandbox"), nil }
}

func wd(dir string) func() (string, error) { return func() (string, error) { return dir, nil } }

func noGo(string) (string, error) { return "", exec.ErrNotFound }

func TestFinderEmbedded(t *testing.T) {
	bin := mustWorker(t)
	f := finder{embedded: bin, executable: noExe(t), getwd: wd(t.TempDir()), lookPath: noGo}
	got, source, err := f.find(context.Background())
	if err != nil || source != "embedded in the host binary" || len(got) != len(bin) {
		t.Errorf("find() = %d bytes, %q, %v; want the embedded worker", len(got), source, err)
	}
	// A bad embedded binary is refused, not skipped for another source.
	f.embedded = []byte("junk")
	if _, _, err := f.find(context.Background()); !errors.Is(err, ErrWorker) {
		t.Errorf("find() with junk embedded = %v; want ErrWorker", err)
	}
}

func TestFinderBesideExecutable(t *testing.T) {
	bin := mustWorker(t)
	installed := t.TempDir()
	if err := os.WriteFile(filepath.Join(installed, WorkerFile), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(installed, "rtsandbox")
	if err := os.WriteFile(exe, []byte("host"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The host is reached through a symlink in another directory.
	link := filepath.Join(t.TempDir(), "rtsandbox")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	f := finder{executable: func() (string, error) { return link, nil }, getwd: wd(t.TempDir()), lookPath: noGo}
	got, source, err := f.find(context.Background())
	want := "file " + filepath.Join(installed, WorkerFile)
	if err != nil || source != want || len(got) != len(bin) {
		t.Errorf("find() = %d bytes, %q, %v; want %q", len(got), source, err, want)
	}
	if err := os.WriteFile(filepath.Join(installed, WorkerFile), []byte("junk"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.find(context.Background()); !errors.Is(err, ErrWorker) {
		t.Errorf("find() with a junk file = %v; want ErrWorker", err)
	}
}

func TestFinderNoSource(t *testing.T) {
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(other, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	ours := t.TempDir()
	if err := os.WriteFile(filepath.Join(ours, "go.mod"), []byte("module "+ModulePath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, wantText string
	}{
		{"other-module", sub, "not inside a checkout"},
		{"our-module-without-go", ours, "no go toolchain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := finder{executable: noExe(t), getwd: wd(tt.dir), lookPath: noGo}
			_, _, err := f.find(context.Background())
			if !errors.Is(err, ErrWorker) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("find() = %v; want ErrWorker mentioning %q", err, tt.wantText)
			}
		})
	}
}

// fakeStore records builds instead of talking to a daemon.
type fakeStore struct {
	exists bool
	builds map[string]map[string][]byte
}

func (s *fakeStore) ImageExists(context.Context, string) (bool, error) { return s.exists, nil }

func (s *fakeStore) BuildImage(_ context.Context, tag string, files map[string][]byte) error {
	if s.builds == nil {
		s.builds = map[string]map[string][]byte{}
	}
	s.builds[tag] = files
	return nil
}

func TestEnsureBuilt(t *testing.T) {
	bin := mustWorker(t)
	present := &fakeStore{exists: true}
	if built, err := EnsureBuilt(context.Background(), present, "x:1"); built || err != nil || len(present.builds) != 0 {
		t.Errorf("EnsureBuilt(present) = %v, %v (builds %d); want false, nil, no build", built, err, len(present.builds))
	}
	missing := &fakeStore{}
	if built, err := EnsureBuilt(context.Background(), missing, "x:1"); !built || err != nil {
		t.Fatalf("EnsureBuilt(missing) = %v, %v; want true, nil", built, err)
	}
	files := missing.builds["x:1"]
	if string(files["Dockerfile"]) != Dockerfile(bin) {
		t.Errorf("built Dockerfile = %q; want %q", files["Dockerfile"], Dockerfile(bin))
	}
}

func TestBuildFromRefusesDynamic(t *testing.T) {
	ls, err := os.ReadFile("/bin/ls")
	if err != nil {
		t.Skip(err)
	}
	s := &fakeStore{}
	if err := BuildFrom(context.Background(), s, "x:1", ls); !errors.Is(err, ErrWorker) || len(s.builds) != 0 {
		t.Errorf("BuildFrom(/bin/ls) = %v (builds %d); want ErrWorker and no build", err, len(s.builds))
	}
}

// TestWorkerCompiledOncePerCheckout: the go-build source compiles once per
// checkout for the life of the process, and a failed build is not kept,
// so the next call compiles again.
func TestWorkerCompiledOncePerCheckout(t *testing.T) {
	dir := t.TempDir()
	calls, fail := filepath.Join(dir, "calls"), filepath.Join(dir, "fail")
	// A stand-in go: counts its calls, fails while the fail file exists,
	// and otherwise writes its -o argument.
	goTool := filepath.Join(dir, "go")
	script := "#!/bin/sh\necho x >>" + calls + "\n[ -e " + fail + " ] && exit 1\n" +
		"while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo \"$PWD\" >\"$2\"; fi; shift; done\n"
	if err := os.WriteFile(goTool, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	rootA, rootB := t.TempDir(), t.TempDir()
	count := func() int {
		b, _ := os.ReadFile(calls)
		return strings.Count(string(b), "x")
	}
	c := &workerCache{bins: map[string][]byte{}}
	if err := os.WriteFile(fail, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.get(context.Background(), goTool, rootA); !errors.Is(err, ErrWorker) {
		t.Fatalf("failed build: err = %v; want ErrWorker", err)
	}
	if err := os.Remove(fail); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		bin, err := c.get(context.Background(), goTool, rootA)
		if err != nil || strings.TrimSpace(string(bin)) != rootA {
			t.Fatalf("get(A) = %q, %v; want the build made in %s", bin, err, rootA)
		}
	}
	if bin, err := c.get(context.Background(), goTool, rootB); err != nil || strings.TrimSpace(string(bin)) != rootB {
		t.Fatalf("get(B) = %q, %v; want the build made in %s", bin, err, rootB)
	}
	if got := count(); got != 3 {
		t.Errorf("go ran %d times; want 3 (the failure, A once, B once)", got)
	}
}
