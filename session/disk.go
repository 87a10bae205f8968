package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"golang.org/x/sys/unix"
)

// Disk bounds of the long-lived workspace (issue 13 item 6; operator's
// view in docs/session-mode.md "Disk bounds"). Sessions, attachments and
// outbox files of a channel live in its workspace/, which a worker writes
// for as long as the channel lives, so each workspace is bounded in bytes
// and in entries:
//
//   - hard: the workspace is an ext4 filesystem of its own, made in an
//     image file beside it in the host-only channel root (workspace.img:
//     sparse, size_mb, max_files inodes, no reserved blocks, its root the
//     worker's) and loop-mounted nosuid,nodev,noexec at workspace/ before
//     the container starts. A worker that writes past the bound gets
//     ENOSPC inside the container; the host's disk holds at most the
//     image. Needs root, a loop device and mke2fs.
//   - soft: where the hard bound is unavailable, the host measures the
//     workspace (a bounded walk that follows no link) at each turn's start
//     and end. A turn that finds it over its bound is refused with
//     rtsandbox.WorkspaceFullText; a turn that ends over it has its
//     container removed. A worker can overshoot within one turn.
//
// In both modes old outbox and attachment files are pruned at a turn's
// start, and the owner's fresh frees a workspace that is over its bound.

// DiskMode is how the workspace bound is enforced.
type DiskMode string

// The disk modes. DiskOff, the zero value, bounds nothing: hand-built
// runtimes and tests; the config always names one of the others.
const (
	DiskOff  DiskMode = ""
	DiskAuto DiskMode = "auto"
	DiskHard DiskMode = "hard"
	DiskSoft DiskMode = "soft"
)

// imageName is a channel's workspace filesystem in hard mode, in the
// host-only channel root beside run/ and workspace/ (never inside either,
// so no container sees it or can name it).
const imageName = "workspace.img"

// ErrDiskMount refuses a workspace where a filesystem other than the
// channel's image is mounted, an image that is not a private regular file
// of this service (a link, another owner), or a workspace from before
// the bound that does not fit it.
var ErrDiskMount = fmt.Errorf("%w: channel workspace filesystem refused", rtsandbox.ErrRefused)

// Ranges of DiskOptions (config session.disk checks the same).
const (
	MinDiskSizeMB = 64
	MaxDiskSizeMB = 1 << 20
	MinDiskFiles  = 256
	MaxDiskFiles  = 1000000
	// DiskFilesPerMB bounds MaxFiles by SizeMB: ext4's inode tables must
	// fit the image.
	DiskFilesPerMB = 1024
)

// Bounds of the host's own work on a workspace.
const (
	// maxWalkDepth bounds how deep the host walks a workspace (one open
	// directory per level). A soft workspace deeper than this counts as
	// over its bound: what lies below could not be measured.
	maxWalkDepth = 64
	// maxPruneEntries bounds the entries one turn's pruning looks at.
	maxPruneEntries = 100000
	// hardReserveBytes and hardReserveFiles: a hard workspace with less
	// room than this refuses turns, since its worker could not even
	// append to its conversation.
	hardReserveBytes = 1 << 20
	hardReserveFiles = 16
	// roomyDivisor: fresh frees a full workspace until a tenth of each
	// bound is free again.
	roomyDivisor = 10
)

// DiskOptions bound each channel's workspace (config session.disk).
type DiskOptions struct {
	// Mode is DiskAuto, DiskHard or DiskSoft; DiskOff bounds nothing.
	Mode DiskMode
	// SizeMB bounds the workspace's bytes, MinDiskSizeMB..MaxDiskSizeMB.
	SizeMB int
	// MaxFiles bounds its entries (files, directories, links),
	// MinDiskFiles..MaxDiskFiles and at most DiskFilesPerMB × SizeMB.
	MaxFiles int
	// PruneAfter is the age after which outbox and attachment files are
	// removed at a turn's start; 0 keeps them.
	PruneAfter time.Duration
}

func (o DiskOptions) check() error {
	switch {
	case o.Mode != DiskAuto && o.Mode != DiskHard && o.Mode != DiskSoft:
		return fmt.Errorf("disk mode %q is not auto, hard or soft", o.Mode)
	case o.SizeMB < MinDiskSizeMB || o.SizeMB > MaxDiskSizeMB:
		return fmt.Errorf("disk size %d MiB is outside %d..%d", o.SizeMB, MinDiskSizeMB, MaxDiskSizeMB)
	case o.MaxFiles < MinDiskFiles || o.MaxFiles > min(MaxDiskFiles, o.SizeMB*DiskFilesPerMB):
		return fmt.Errorf("disk file bound %d is outside %d..%d", o.MaxFiles, MinDiskFiles, min(MaxDiskFiles, o.SizeMB*DiskFilesPerMB))
	case o.PruneAfter < 0:
		return fmt.Errorf("disk prune age %v is negative", o.PruneAfter)
	}
	return nil
}

func (o DiskOptions) maxBytes() int64 { return int64(o.SizeMB) << 20 }

// DiskSupport says whether this host can enforce the hard bound, and why
// (not).
type DiskSupport struct {
	Hard   bool
	Reason string
}

// ErrDiskUnavailable refuses session.disk.mode hard on a host that cannot
// mount a filesystem image.
var ErrDiskUnavailable = fmt.Errorf("%w: the hard disk bound is unavailable", rtsandbox.ErrInvalid)

// ResolveDisk is the mode in force for mode on a host with sup, and why:
// auto takes hard where the host can and soft otherwise; hard where it
// cannot is ErrDiskUnavailable with the reason.
func ResolveDisk(mode DiskMode, sup DiskSupport) (DiskMode, string, error) {
	switch mode {
	case DiskOff:
		return DiskOff, "no disk bound is configured", nil
	case DiskSoft:
		return DiskSoft, "session.disk.mode is soft", nil
	case DiskHard:
		if !sup.Hard {
			return DiskOff, "", fmt.Errorf("%w: session.disk.mode is hard, but %s", ErrDiskUnavailable, sup.Reason)
		}
		return DiskHard, "session.disk.mode is hard: " + sup.Reason, nil
	case DiskAuto:
		if sup.Hard {
			return DiskHard, "auto: " + sup.Reason, nil
		}
		return DiskSoft, "auto: the hard bound is unavailable: " + sup.Reason, nil
	}
	return DiskOff, "", fmt.Errorf("%w: disk mode %q is not auto, hard or soft", rtsandbox.ErrInvalid, mode)
}

// ProbeDisk checks whether this host can enforce the hard bound: Linux,
// running as root, /dev/loop-control, mke2fs and ext4 in the kernel.
func ProbeDisk() DiskSupport { return probeDisk(unix.Geteuid()) }

// disk is a runtime's bound: its options, Mode resolved.
type disk struct {
	DiskOptions
	uid, gid int        // the worker's: the root of a new image is theirs
	mu       sync.Mutex // serialises mounts and unmounts
	warned   map[rtsandbox.ChannelKey]bool
}

// checkDisk resolves the disk mode (probing the host unless the mode is
// soft) and logs once which mode is in force and why.
func (s *settings) checkDisk() error {
	s.disk = &disk{DiskOptions: s.Disk, uid: s.UID, gid: s.GID, warned: map[rtsandbox.ChannelKey]bool{}}
	if s.Disk.Mode == DiskOff {
		return nil
	}
	if err := s.Disk.check(); err != nil {
		return setupError("%w", err)
	}
	var sup DiskSupport
	if s.Disk.Mode != DiskSoft {
		sup = ProbeDisk()
	}
	mode, why, err := ResolveDisk(s.Disk.Mode, sup)
	if err != nil {
		return setupError("%w", err)
	}
	s.disk.Mode = mode
	s.Logger.Info("session workspace disk bound", "mode", string(mode), "why", why,
		"size_mb", s.Disk.SizeMB, "max_files", s.Disk.MaxFiles, "prune_after", s.Disk.PruneAfter.String())
	return nil
}

// label is the bound as the container spec carries it (SessionSpec.Disk),
// so a container made under another mode is recreated: a hard workspace
// must be mounted before its container is made.
func (d *disk) label() string {
	if d == nil { // checkProfiles, before checkDisk
		return ""
	}
	return string(d.Mode)
}

// attachWorkspace makes, in hard mode, the channel's workspace under root
// its own filesystem (see mountImage): a mount that is there is kept when
// it is the channel's image and refused otherwise. When nothing is
// mounted, a container of the channel can only hold the directory
// beneath, never the bounded filesystem, so it is removed first; the next
// start makes it anew.
func (s *settings) attachWorkspace(ctx context.Context, channel rtsandbox.ChannelKey, root string) error {
	s.disk.mu.Lock()
	defer s.disk.mu.Unlock()
	if s.disk.Mode != DiskHard {
		s.disk.noteUnused(s, channel, root)
		return nil
	}
	ws := filepath.Join(root, workspaceName)
	img, ok, err := currentImage(root, ws)
	if err != nil {
		return err
	}
	if ok {
		s.disk.noteChange(s, channel, img)
		return nil
	}
	if err := s.Driver.Remove(ctx, s.name(channel)); err != nil {
		return err
	}
	note, err := s.disk.mountImage(ctx, root, ws)
	if err != nil {
		return err
	}
	if !canonical(ws) {
		return ErrSymlink
	}
	if err := privateRoot(ws); err != nil {
		return err
	}
	s.Logger.Info("session workspace mounted", "channel", string(channel), "image", filepath.Join(root, imageName), "detail", note)
	return nil
}

// privateRoot makes the mounted filesystem's root 0700, as the
// workspace directory always was (mke2fs makes it 0755).
func privateRoot(ws string) error {
	fd, err := openDir(ws)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, 0o700)
}

// noteChange warns once per channel and process when the mounted image
// was made for another bound than the configured one: a bound applies
// when the image is mounted, so the change waits for an unmount.
func (d *disk) noteChange(s *settings, channel rtsandbox.ChannelKey, have string) {
	if have == d.imageLabel() || d.warned[channel] {
		return
	}
	d.warned[channel] = true
	s.Logger.Warn("session workspace keeps its earlier disk bound until it is unmounted (owner off, rtsandbox channels off, rtsandbox reap)",
		"channel", string(channel), "image_bound", have, "configured", d.imageLabel())
}

// noteUnused warns once per channel and process when the channel has an
// image from an earlier hard mode that this mode does not mount: once it
// is unmounted, the workspace is the directory beneath it, and the
// image's files are no longer the worker's.
func (d *disk) noteUnused(s *settings, channel rtsandbox.ChannelKey, root string) {
	if d.warned[channel] {
		return
	}
	if _, err := os.Lstat(filepath.Join(root, imageName)); err != nil {
		return
	}
	d.warned[channel] = true
	s.Logger.Warn("session workspace image of an earlier hard disk bound is not mounted in this mode; once unmounted, the channel's workspace is the directory beneath it",
		"channel", string(channel), "mode", string(d.Mode), "image", filepath.Join(root, imageName))
}

// imageLabel names the bound an image is made for (its ext4 label, at
// most 16 bytes): "r<size MiB>-<files>".
func (d *disk) imageLabel() string { return fmt.Sprintf("r%d-%d", d.SizeMB, d.MaxFiles) }

// detachWorkspace unmounts the channel's image from its workspace (owner
// off, channels off): a mount that is not the channel's stays, nothing
// mounted is fine. Whatever the mode: an image mounted under an earlier
// hard mode goes too.
func (s *settings) detachWorkspace(root string) error {
	s.disk.mu.Lock()
	defer s.disk.mu.Unlock()
	_, err := detachImage(root)
	return err
}

// DetachWorkspace unmounts channel's workspace image under partyDir while
// no runtime runs (`rtsandbox channels off`), after the channel's
// container was removed. It reports whether it unmounted one. A channel
// whose directory belongs to another key (.channel-key) is left alone.
func DetachWorkspace(partyDir string, channel rtsandbox.ChannelKey) (bool, error) {
	root, err := existingRoot(partyDir, channel)
	if err != nil || root == "" {
		return false, err
	}
	return detachImage(root)
}

// DetachAll unmounts every channel's workspace image under partyDir while
// no runtime runs (`rtsandbox reap`, after the session containers were
// removed) and returns how many it unmounted.
func DetachAll(partyDir string) (int, error) {
	party, err := filepath.EvalSymlinks(partyDir)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	roots, err := mountedRoots(party)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, root := range roots {
		ok, err := detachImage(root)
		if ok {
			n++
		}
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// existingRoot is channel's directory under partyDir when it exists and
// its .channel-key record names channel: under its segment, else under
// the earlier lossy name a runtime has not migrated yet; "" otherwise.
func existingRoot(partyDir string, channel rtsandbox.ChannelKey) (string, error) {
	if err := checkChannel(channel); err != nil {
		return "", err
	}
	party, err := filepath.EvalSymlinks(partyDir)
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	root, err := keyedRoot(filepath.Join(party, Segment(channel)), channel)
	if root != "" || err != nil || legacySegment(channel) == Segment(channel) {
		return root, err
	}
	return keyedRoot(filepath.Join(party, legacySegment(channel)), channel)
}

// keyedRoot is root when it is a directory whose .channel-key record
// names channel; "" otherwise.
func keyedRoot(root string, channel rtsandbox.ChannelKey) (string, error) {
	fd, err := openDir(root)
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRootSymlink, err)
	}
	defer unix.Close(fd)
	got, err := readFileAt(fd, keyFile, rtsandbox.MaxChannelKey+1)
	if err != nil || string(got) != string(channel) {
		return "", nil
	}
	return root, nil
}
