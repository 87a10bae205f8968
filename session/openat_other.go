//go:build !linux

package session

import "golang.org/x/sys/unix"

// openAt opens name, one path component, relative to dirfd; O_NOFOLLOW in
// flags refuses a final link (openat2 is Linux-only).
func openAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	return unix.Openat(dirfd, name, flags, mode)
}
