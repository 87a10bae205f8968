//go:build !linux

package session

import (
	"context"
	"errors"

	"golang.org/x/sys/unix"
)

// The hard bound needs Linux (loop devices, ext4); elsewhere the mode is
// never hard and there is nothing to mount or unmount.

var errNotLinux = errors.New("the hard disk bound needs Linux")

func probeDisk(int) DiskSupport { return DiskSupport{Reason: "this host does not run Linux"} }

func currentImage(string, string) (string, bool, error) { return "", false, nil }

func (d *disk) mountImage(context.Context, string, string) (string, error) { return "", errNotLinux }

func detachImage(string) (bool, error) { return false, nil }

func mountedRoots(string) ([]string, error) { return nil, nil }

func renameNoReplace(olddir int, oldname string, newdir int, newname string) error {
	return unix.Renameat(olddir, oldname, newdir, newname)
}
