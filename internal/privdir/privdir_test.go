package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestMakeCreatesPrivateWhateverTheUmask(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b") // before the umask: TempDir honours it
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	got, err := Make(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(got); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("Make = %v, %v; want 0700", fi.Mode(), err)
	}
}

func TestCheckRefuses(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(private, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, link, file} {
		if err := Check(dir, os.Geteuid()); !errors.Is(err, ErrNotPrivate) {
			t.Errorf("Check(%s) = %v; want ErrNotPrivate", filepath.Base(dir), err)
		}
	}
	if err := Check(private, os.Geteuid()+1); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("Check(another uid) = %v; want ErrNotPrivate", err)
	}
	if err := Check(private, os.Geteuid()); err != nil {
		t.Errorf("Check(private) = %v", err)
	}
}

// TestReadFileNeverBlocksOrFollows: a FIFO is refused at once and a link
// is not followed.
func TestReadFileNeverBlocksOrFollows(t *testing.T) {
	base := t.TempDir()
	fifo := filepath.Join(base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink("/etc/hostname", link); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, p := range []string{fifo, link} {
		if _, err := ReadFile(p, 1<<20, -1); !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFile(%s) = %v; want ErrNotRegular", filepath.Base(p), err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("ReadFile took %v", d)
	}
	if _, err := ReadFile(filepath.Join(base, "missing"), 1, -1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v; want ErrNotExist", err)
	}
}

func TestReadFileBoundsAndOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path, 4, -1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile(5 bytes, max 4) = %v; want ErrTooLarge", err)
	}
	if b, err := ReadFile(path, 5, os.Geteuid()); err != nil || string(b) != "12345" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	if _, err := ReadFile(path, 5, os.Geteuid()+1); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("ReadFile(other owner) = %v; want ErrNotPrivate", err)
	}
}

// TestWriteFileNeverWritesThroughALink: a link planted beside the target
// (at any temp name) is never written through, and no temp file is left.
func TestWriteFileNeverWritesThroughALink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.json")
	if err := os.Symlink(outside, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("outside = %q; want untouched", b)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Errorf("state = %q; want new", b)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 3 {
		t.Errorf("dir holds %d entries; want outside, the link and the state file", len(names))
	}
}

// TestMakeRefusesPlantedLinkAndOpenParents: a link at the given path that
// another user owns, or a parent another user can write without the sticky
// bit, is refused.
func TestMakeRefusesPlantedLinkAndOpenParents(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // world-writable, not sticky
		t.Fatal(err)
	}
	if _, err := Make(filepath.Join(open, "state")); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("Make under a world-writable parent = %v; want ErrNotPrivate", err)
	}
	if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil { // as /tmp
		t.Fatal(err)
	}
	if _, err := Make(filepath.Join(open, "state")); err != nil {
		t.Errorf("Make under a sticky parent = %v; want it accepted", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("planting another user's link needs root")
	}
	target := filepath.Join(base, "private")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "planted")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if _, err := Make(link); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("Make(a link another user planted) = %v; want ErrNotPrivate", err)
	}
	own := filepath.Join(open, "mine")
	if err := os.Symlink(target, own); err != nil {
		t.Fatal(err)
	}
	if got, err := Make(own); err != nil || got != target {
		t.Errorf("Make(own link) = %q, %v; want %q", got, err, target)
	}
}
