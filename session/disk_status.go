package session

import (
	"path/filepath"

	"github.com/rtsandbox/rtsandbox"
)

// WorkspaceUsage is a channel's workspace against its disk bound, as the
// owner's status shows it.
type WorkspaceUsage struct {
	// Mode is the bound in force (DiskHard or DiskSoft).
	Mode DiskMode
	// Mounted is false for a hard workspace whose image is not mounted
	// (the channel is off, or has not run since the host started): its
	// figures are unknown until its next turn mounts it.
	Mounted bool
	// Bytes and Files are what is used, MaxBytes and MaxFiles the
	// bound. A soft measure stops once a bound is passed, so past it
	// the figures are lower bounds.
	Bytes, MaxBytes int64
	Files, MaxFiles int
	// Full reports a workspace whose turns are refused until fresh.
	Full bool
}

// workspaceUsage measures channel's workspace without making or mounting
// anything: nil without a disk bound or before the channel's directory
// exists.
func (s *settings) workspaceUsage(channel rtsandbox.ChannelKey) (*WorkspaceUsage, error) {
	d := s.disk
	if d.Mode == DiskOff {
		return nil, nil
	}
	d.mu.Lock() // a mount or unmount in flight would change what is measured
	defer d.mu.Unlock()
	root, err := existingRoot(s.PartyDir, channel)
	if err != nil || root == "" {
		return nil, err
	}
	ws := filepath.Join(root, workspaceName)
	out := &WorkspaceUsage{Mode: d.Mode, Mounted: true, MaxBytes: d.maxBytes(), MaxFiles: d.MaxFiles}
	if d.Mode == DiskHard {
		if _, ok, err := currentImage(root, ws); err != nil || !ok {
			out.Mounted = false
			return out, err
		}
	}
	u, err := d.use(ws)
	if err != nil {
		return nil, err
	}
	out.Bytes, out.MaxBytes, out.Files, out.MaxFiles = u.bytes, u.maxBytes, u.files, u.maxFiles
	out.Full = d.full(u) != ""
	return out, nil
}
