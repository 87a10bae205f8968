package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"golang.org/x/sys/unix"
)

// freshTimeout bounds StartFresh, whose router shape has no context.
const freshTimeout = 2 * time.Minute

// StartFresh makes the channel's next turn begin a new conversation
// (docs/session.md, "Session runtime" startFresh): it stops a running turn and removes the container
// and broker first, so nothing runs in the workspace any more; then it
// moves the top-level *.jsonl regular files of workspace/sessions into
// sessions/archive/<time>/, and repairs workspace/attachments. Links are
// never followed or moved; a sessions/ that is not a real directory
// archives nothing. Host memory is untouched.
//
// With a disk bound, the old conversation's files go first: outbox/
// (replies already delivered) and attachments/ (the guests' inputs), so
// a channel whose input room one guest filled takes files again, and so
// the archive finds room: it makes two directories, which a full hard
// workspace has none for (ENOSPC). A workspace still over its bound is
// then freed around the archive (freeFull): the worker's other files
// before it, the conversations after it and only when the rest was not
// enough. An ENOSPC inside a hard workspace is the workspace's
// (rtsandbox.ErrWorkspaceFull), never the host's disk.
func (r *Runtime) StartFresh(channel rtsandbox.ChannelKey) error {
	ctx, cancel := context.WithTimeout(context.Background(), freshTimeout)
	defer cancel()
	root, release, err := r.clear(ctx, channel)
	if err != nil {
		return err
	}
	defer release()
	if err := r.s.attachWorkspace(ctx, channel, root); err != nil {
		return err
	}
	n, freed, err := r.s.fresh(channel, filepath.Join(root, workspaceName))
	if err != nil {
		return r.s.disk.classify(err)
	}
	r.s.Logger.Info("Sandbox conversation archived", "channel", string(channel), "archived", n, "freed", freed)
	return nil
}

// fresh archives the conversation of the workspace ws, freeing it first
// and after when it is over its bound, and repairs its attachments/. It
// returns how many files were archived and how many entries were freed.
func (s *settings) fresh(channel rtsandbox.ChannelKey, ws string) (archived, freed int, err error) {
	if freed, err = s.freeInputs(ws); err != nil {
		return 0, freed, fmt.Errorf("free the old conversation's files: %w", err)
	}
	full, err := s.overBound(ws)
	if err != nil {
		return 0, freed, fmt.Errorf("measure the workspace: %w", err)
	}
	if full {
		n, err := s.freeFull(ws, inputSteps)
		if freed += n; err != nil {
			return 0, freed, fmt.Errorf("free the full workspace: %w", err)
		}
	}
	archived, err = s.archive(ws, s.Now())
	if full && s.disk.workspaceFull(err) {
		// The conversation alone fills the workspace: it goes with the
		// conversation steps below, unarchived.
		s.Logger.Warn("session conversation not archived: it fills the channel's workspace by itself and is removed",
			"channel", string(channel), "err", err)
		archived, err = 0, nil
	}
	if err != nil {
		return 0, freed, fmt.Errorf("archive sessions: %w", err)
	}
	if full {
		n, err := s.freeFull(ws, conversationSteps)
		if freed += n; err != nil {
			return archived, freed, fmt.Errorf("free the full workspace: %w", err)
		}
	}
	if err := s.ownDirectory(ws, attachmentName); err != nil && !errors.Is(err, os.ErrNotExist) {
		return archived, freed, err
	}
	return archived, freed, nil
}

// archive moves the top-level *.jsonl regular files of ws/sessions into
// ws/sessions/archive/<now, ISO 8601 with ':' → '-'>/ and returns how
// many. Every step is relative to a no-follow descriptor: sessions/ is
// opened without following a link (a link or a missing directory archives
// nothing), entries are lstat-checked through it, archive/ and the
// timestamp directory are owned (a planted link is replaced), and the
// files move with renameat between descriptors, so no path is resolved
// twice. The container must be gone.
func (s *settings) archive(ws string, now time.Time) (int, error) {
	wsfd, err := openDir(ws)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	defer unix.Close(wsfd)
	sfd, err := openAt(wsfd, sessionsName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil // missing, a link or not a directory: nothing to archive
	}
	defer unix.Close(sfd)
	names, err := jsonlFiles(sfd)
	if err != nil || len(names) == 0 {
		return 0, err
	}
	stamp := strings.ReplaceAll(now.UTC().Format("2006-01-02T15:04:05.000Z"), ":", "-")
	dst, err := s.ownedChild(sfd, archiveName)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dst)
	tfd, err := s.ownedChild(dst, stamp)
	if err != nil {
		return 0, err
	}
	defer unix.Close(tfd)
	moved := 0
	for _, name := range names {
		if err := unix.Renameat(sfd, name, tfd, name); err != nil {
			return moved, fmt.Errorf("archive %s: %w", name, err)
		}
		moved++
	}
	return moved, nil
}

// ownedChild owns the directory fd/name and opens it without following.
func (s *settings) ownedChild(fd int, name string) (int, error) {
	if err := s.ownDirectoryAt(fd, name); err != nil {
		return -1, err
	}
	child, err := openAt(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", name, err)
	}
	return child, nil
}

// jsonlFiles lists the entries of the directory fd whose names end in
// .jsonl and that are regular files by lstat.
func jsonlFiles(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	dir := os.NewFile(uintptr(dup), sessionsName)
	defer dir.Close()
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".jsonl") || !validEntry(name) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			names = append(names, name)
		}
	}
	return names, nil
}

// SessionsDir is the channel's workspace/sessions directory (docs/session.md, "Session runtime"); it
// runs the .channel-key alias check, which creates the channel root and
// the record when missing.
func (r *Runtime) SessionsDir(channel rtsandbox.ChannelKey) (string, error) {
	return r.workspaceDir(channel, sessionsName)
}

// AttachmentDir is the channel's workspace/attachments directory; it runs
// the alias check as SessionsDir.
func (r *Runtime) AttachmentDir(channel rtsandbox.ChannelKey) (string, error) {
	return r.workspaceDir(channel, attachmentName)
}

// workspaceDir is the path of name in the channel's workspace; in hard
// mode the workspace's filesystem is mounted first, so that what the host
// writes there lands in it.
func (r *Runtime) workspaceDir(channel rtsandbox.ChannelKey, name string) (string, error) {
	root, err := r.s.channelRoot(channel)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), freshTimeout)
	defer cancel()
	if err := r.s.attachWorkspace(ctx, channel, root); err != nil {
		return "", err
	}
	return filepath.Join(root, workspaceName, name), nil
}
