package host

import (
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/session"
)

// diskCheckName is the check of the session workspaces' disk bound.
const diskCheckName = "session disk"

// diskFix is what gets a host the hard bound.
const diskFix = "run rtsandbox as root on a host with loop devices (/dev/loop-control) and mke2fs (e2fsprogs)"

// diskCheck reports which disk bound serve puts on each session
// channel's workspace (session.disk), on a host that can (sup.Hard) or
// cannot mount a filesystem image; false while no profile uses
// session mode. mode hard where the host cannot fails, so serve refuses
// to start; auto falling back to soft warns, since a worker can then
// overshoot within a turn.
func diskCheck(cfg *config.Config, sup session.DiskSupport) (Check, bool) {
	if !cfg.UsesSessions() {
		return Check{}, false
	}
	d := cfg.Session.Disk
	mode, why, err := session.ResolveDisk(session.DiskMode(d.Mode), sup)
	switch {
	case err != nil:
		return fail(diskCheckName, diskFix+", or set session.disk.mode: auto (soft where hard is unavailable)", "%v", err), true
	case mode == session.DiskHard:
		return ok(diskCheckName, "hard: each channel's workspace is its own ext4 filesystem of %d MiB and %d files, loop-mounted (%s)",
			d.SizeMB, d.MaxFiles, why), true
	case d.Mode == config.DiskSoft:
		return ok(diskCheckName, "soft: the host measures each channel's workspace against %d MiB and %d files at each turn's start and end (%s)",
			d.SizeMB, d.MaxFiles, why), true
	}
	return warn(diskCheckName, diskFix+" for the hard bound, or set session.disk.mode: soft to accept this one",
		"soft: the host measures each channel's workspace against %d MiB and %d files at each turn's start and end, and a worker can overshoot within a turn (%s)",
		d.SizeMB, d.MaxFiles, why), true
}
