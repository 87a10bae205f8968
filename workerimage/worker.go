package workerimage

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Names shared by the sources, the build context and the Makefile.
const (
	// WorkerFile is the worker's file name next to the host executable,
	// in the build context, and (with a leading slash) in the image.
	WorkerFile = "rtsandbox-worker"
	// ModulePath is the module a source checkout must declare in go.mod.
	ModulePath = "github.com/rtsandbox/rtsandbox"
	// WorkerPackage is the only main package accepted as the worker.
	WorkerPackage = ModulePath + "/cmd/rtsandbox-worker"
	// maxWorkerSize bounds what is read from disk or packaged; the worker
	// is a few MiB.
	maxWorkerSize = 128 << 20
)

// ErrWorker marks a worker binary that is missing or unfit for the image.
var ErrWorker = errors.New("no usable worker binary")

// finder holds the environment WorkerBinary consults, so tests can point
// each source at fixtures.
type finder struct {
	embedded   []byte
	executable func() (string, error)
	getwd      func() (string, error)
	lookPath   func(string) (string, error)
}

// WorkerBinary returns a checked worker binary and a short description of
// where it came from, for the operator. Errors wrap ErrWorker; a candidate
// that exists but fails the check is an error, not a reason to try the
// next source, so a broken install is noticed instead of papered over.
func WorkerBinary(ctx context.Context) (worker []byte, source string, err error) {
	f := finder{embedded: embeddedWorker, executable: os.Executable, getwd: os.Getwd, lookPath: exec.LookPath}
	return f.find(ctx)
}

func (f finder) find(ctx context.Context) ([]byte, string, error) {
	if len(f.embedded) > 0 {
		return checked(f.embedded, "embedded in the host binary")
	}
	if path, ok := f.besideExecutable(); ok {
		bin, err := readLimited(path)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", ErrWorker, err)
		}
		return checked(bin, "file "+path)
	}
	root, ok := f.moduleRoot()
	if !ok {
		return nil, "", fmt.Errorf("%w: not embedded, no %s next to the executable, and the working directory is not inside a checkout of %s", ErrWorker, WorkerFile, ModulePath)
	}
	goTool, err := f.lookPath("go")
	if err != nil {
		return nil, "", fmt.Errorf("%w: source checkout at %s but no go toolchain on PATH: %w", ErrWorker, root, err)
	}
	bin, err := compiled.get(ctx, goTool, root)
	if err != nil {
		return nil, "", err
	}
	return checked(bin, "go build in "+root)
}

// compiled keeps, for the life of the process, the worker goBuild made in
// each checkout: the worker of a process that compiled it is then fixed,
// as an embedded one is, instead of following later edits of the source;
// and serve, turn or a test that refreshes the image again and again pays
// one compile, not one each time (about a CPU-second, and a second, even
// with a warm build cache, since the go command links anew).
var compiled = &workerCache{bins: map[string][]byte{}}

// workerCache is goBuild's result per checkout root. A failed or canceled
// build is not kept; two first calls at once may both compile, and one
// result is kept.
type workerCache struct {
	mu   sync.Mutex
	bins map[string][]byte
}

func (c *workerCache) get(ctx context.Context, goTool, root string) ([]byte, error) {
	c.mu.Lock()
	bin, ok := c.bins[root]
	c.mu.Unlock()
	if ok {
		return bin, nil
	}
	bin, err := goBuild(ctx, goTool, root)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept, ok := c.bins[root]; ok {
		return kept, nil
	}
	c.bins[root] = bin
	return bin, nil
}

func checked(bin []byte, source string) ([]byte, string, error) {
	if err := CheckWorker(bin); err != nil {
		return nil, "", fmt.Errorf("worker %s: %w", source, err)
	}
	return bin, source, nil
}

// besideExecutable returns the worker path next to the running
// executable. Symlinks are resolved first, so a binary linked into
// /usr/local/bin still finds the worker installed beside the real file.
func (f finder) besideExecutable() (string, bool) {
	exe, err := f.executable()
	if err != nil {
		return "", false
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	path := filepath.Join(filepath.Dir(exe), WorkerFile)
	fi, err := os.Stat(path)
	return path, err == nil && fi.Mode().IsRegular()
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bin, err := io.ReadAll(io.LimitReader(f, maxWorkerSize+1))
	if err == nil && len(bin) > maxWorkerSize {
		err = fmt.Errorf("%s is larger than %d bytes", path, maxWorkerSize)
	}
	return bin, err
}

// moduleRoot walks up from the working directory to the first go.mod and
// accepts it only if it declares this module; a go.mod of another module
// stops the walk, since that checkout cannot build our worker.
func (f finder) moduleRoot() (string, bool) {
	dir, err := f.getwd()
	if err != nil {
		return "", false
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			return dir, modulePath(data) == ModulePath
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// modulePath returns the path of the go.mod module directive, or "".
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module")
		if ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`+"`")
		}
	}
	return ""
}

// goBuild compiles the worker in root as a static Linux binary. GOOS is
// forced because the daemon runs Linux containers even when the host does
// not; the architecture stays the host's.
func goBuild(ctx context.Context, goTool, root string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "rtsandbox-worker-build-")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWorker, err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, WorkerFile)
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", out, WorkerPackage)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: go build %s: %w\n%s", ErrWorker, WorkerPackage, err, bytes.TrimSpace(msg))
	}
	return readLimited(out)
}

// CheckWorker reports whether bin can be the image's only file: a static
// Linux ELF executable built from WorkerPackage. Errors wrap ErrWorker.
func CheckWorker(bin []byte) error {
	if err := CheckStatic(bin); err != nil {
		return err
	}
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%w: no Go build information: %w", ErrWorker, err)
	}
	if info.Path != WorkerPackage {
		return fmt.Errorf("%w: built from %q, not %s", ErrWorker, info.Path, WorkerPackage)
	}
	return nil
}

// CheckStatic reports whether bin is a statically linked Linux ELF
// executable: no PT_INTERP (it would name a loader the scratch image does
// not have) and no dynamic section or segment. Errors wrap ErrWorker.
func CheckStatic(bin []byte) error {
	if len(bin) == 0 || len(bin) > maxWorkerSize {
		return fmt.Errorf("%w: size %d is outside 1..%d bytes", ErrWorker, len(bin), maxWorkerSize)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%w: not an ELF file: %w", ErrWorker, err)
	}
	defer f.Close()
	switch {
	case f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX:
		return fmt.Errorf("%w: ELF OS ABI %v is not Linux", ErrWorker, f.OSABI)
	case f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN:
		return fmt.Errorf("%w: ELF type %v is not an executable", ErrWorker, f.Type)
	case f.Section(".dynamic") != nil || f.Section(".interp") != nil:
		return fmt.Errorf("%w: dynamically linked (has .dynamic or .interp)", ErrWorker)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("%w: dynamically linked (program header %v)", ErrWorker, p.Type)
		}
	}
	return nil
}
