package session

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// [SEC] docs/session.md, "Directories and defences" openDirectoryFile: a descriptor-anchored open never follows
// a link at the name, and a create never writes through one; on kernels
// with openat2 a path that climbs out of the directory is refused too.
func TestSecOpenAtRefusesLinks(t *testing.T) {
	dir := shortDir(t)
	outside := filepath.Join(shortDir(t), "target")
	if err := os.WriteFile(outside, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	fd, err := openDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if got, err := readFileAt(fd, "link", 100); err == nil {
		t.Errorf("read through a link: %q", got)
	}
	if err := writeNewFileAt(fd, "link", []byte("guest")); err == nil {
		t.Error("created through a link")
	}
	if data, _ := os.ReadFile(outside); string(data) != "host" {
		t.Errorf("target = %q", data)
	}
	for _, name := range []string{"", ".", "..", "a/b", `a\b`} {
		if err := writeNewFileAt(fd, name, nil); err == nil {
			t.Errorf("created %q", name)
		}
	}
	if pfd, err := unix.Openat2(fd, ".", &unix.OpenHow{Flags: unix.O_RDONLY}); err == nil {
		unix.Close(pfd)
		if nfd, err := openAt(fd, "../"+filepath.Base(dir), unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			unix.Close(nfd)
			t.Error("openat2 let a path climb out of its directory")
		}
	} else {
		t.Logf("kernel without openat2 (%v): the openat fallback is in use", err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if nfd, err := openAt(fd, "dirlink", unix.O_RDONLY|unix.O_NOFOLLOW, 0); err == nil {
		unix.Close(nfd)
		t.Error("opened a link")
	}
}
