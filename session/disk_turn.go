package session

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
	"golang.org/x/sys/unix"
)

// The disk bound at a turn's boundaries and at fresh.

// use is the workspace's use against its bound: the filesystem's own
// figures in hard mode, a bounded walk in soft mode.
func (d *disk) use(ws string) (diskUse, error) {
	if d.Mode != DiskHard {
		return measure(ws, d.maxBytes(), d.MaxFiles)
	}
	fd, err := openDir(ws)
	if err != nil {
		return diskUse{}, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return diskUse{}, err
	}
	bs := int64(st.Bsize)
	return diskUse{
		bytes: int64(st.Blocks-st.Bavail) * bs, maxBytes: int64(st.Blocks) * bs,
		files: int(st.Files - st.Ffree), maxFiles: int(st.Files),
	}, nil
}

// full names the bound a turn would be refused for, or "": soft mode
// counts what is over the bound; hard mode what leaves the worker less
// than a small reserve, since the filesystem itself refuses the rest.
func (d *disk) full(u diskUse) string {
	if d.Mode == DiskHard {
		return u.over(hardReserveBytes, hardReserveFiles)
	}
	return u.over(0, 0)
}

// workspace is the channel's workspace path, after the alias check.
func (r *Runtime) workspace(channel rtsandbox.ChannelKey) (string, error) {
	root, err := r.s.channelRoot(channel)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, workspaceName), nil
}

// inputRoom is what a message's attachments may take of the channel's
// workspace (disk_room.go); nil without a disk bound. The workspace is
// prepared (and, in hard mode, mounted) already.
func (r *Runtime) inputRoom(channel rtsandbox.ChannelKey) (*wire.SessionRoom, error) {
	d := r.s.disk
	if d.Mode == DiskOff {
		return nil, nil
	}
	ws, err := r.workspace(channel)
	if err != nil {
		return nil, err
	}
	u, err := d.use(ws)
	if err != nil {
		return nil, fmt.Errorf("measure the workspace: %w", err)
	}
	room := u.room()
	return &room, nil
}

// diskGate runs at a turn's start, once the channel's worker runs (so a
// hard workspace is mounted): old outbox and attachment files are pruned,
// then a workspace over its bound refuses the turn (ErrWorkspaceFull,
// whose guest text is rtsandbox.WorkspaceFullText), the operator log
// names the bound, and a soft workspace's container is removed. A turn
// that may run gets the room its own files may take (disk_room.go); nil
// without a disk bound.
func (r *Runtime) diskGate(t *turn) (*wire.SessionRoom, error) {
	d := r.s.disk
	if d.Mode == DiskOff {
		return nil, nil
	}
	ws, err := r.workspace(t.channel)
	if err != nil {
		return nil, err
	}
	if d.PruneAfter > 0 {
		n, err := prune(ws, r.s.Now().Add(-d.PruneAfter), min(d.MaxFiles+16, maxPruneEntries))
		if err != nil {
			r.s.Logger.Warn("session workspace pruning failed", "channel", string(t.channel), "turn_id", t.id, "removed", n, "err", err)
		} else if n > 0 {
			r.s.Logger.Info("session workspace pruned", "channel", string(t.channel), "turn_id", t.id, "removed", n,
				"older_than", d.PruneAfter.String())
		}
	}
	u, err := d.use(ws)
	if err != nil {
		return nil, fmt.Errorf("measure the workspace: %w", err)
	}
	if bound := d.full(u); bound != "" {
		r.logOver(t, "session workspace over its disk bound: turn refused", bound, u)
		if d.Mode == DiskSoft {
			r.removeWriter(t) // it may have written since its last turn
		}
		return nil, fmt.Errorf("%w: the %s bound", rtsandbox.ErrWorkspaceFull, bound)
	}
	room := u.room()
	return &room, nil
}

// diskAfter runs at the end of a turn that ran, in soft mode: a
// workspace the turn left over its bound has its container removed, so a
// worker that keeps writing stops now, and the next turn is refused.
func (r *Runtime) diskAfter(t *turn) {
	d := r.s.disk
	if d.Mode != DiskSoft {
		return
	}
	ws, err := r.workspace(t.channel)
	if err != nil {
		return
	}
	u, err := d.use(ws)
	if err != nil {
		r.s.Logger.Warn("session workspace not measured after the turn", "channel", string(t.channel), "turn_id", t.id, "err", err)
		return
	}
	bound := d.full(u)
	if bound == "" {
		return
	}
	r.logOver(t, "session workspace over its disk bound after the turn: container removed", bound, u)
	r.removeWriter(t)
}

// removeWriter removes the container of a soft workspace over its bound,
// so a worker that keeps writing stops.
func (r *Runtime) removeWriter(t *turn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), cleanupTimeout)
	defer cancel()
	if err := r.s.Driver.Remove(ctx, r.name(t.channel)); err != nil {
		r.s.Logger.Error("session container removal failed", "channel", string(t.channel), "turn_id", t.id, "err", err)
	}
}

func (r *Runtime) logOver(t *turn, msg, bound string, u diskUse) {
	r.s.Logger.Warn(msg, "channel", string(t.channel), "turn_id", t.id, "mode", string(r.s.disk.Mode), "bound", bound,
		"used_bytes", u.bytes, "max_bytes", u.maxBytes, "files", u.files, "max_files", u.maxFiles)
}

// overBound reports whether the workspace ws is over its bound: its
// turns would be refused (full).
func (s *settings) overBound(ws string) (bool, error) {
	d := s.disk
	if d.Mode == DiskOff {
		return false, nil
	}
	u, err := d.use(ws)
	if err != nil {
		return false, err
	}
	return d.full(u) != "", nil
}

// The two halves of what fresh frees in a workspace over its bound
// (freeFull), in order.
const (
	// inputSteps, before the conversation is archived and after
	// freeInputs: the archived conversations (sessions/archive/), then
	// whatever else the worker left.
	inputSteps = iota
	// conversationSteps, after it was archived: the archive (with the
	// conversation just moved there), then sessions/ (what the archive
	// did not move).
	conversationSteps
)

// freeFull runs at fresh, with the container gone, for a workspace over
// its bound (its turns would be refused): it removes the entries of one
// half of the order (inputSteps, conversationSteps) one by one, each
// only while less than a tenth of each bound is free. It returns how
// many entries went.
func (s *settings) freeFull(ws string, half int) (int, error) {
	d := s.disk
	if d.Mode == DiskOff {
		return 0, nil
	}
	wsfd, err := openDir(ws)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(wsfd)
	var steps []freeStep
	if sfd, err := openSub(wsfd, sessionsName); err == nil {
		defer unix.Close(sfd)
		steps = append(steps, freeStep{sfd, archiveName})
	}
	if half == inputSteps {
		err = eachEntry(wsfd, func(name string, _ *unix.Stat_t) (bool, error) {
			if name != outboxName && name != attachmentName && name != sessionsName {
				steps = append(steps, freeStep{wsfd, name})
			}
			return true, nil
		})
		if err != nil {
			return 0, err
		}
	} else {
		steps = append(steps, freeStep{wsfd, sessionsName})
	}
	removed := 0
	for _, step := range steps {
		if u, err := d.use(ws); err != nil || u.roomy() {
			return removed, err
		}
		n, err := removeEntry(step.fd, step.name)
		removed += n
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// freeInputs removes, with a disk bound, the workspace's outbox/ and
// attachments/ at fresh (the container gone): the files of the old
// conversation, replies already delivered and the guests' inputs. It
// returns how many entries went.
func (s *settings) freeInputs(ws string) (int, error) {
	if s.disk.Mode == DiskOff {
		return 0, nil
	}
	wsfd, err := openDir(ws)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(wsfd)
	removed := 0
	for _, name := range []string{outboxName, attachmentName} {
		n, err := removeEntry(wsfd, name)
		if removed += n; err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// freeStep is one entry freeFull may remove: fd/name.
type freeStep struct {
	fd   int
	name string
}

// workspaceFull reports whether err is a write that found the channel's
// own bounded filesystem full: ENOSPC in hard mode. In soft mode the
// workspace lies on the host's filesystem, whose ENOSPC is the host's.
func (d *disk) workspaceFull(err error) bool {
	return d.Mode == DiskHard && errors.Is(err, unix.ENOSPC)
}

// classify marks an error of work inside the channel's workspace that
// found its bounded filesystem full as rtsandbox.ErrWorkspaceFull, so
// guests and the owner are told the channel's workspace is full
// (rtsandbox.WorkspaceFullText), never the host's disk.
func (d *disk) classify(err error) error {
	if d.workspaceFull(err) && !errors.Is(err, rtsandbox.ErrWorkspaceFull) {
		return fmt.Errorf("%w: %w", rtsandbox.ErrWorkspaceFull, err)
	}
	return err
}
