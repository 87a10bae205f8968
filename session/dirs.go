package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
	"golang.org/x/sys/unix"
)

// The party directory layout (docs/session.md, "Directories and defences"):
//
//	<party>/<segment>/              0700, the host's; realpath == path
//	  .channel-key                  the exact channel key (alias record)
//	  run/                          broker.sock; mounted read-only
//	  workspace/                    mounted read-write: the guest's
//	    sessions/ attachments/ outbox/
//
// Everything under workspace/ is guest-owned while a container runs: the
// host replaces what a guest planted there (ownDirectory) and never
// follows it, and it moves files there only through directory
// descriptors, after the container is gone (StartFresh).

// Names inside a channel's directory.
const (
	keyFile        = ".channel-key"
	runName        = "run"
	workspaceName  = "workspace"
	sessionsName   = "sessions"
	attachmentName = "attachments"
	outboxName     = "outbox"
	archiveName    = "archive"
	maxSocketPath  = 100
)

// checkChannel refuses keys that are invalid (longer than
// rtsandbox.MaxChannelKey bytes, too).
func checkChannel(channel rtsandbox.ChannelKey) error {
	if !channel.Valid() {
		return rtsandbox.ErrChannelKey
	}
	return nil
}

// dirs are a channel's canonical directories.
type dirs struct {
	root, run, workspace string
}

func (d dirs) socket() string { return filepath.Join(d.run, wire.SessionSocketName) }

// channelRoot runs the alias check (docs/session.md, "Directories and defences") and returns the channel's root:
// it moves a directory of the channel's under its earlier lossy name to
// its segment (migrate), creates the root 0700, refuses a root that is a link, creates
// .channel-key exclusively without following a link and requires its
// content to be exactly the channel key.
func (s *settings) channelRoot(channel rtsandbox.ChannelKey) (string, error) {
	if err := checkChannel(channel); err != nil {
		return "", err
	}
	if err := s.migrate(channel); err != nil {
		return "", err
	}
	root := filepath.Join(s.PartyDir, Segment(channel))
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("channel root: %w", err)
	}
	if !canonical(root) {
		return "", ErrRootSymlink
	}
	fd, err := openDir(root)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRootSymlink, err)
	}
	defer unix.Close(fd)
	if err := writeNewFileAt(fd, keyFile, []byte(channel)); err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("channel key record: %w", err)
	}
	got, err := readFileAt(fd, keyFile, rtsandbox.MaxChannelKey+1)
	if err != nil || !bytes.Equal(got, []byte(channel)) {
		return "", ErrAlias
	}
	return root, nil
}

// prepare makes a channel's directories (docs/session.md, "Session runtime" "Directories"): the root
// through the alias check, run/ and workspace/ (0700, not links), the
// workspace's bounded filesystem in hard mode (attachWorkspace), then
// the guest-owned sessions/, attachments/ and outbox/ through
// ownDirectory; every one must be its own realpath. When the service runs
// as root, run/, workspace/ and the owned directories are handed to the
// worker user.
func (s *settings) prepare(ctx context.Context, channel rtsandbox.ChannelKey) (dirs, error) {
	root, err := s.channelRoot(channel)
	if err != nil {
		return dirs{}, err
	}
	d := dirs{root: root, run: filepath.Join(root, runName), workspace: filepath.Join(root, workspaceName)}
	for _, dir := range []string{d.run, d.workspace} {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return dirs{}, fmt.Errorf("channel directory: %w", err)
		}
		if !canonical(dir) {
			return dirs{}, ErrSymlink
		}
	}
	if err := s.attachWorkspace(ctx, channel, root); err != nil {
		return dirs{}, err
	}
	for _, dir := range []string{d.run, d.workspace} {
		if err := s.handOver(dir); err != nil {
			return dirs{}, err
		}
	}
	for _, name := range []string{attachmentName, outboxName, sessionsName} {
		if err := s.ownDirectory(d.workspace, name); err != nil {
			return dirs{}, s.disk.classify(err)
		}
	}
	return d, nil
}

// ownDirectory makes parent/name a real directory (docs/session.md, "Directories and defences"): whatever else a
// guest planted there (a link, a file, a FIFO) is unlinked, never
// followed; then the directory is created 0700 and must be its own
// realpath. Every step is relative to a no-follow descriptor of parent.
func (s *settings) ownDirectory(parent, name string) error {
	fd, err := openDir(parent)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(fd)
	if err := s.ownDirectoryAt(fd, name); err != nil {
		return err
	}
	if !canonical(filepath.Join(parent, name)) {
		return ErrSymlink
	}
	return nil
}

// ownDirectoryAt is ownDirectory relative to the directory descriptor fd.
func (s *settings) ownDirectoryAt(fd int, name string) error {
	var st unix.Stat_t
	err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("replace planted %s: %w", name, err)
		}
	}
	if err := unix.Mkdirat(fd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("own directory %s: %w", name, err)
	}
	if s.hostRoot {
		if err := unix.Fchownat(fd, name, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("own directory %s: %w", name, err)
		}
	}
	return nil
}

// handOver gives path to the worker user when the service runs as root,
// so the non-root worker can use it.
func (s *settings) handOver(path string) error {
	if !s.hostRoot {
		return nil
	}
	if err := os.Lchown(path, s.UID, s.GID); err != nil {
		return fmt.Errorf("hand %s to the worker user: %w", path, err)
	}
	return nil
}

// canonical reports whether path is its own realpath: no component of it
// is a symbolic link.
func canonical(path string) bool {
	real, err := filepath.EvalSymlinks(path)
	return err == nil && real == path
}

// openDir opens an absolute directory path without following a final
// link.
func openDir(path string) (int, error) {
	return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// validEntry is the directory-entry rule of docs/session.md, "Directories and defences": non-empty, no "/", "\"
// or control character, not "." or "..".
func validEntry(name string) bool {
	return wire.ValidSafeName(name)
}

// writeNewFileAt creates dirfd/name exclusively (0600) without following
// a link and writes data. EEXIST (wrapped) when anything is there.
func writeNewFileAt(dirfd int, name string, data []byte) error {
	if !validEntry(name) {
		return fmt.Errorf("invalid directory entry %q", name)
	}
	fd, err := openAt(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	return writeClose(fd, name, data)
}

// writeClose writes data to the open file fd (called name in errors)
// and closes it.
func writeClose(fd int, name string, data []byte) error {
	f := os.NewFile(uintptr(fd), name)
	_, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readFileAt reads at most limit bytes of the regular file dirfd/name,
// opened no-follow and non-blocking (a planted FIFO neither blocks nor
// counts).
func readFileAt(dirfd int, name string, limit int) ([]byte, error) {
	fd, err := openAt(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)))
	return data, err
}
