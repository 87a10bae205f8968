package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/skills/skilltree"
	"github.com/rtsandbox/rtsandbox/wire"
	"golang.org/x/sys/unix"
)

// A profile's skills (docs/session.md, "Skills") reach its worker as a copy in the channel's
// run directory, run/skills, which the container sees read-only at
// wire.SessionSkillsDir. The host writes it, from the tree it
// validated when serve started, just before it creates the container:
// the copy is staged under a name the worker is never told of and then
// swapped into place in one rename, so no reader ever sees half a tree.

// Names of the staging trees in run/; both are removed whenever found.
const (
	skillsStaging = ".skills-staging"
	skillsOld     = ".skills-old"
)

// skillsDigest is the digest the container spec carries; "" for none.
func (p Profile) skillsDigest() string {
	if p.Skills == nil {
		return ""
	}
	return p.Skills.Digest()
}

// prepareSkills installs p's skills in d.run before the container name
// is created. A container that is there and not current is removed
// first (EnsureRunning would remove it next anyway): its worker never
// sees its tree change, and a start cut short between the copy and the
// create leaves no container whose spec label vouches for a tree it does
// not have. A profile without skills only clears an earlier copy.
func (r *Runtime) prepareSkills(ctx context.Context, name string, st container.SessionStatus, p Profile, d dirs) error {
	if p.Skills != nil && st.State != container.StateMissing {
		if err := r.s.Driver.Remove(ctx, name); err != nil {
			return err
		}
	}
	if err := r.s.installSkills(d.run, p.Skills); err != nil {
		return fmt.Errorf("skills: %w", err)
	}
	return nil
}

// installSkills makes run/skills a copy of tree, or removes it when tree
// is nil. The copy holds only the tree's folders (0700) and regular files
// (0600), created exclusively without following a link under a staging
// folder of run/, handed to the worker user when the service runs as
// root; then it replaces run/skills in one rename (RENAME_EXCHANGE, or
// two renames on a file system without it) and the old copy is removed.
func (s *settings) installSkills(run string, tree *skilltree.Tree) error {
	fd, err := openDir(run)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(fd)
	for _, leftover := range []string{skillsStaging, skillsOld} {
		if err := os.RemoveAll(filepath.Join(run, leftover)); err != nil {
			return err
		}
	}
	if tree == nil {
		return os.RemoveAll(filepath.Join(run, wire.SessionSkillsName))
	}
	if err := s.stageSkills(fd, tree); err != nil {
		return errors.Join(err, os.RemoveAll(filepath.Join(run, skillsStaging)))
	}
	return swapSkills(fd, run)
}

// stageSkills writes tree into run/.skills-staging (runfd).
func (s *settings) stageSkills(runfd int, tree *skilltree.Tree) error {
	if err := s.mkdirOwned(runfd, skillsStaging); err != nil {
		return err
	}
	sfd, err := openAt(runfd, skillsStaging, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	for _, e := range tree.Entries() {
		if e.Dir {
			err = s.mkdirOwned(sfd, e.Path)
		} else {
			err = s.writeOwned(sfd, e.Path, e.Data)
		}
		if err != nil {
			return fmt.Errorf("copy %s: %w", e.Path, err)
		}
	}
	return nil
}

// mkdirOwned creates the folder dirfd/rel (0700) for the worker user.
// Every parent of rel is a folder this install created, so mkdirat
// resolves no link.
func (s *settings) mkdirOwned(dirfd int, rel string) error {
	if err := unix.Mkdirat(dirfd, rel, 0o700); err != nil {
		return err
	}
	return s.chownAt(dirfd, rel)
}

// writeOwned creates the file dirfd/rel (0600, exclusive, no-follow)
// with data, for the worker user. openAt refuses any link on the way
// where the kernel has openat2; its fallback resolves rel's parents,
// which are all folders this install created.
func (s *settings) writeOwned(dirfd int, rel string, data []byte) error {
	fd, err := openAt(dirfd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if err := writeClose(fd, rel, data); err != nil {
		return err
	}
	return s.chownAt(dirfd, rel)
}

// chownAt hands dirfd/rel to the worker user when the service runs as
// root (the worker reads the copy; nobody writes it: run/ is mounted
// read-only).
func (s *settings) chownAt(dirfd int, rel string) error {
	if !s.hostRoot {
		return nil
	}
	return unix.Fchownat(dirfd, rel, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW)
}

// swapSkills puts the staged copy in place of run/skills (runfd) and
// removes what was there.
func swapSkills(runfd int, run string) error {
	name := wire.SessionSkillsName
	err := unix.Renameat2(runfd, skillsStaging, runfd, name, unix.RENAME_EXCHANGE)
	switch {
	case err == nil: // the old copy is now the staging folder
		return os.RemoveAll(filepath.Join(run, skillsStaging))
	case errors.Is(err, unix.ENOENT): // no copy yet
		return unix.Renameat(runfd, skillsStaging, runfd, name)
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		return swapByRenames(runfd, run)
	}
	return err
}

// swapByRenames is swapSkills on a file system without RENAME_EXCHANGE:
// two renames, between which run/skills is missing for a moment, never
// half written.
func swapByRenames(runfd int, run string) error {
	if err := unix.Renameat(runfd, wire.SessionSkillsName, runfd, skillsOld); err != nil {
		return err
	}
	if err := unix.Renameat(runfd, skillsStaging, runfd, wire.SessionSkillsName); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(run, skillsOld))
}
