package config

import (
	"fmt"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"
)

// The disk bound of each session channel's workspace (session.disk; see
// docs/session-mode.md "Disk bounds"). mode: hard makes each workspace an
// ext4 filesystem of its own (an image file loop-mounted by the host),
// which needs root, a loop device and mke2fs; soft has the host measure
// the workspace at each turn's start and end; auto takes hard where the
// host can and soft otherwise.
const (
	DiskAuto = "auto"
	DiskHard = "hard"
	DiskSoft = "soft"

	DefaultDiskSizeMB     = 1024
	MinDiskSizeMB         = 64      // ext4 with its journal needs room of its own
	MaxDiskSizeMB         = 1 << 20 // 1 TiB
	DefaultDiskMaxFiles   = 20000
	MinDiskMaxFiles       = 256
	MaxDiskMaxFiles       = 1000000
	DiskFilesPerMB        = 1024 // at most this many files per MiB of size_mb: the inode tables must fit
	DefaultDiskPruneHours = 7 * 24
	MaxDiskPruneHours     = 365 * 24
)

// SessionDisk bounds a session channel's workspace.
type SessionDisk struct {
	Mode     string // DiskAuto, DiskHard or DiskSoft
	SizeMB   int    // bytes of the workspace, in MiB
	MaxFiles int    // entries of the workspace (files, directories, links)
	// PruneAfter is the age after which files of the workspace's outbox
	// and attachments are removed at a turn's start; 0 keeps them.
	PruneAfter time.Duration
}

// defaultSessionDisk is the disk block of a session block without one.
func defaultSessionDisk() SessionDisk {
	return SessionDisk{Mode: DiskAuto, SizeMB: DefaultDiskSizeMB, MaxFiles: DefaultDiskMaxFiles,
		PruneAfter: DefaultDiskPruneHours * time.Hour}
}

// sessionDisk parses session.disk.
func (p *parser) sessionDisk(n *yaml.Node, path string) SessionDisk {
	d := defaultSessionDisk()
	o, ok := p.object(n, path, "mode", "size_mb", "max_files", "prune_after_hours")
	if !ok {
		return d
	}
	if v, ok := p.text(o, "mode", false, diskModeRule); ok {
		d.Mode = v
	}
	d.SizeMB = p.integer(o, "size_mb", DefaultDiskSizeMB, MinDiskSizeMB, MaxDiskSizeMB)
	d.MaxFiles = p.integer(o, "max_files", DefaultDiskMaxFiles, MinDiskMaxFiles, min(MaxDiskMaxFiles, d.SizeMB*DiskFilesPerMB))
	d.PruneAfter = time.Duration(p.integer(o, "prune_after_hours", DefaultDiskPruneHours, 0, MaxDiskPruneHours)) * time.Hour
	return d
}

// diskModeRule wants one of the three modes.
func diskModeRule(s string) string {
	modes := []string{DiskAuto, DiskHard, DiskSoft}
	if !slices.Contains(modes, s) {
		return fmt.Sprintf("must be one of %q", modes)
	}
	return ""
}
