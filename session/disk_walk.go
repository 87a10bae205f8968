package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The host's walks of a guest-owned workspace: measuring it (soft mode),
// pruning old outbox and attachment files, freeing a full workspace and
// moving a workspace into a new image. Every step is relative to a
// directory descriptor opened without following a link (openAt refuses
// any link), entries are judged by lstat (AT_SYMLINK_NOFOLLOW), only
// directories are ever opened to descend, files only to copy (no-follow,
// non-blocking, regular by fstat), and every walk is bounded in depth and
// in entries. A link a guest planted is counted, copied or removed as a
// link, never followed; a FIFO never blocks a walk.

// diskUse is a workspace's use against its bound.
type diskUse struct {
	bytes, maxBytes int64 // allocated bytes
	files, maxFiles int   // entries (files, directories, links …)
	deep            bool  // a directory below maxWalkDepth was not measured
}

// over names the bound u leaves less than the reserve of ("size",
// "files", or "depth" for a tree too deep to measure), or "".
func (u diskUse) over(reserveBytes int64, reserveFiles int) string {
	switch {
	case u.deep:
		return "depth"
	case u.bytes > u.maxBytes-reserveBytes:
		return "size"
	case u.files > u.maxFiles-reserveFiles:
		return "files"
	}
	return ""
}

// roomy reports whether a tenth of each bound is free.
func (u diskUse) roomy() bool {
	return u.over(u.maxBytes/roomyDivisor, u.maxFiles/roomyDivisor) == ""
}

// openSub opens the directory dirfd/name without following a link.
func openSub(dirfd int, name string) (int, error) {
	return openAt(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// eachEntry calls fn with the name and lstat of every entry of the
// directory fd, reading names in batches; fn returns false to stop.
// Entries that vanish meanwhile are skipped.
func eachEntry(fd int, fn func(name string, st *unix.Stat_t) (bool, error)) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(dup), "dir")
	defer dir.Close()
	// A duplicate shares the directory's offset: a second read of fd
	// starts from the beginning, not where the first one ended.
	if _, err := unix.Seek(dup, 0, io.SeekStart); err != nil {
		return err
	}
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return err
			}
			if more, err := fn(name, &st); err != nil || !more {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

// measure walks the workspace ws and counts its entries and their
// allocated bytes (st_blocks, so a sparse file counts what it holds). It
// stops as soon as either passes maxBytes or maxFiles: the workspace is
// over its bound then, and how far over does not matter.
func measure(ws string, maxBytes int64, maxFiles int) (diskUse, error) {
	u := diskUse{maxBytes: maxBytes, maxFiles: maxFiles}
	fd, err := openDir(ws)
	if err != nil {
		return u, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(fd)
	err = u.walk(fd, 1)
	return u, err
}

func (u *diskUse) walk(fd, depth int) error {
	return eachEntry(fd, func(name string, st *unix.Stat_t) (bool, error) {
		u.files++
		u.bytes += st.Blocks * 512
		if u.over(0, 0) != "" {
			return false, nil
		}
		if !isDir(st) {
			return true, nil
		}
		if depth >= maxWalkDepth {
			u.deep = true
			return false, nil
		}
		sub, err := openSub(fd, name)
		if err != nil {
			return true, nil // replaced meanwhile: counted as it was
		}
		defer unix.Close(sub)
		return u.over(0, 0) == "", u.walk(sub, depth+1)
	})
}

// pruner removes old entries within a budget of entries looked at.
type pruner struct {
	cutoff  int64 // unix seconds: entries modified before it go
	budget  int
	removed int
}

// prune removes, under ws/outbox and ws/attachments, the files (and
// links, FIFOs …) modified before cutoff and the directories that were
// older and are empty afterwards, looking at no more than budget entries.
// A link or file planted where outbox/ or attachments/ should be is not
// followed: it is neither a directory to prune nor removed.
func prune(ws string, cutoff time.Time, budget int) (int, error) {
	fd, err := openDir(ws)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(fd)
	p := &pruner{cutoff: cutoff.Unix(), budget: budget}
	for _, name := range []string{outboxName, attachmentName} {
		sub, err := openSub(fd, name)
		if err != nil {
			continue // missing, a link or not a directory
		}
		err = p.dir(sub, 1)
		unix.Close(sub)
		if err != nil {
			return p.removed, err
		}
	}
	return p.removed, nil
}

func (p *pruner) dir(fd, depth int) error {
	return eachEntry(fd, func(name string, st *unix.Stat_t) (bool, error) {
		if p.budget <= 0 {
			return false, nil
		}
		p.budget--
		old := st.Mtim.Sec < p.cutoff
		if !isDir(st) {
			if old && unix.Unlinkat(fd, name, 0) == nil {
				p.removed++
			}
			return true, nil
		}
		if depth >= maxWalkDepth {
			return true, nil
		}
		if sub, err := openSub(fd, name); err == nil {
			err = p.dir(sub, depth+1)
			unix.Close(sub)
			if err != nil {
				return false, err
			}
		}
		if old && unix.Unlinkat(fd, name, unix.AT_REMOVEDIR) == nil { // ENOTEMPTY keeps it
			p.removed++
		}
		return true, nil
	})
}

// removeEntry removes dirfd/name and everything below it without
// following a link, and returns how many entries went. A tree deeper than
// maxWalkDepth is not beyond reach: its subdirectories at that depth are
// moved up beside name (renameat within the same filesystem) and removed
// from there, so no more than maxWalkDepth directories are open at once.
func removeEntry(dirfd int, name string) (int, error) {
	todo := []string{name}
	n := 0
	for i := 0; len(todo) > 0; i++ {
		next := todo[0]
		todo = todo[1:]
		r := remover{top: dirfd, prefix: fmt.Sprintf(".rtsandbox-deep-%d-", i)}
		err := r.entry(dirfd, next, 1)
		n += r.removed
		todo = append(todo, r.hoisted...)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// remover removes one tree and collects the subtrees it hoisted.
type remover struct {
	top     int
	prefix  string
	hoisted []string
	removed int
}

func (r *remover) entry(dirfd int, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if !isDir(&st) {
		return r.unlink(dirfd, name, 0)
	}
	sub, err := openSub(dirfd, name)
	if err != nil {
		return err
	}
	defer unix.Close(sub)
	// Entries removed while a directory is read may hide others from that
	// read; a directory still not empty is read again.
	for range 3 {
		if err := r.children(sub, depth); err != nil {
			return err
		}
		err = r.unlink(dirfd, name, unix.AT_REMOVEDIR)
		if !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
	}
	return err
}

// children removes the entries of the directory fd at depth, hoisting
// subdirectories below maxWalkDepth.
func (r *remover) children(fd, depth int) error {
	return eachEntry(fd, func(child string, cst *unix.Stat_t) (bool, error) {
		if isDir(cst) && depth >= maxWalkDepth {
			hoisted, err := r.hoist(fd, child)
			if err != nil {
				return false, err
			}
			r.hoisted = append(r.hoisted, hoisted)
			return true, nil
		}
		return true, r.entry(fd, child, depth+1)
	})
}

// hoist moves the directory fd/name up to r.top under a name of its own,
// never replacing an entry that is there.
func (r *remover) hoist(fd int, name string) (string, error) {
	for i := 0; ; i++ {
		to := fmt.Sprintf("%s%d-%d", r.prefix, len(r.hoisted), i)
		err := renameNoReplace(fd, name, r.top, to)
		if !errors.Is(err, unix.EEXIST) || i == 100 {
			return to, err
		}
	}
}

func (r *remover) unlink(dirfd int, name string, flags int) error {
	if err := unix.Unlinkat(dirfd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	r.removed++
	return nil
}

// copyTree copies the entries of the directory src into the directory dst
// (another filesystem): directories, regular files and links as they
// are, with their owner, permission bits (setuid, setgid and sticky
// dropped) and modification time; FIFOs, sockets and devices are skipped.
// A tree deeper than maxWalkDepth, or one that does not fit dst (ENOSPC),
// is an error.
func copyTree(src, dst, depth int) error {
	if depth > maxWalkDepth {
		return fmt.Errorf("workspace deeper than %d directories", maxWalkDepth)
	}
	return eachEntry(src, func(name string, st *unix.Stat_t) (bool, error) {
		var err error
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = copyDir(src, dst, name, st, depth)
		case unix.S_IFREG:
			err = copyFile(src, dst, name, st)
		case unix.S_IFLNK:
			err = copyLink(src, dst, name, st)
		default:
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("copy %s: %w", name, err)
		}
		return true, nil
	})
}

func copyDir(src, dst int, name string, st *unix.Stat_t, depth int) error {
	if err := unix.Mkdirat(dst, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	from, err := openSub(src, name)
	if err != nil {
		return err
	}
	defer unix.Close(from)
	to, err := openSub(dst, name)
	if err != nil {
		return err
	}
	defer unix.Close(to)
	if err := copyTree(from, to, depth+1); err != nil {
		return err
	}
	return keepAttrs(to, st)
}

func copyFile(src, dst int, name string, st *unix.Stat_t) error {
	in, err := openAt(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	from := os.NewFile(uintptr(in), name)
	defer from.Close()
	if fi, err := from.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file", name)
	}
	out, err := openAt(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	to := os.NewFile(uintptr(out), name)
	defer to.Close()
	if _, err := io.Copy(to, from); err != nil {
		return err
	}
	return keepAttrs(out, st)
}

func copyLink(src, dst int, name string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(src, name, buf)
	if err != nil {
		return err
	}
	if err := unix.Symlinkat(string(buf[:n]), dst, name); err != nil {
		return err
	}
	if err := unix.Fchownat(dst, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(dst, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// keepAttrs gives the copy fd the owner, permission bits and times of st.
func keepAttrs(fd int, st *unix.Stat_t) error {
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o777); err != nil {
		return err
	}
	return unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(unix.TimespecToNsec(st.Atim)), unix.NsecToTimeval(unix.TimespecToNsec(st.Mtim))})
}
