// Package privdir is the one place that creates and checks the host's
// private directories and reads and writes the state files in them.
//
// The rules, each fail closed (a check that cannot be made refuses):
//
//   - Make creates a directory 0700 when missing and returns its canonical
//     path after Check: a directory (not a link) owned by the effective uid
//     with no group or other permission bits. A link at the given path must
//     itself belong to the effective uid or root, and every directory above
//     the canonical path must belong to one of them and be writable by
//     others only when sticky (as /tmp): otherwise another user could plant
//     or swap the path (say, a link at a fixed /tmp name pointing into one
//     of the service user's private directories).
//   - ReadFile never follows a final symlink and never blocks on a FIFO or
//     device: it opens O_NOFOLLOW|O_NONBLOCK, requires a regular file and
//     reads at most the caller's bound. A planted FIFO or link is an error,
//     at once.
//   - Lock takes an exclusive, non-blocking flock on a directory or a lock
//     file, so that one process at a time owns a piece of state.
//   - WriteFile replaces a file so that a crash leaves the old or the new
//     content, never a torn one: a fresh temp file (O_EXCL, 0600) in the
//     same directory, fsync, rename (the commit point), fsync of the
//     directory.
package privdir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Error classes. Test with errors.Is.
var (
	// ErrNotPrivate: a directory or file is not private to the service.
	ErrNotPrivate = errors.New("not private to this service")
	// ErrNotRegular: a state file is a link, FIFO, device or directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: a state file exceeds the caller's bound.
	ErrTooLarge = errors.New("file exceeds its size bound")
	// ErrLocked: another open file description (in any process) holds the
	// lock.
	ErrLocked = errors.New("in use by another process")
)

// Lock takes an exclusive, non-blocking flock on path: an existing
// directory (not a link), or else a lock file, created 0600 when missing,
// that must be a regular file owned by the effective uid. flock belongs to
// the open file description, so a second Lock in the same process is
// refused too. Closing the returned file releases the lock.
func Lock(path string) (*os.File, error) {
	flags := os.O_RDWR | os.O_CREATE | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	if fi, err := os.Lstat(path); err == nil && fi.IsDir() {
		flags = os.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.IsDir() {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() {
			err = ErrNotPrivate
		}
	}
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			err = ErrLocked
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// Make creates dir (0700, parents too) when missing and returns its
// canonical path after Check with the effective uid.
func Make(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("private directory: empty path: %w", ErrNotPrivate)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("private directory: %w", err)
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink != 0 && !trusted(fi) {
		return "", fmt.Errorf("%s is a link another user owns: %w", dir, ErrNotPrivate)
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return "", fmt.Errorf("private directory: %w", err)
	}
	if err := Check(abs, os.Geteuid()); err != nil {
		return "", err
	}
	if err := checkAncestors(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// trusted reports whether fi belongs to the effective uid or root.
func trusted(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && (int(st.Uid) == os.Geteuid() || st.Uid == 0)
}

// checkAncestors requires every directory above dir (a canonical path) to
// belong to the effective uid or root and to be writable by group or others
// only when sticky, so nobody else can rename or replace dir.
func checkAncestors(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return fmt.Errorf("private directory: %w", err)
		}
		if !trusted(fi) || (fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0) {
			return fmt.Errorf("%s (above %s) can be changed by another user: %w", d, dir, ErrNotPrivate)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// Check requires dir to be a directory, not a link to one, owned by uid,
// with mode bits for its owner only.
func Check(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("private directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != uid || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("directory %s (mode %v): %w", dir, fi.Mode().Perm(), ErrNotPrivate)
	}
	return nil
}

// ReadFile reads path, a regular file of at most max bytes, without
// following a final symlink and without blocking on a FIFO. It returns
// os.ErrNotExist (wrapped) when the file is absent. When owner >= 0 the
// file must belong to that uid.
func ReadFile(path string, max int64, owner int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); owner >= 0 && (!ok || int(st.Uid) != owner) {
		return nil, fmt.Errorf("%s: %w", path, ErrNotPrivate)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes: %w", path, fi.Size(), ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	return data, nil
}

// WriteFile atomically replaces path with data (mode 0600). The temp file
// has a random name and is created O_EXCL, so neither a leftover file nor
// a link planted at a temp name is ever written through.
func WriteFile(path string, data []byte) error { return WriteFileWith(path, data, nil) }

// WriteFileWith is WriteFile that calls prepare (when not nil) on the
// temp file, written whole, before it replaces path: to hand it to
// another user, say, so that path never names a file its reader cannot
// open yet. A prepare error fails the write and leaves path as it was.
func WriteFileWith(path string, data []byte, prepare func(tmp string) error) error {
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (it crashes instead)
	tmp := path + ".tmp-" + hex.EncodeToString(r[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && prepare != nil {
		err = prepare(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp) // ours: the O_EXCL create succeeded
		return fmt.Errorf("write %s: %w", path, err)
	}
	syncDir(filepath.Dir(path))
	return nil
}

// syncDir makes the rename durable. The rename is the commit point: after
// it the file holds the new content, so a directory that cannot be synced
// (some filesystems refuse) is not reported as a failed write, which would
// make a caller's memory disagree with the file.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
