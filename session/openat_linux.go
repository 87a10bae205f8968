package session

import (
	"errors"

	"golang.org/x/sys/unix"
)

// openAt opens name, one path component, relative to dirfd. It prefers
// openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS
// (Linux 5.6+), which refuses any link and any escape from dirfd; on a
// kernel or seccomp profile without openat2 it falls back to openat, where
// O_NOFOLLOW in flags refuses a final link and the single component leaves
// nothing else to follow.
func openAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   uint64(flags),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) { // EPERM: a seccomp profile that predates openat2
		return unix.Openat(dirfd, name, flags, mode)
	}
	return fd, err
}
