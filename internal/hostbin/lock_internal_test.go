package hostbin

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestBuildLockIsExclusive: while one GoBuild holds the build cache's
// lock, no other process or open file takes it; released, it is free.
// Two builds at once on an empty cache each compile what the other has
// not cached yet.
func TestBuildLockIsExclusive(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("GOCACHE", cache)
	unlock, err := lockBuilds(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.Open(filepath.Join(cache, LockName))
	if err != nil {
		t.Fatalf("the lock is not in GOCACHE: %v", err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock while a build holds the lock = %v; want EWOULDBLOCK", err)
	}
	unlock()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock after the build released the lock = %v; want nil", err)
	}
}

// TestBuildLockRefusesRelativeCache: a GOCACHE that is not an absolute
// directory ("off", or a relative path the go command would refuse) is an
// error, not a lock somewhere else.
func TestBuildLockRefusesRelativeCache(t *testing.T) {
	t.Setenv("GOCACHE", "off")
	if unlock, err := lockBuilds(t.Context()); err == nil {
		unlock()
		t.Fatal("lockBuilds with GOCACHE=off = nil error; want one")
	}
}
