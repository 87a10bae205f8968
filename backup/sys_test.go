package backup_test

import (
	"os"
	"syscall"
)

func ownerOf(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o600) }
