package session

import (
	"path/filepath"

	"github.com/rtsandbox/rtsandbox"
)

// workspaceUsage measures channel's workspace without making or mounting
// anything: nil without a disk bound or before the channel's directory
// exists.
func (s *settings) workspaceUsage(channel rtsandbox.ChannelKey) (*rtsandbox.WorkspaceUsage, error) {
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
	out := &rtsandbox.WorkspaceUsage{Mode: string(d.Mode), Mounted: true, MaxBytes: d.maxBytes(), MaxFiles: d.MaxFiles}
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
