package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/wire"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Layout is where a host keeps its state.
type Layout struct {
	StateDir string // config state_dir
	PartyDir string // config session.party_dir
	// Worker owns a restored workspace when the host runs as root
	// (sandbox.user); nil when the host does not run as root.
	Worker *Owner
	// WorkerErr is why a root host has no Worker (no sandbox.user): a
	// backup holding workspaces is then refused.
	WorkerErr error
}

// Owner is a uid and gid.
type Owner struct{ UID, GID int }

// Errors of Write and Restore. Test with errors.Is.
var (
	// ErrNotEmpty: the backup directory is not new or empty, or the state
	// dir holds state and the restore is not forced.
	ErrNotEmpty = fmt.Errorf("%w: directory not empty", rtsandbox.ErrRefused)
	// ErrIncomplete: the backup directory has no manifest.
	ErrIncomplete = fmt.Errorf("%w: incomplete backup", rtsandbox.ErrInvalid)
	// ErrChecksum: a file's size or SHA-256 differs from the manifest's.
	ErrChecksum = fmt.Errorf("%w: backup file does not match its manifest", rtsandbox.ErrInvalid)
	// ErrMounted: a workspace is still mounted (a session container or
	// its filesystem outlived serve).
	ErrMounted = fmt.Errorf("%w: a session workspace is still mounted", rtsandbox.ErrRefused)
)

// Report is what Write did.
type Report struct {
	Manifest Manifest
	// Skipped names what was left out of a workspace and why (a link, a
	// FIFO, an invalid name, too deep, too many files).
	Skipped []string
	// Unread names the channels whose conversations could not be read:
	// a hard-bounded workspace whose filesystem (workspace.img) is not
	// mounted (after reap, or before the channel's first turn since
	// serve started). The backup holds everything else.
	Unread []string
}

// busyTimeout is how long VACUUM INTO waits for a lock (in WAL mode a
// reader waits only for a checkpoint's start).
const busyTimeout = 10 * time.Second

// imageName is a hard-bounded workspace's filesystem image in the
// channel's directory (package session).
const imageName = "workspace.img"

// copyAttempts bounds how often a channel's conversations are copied
// again when a file went away under the copy (the owner's fresh moves
// the conversation into its archive).
const copyAttempts = 3

// Write copies l's state into dir (created 0700 when missing; it must
// otherwise be an empty directory of this user) and writes the manifest
// last. now is the manifest's time.
func Write(ctx context.Context, l Layout, dir string, now time.Time) (Report, error) {
	if err := newDir(dir); err != nil {
		return Report{}, err
	}
	w := &writer{dir: dir, m: Manifest{Format: Format, Version: Version, Created: now.UTC().Truncate(time.Second)}}
	if err := w.state(ctx, l.StateDir); err != nil {
		return Report{}, err
	}
	if err := w.party(ctx, l.PartyDir); err != nil {
		return Report{}, err
	}
	data, err := w.m.marshal()
	if err != nil {
		return Report{}, err
	}
	if err := privdir.WriteFile(filepath.Join(dir, ManifestName), data); err != nil {
		return Report{}, fmt.Errorf("manifest: %w", err)
	}
	return Report{Manifest: w.m, Skipped: w.skipped, Unread: w.unread}, nil
}

// newDir makes dir 0700 when missing; an existing dir must be an empty
// directory of this user (its mode is then set to 0700).
func newDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		entries, rerr := os.ReadDir(dir)
		if rerr != nil {
			return fmt.Errorf("backup directory %s: %w", dir, rerr)
		}
		if len(entries) > 0 {
			return fmt.Errorf("backup directory %s: %w: it must be new or empty (it holds %s)", dir, ErrNotEmpty, entries[0].Name())
		}
		if fi, lerr := os.Lstat(dir); lerr == nil && fi.IsDir() {
			err = os.Chmod(dir, 0o700)
		}
	}
	if err != nil {
		return fmt.Errorf("backup directory %s: %w", dir, err)
	}
	if _, err := privdir.Make(dir); err != nil {
		return fmt.Errorf("backup directory %s: %w", dir, err)
	}
	return nil
}

// writer accumulates the manifest of one backup.
type writer struct {
	dir     string
	m       Manifest
	skipped []string
	unread  []string
	files   int
}

// state copies the state dir's files that exist.
func (w *writer) state(ctx context.Context, stateDir string) error {
	if err := os.MkdirAll(filepath.Join(w.dir, stateTree), 0o700); err != nil {
		return err
	}
	for _, name := range StateFiles() {
		src := filepath.Join(stateDir, name)
		rel := stateTree + "/" + name
		dst := filepath.Join(w.dir, stateTree, name)
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: %w", src, privdir.ErrNotRegular)
		}
		if isSQLite(name) {
			err = vacuumInto(ctx, src, dst)
		} else {
			err = copyStateFile(src, dst)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if err := w.add(rel, dst); err != nil {
			return err
		}
	}
	return nil
}

// maxStateFileBytes bounds a JSON state file (channels' own bound is
// 4 MiB).
const maxStateFileBytes = 16 << 20

// copyStateFile copies a JSON state file with one bounded, no-follow
// read: its writers replace it by rename, so the read is whole.
func copyStateFile(src, dst string) error {
	data, err := privdir.ReadFile(src, maxStateFileBytes, os.Geteuid())
	if err != nil {
		return err
	}
	return writeNew(dst, bytes.NewReader(data))
}

// vacuumInto writes a consistent copy of the database src to dst.
func vacuumInto(ctx context.Context, src, dst string) error {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "trusted_schema(OFF)")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: src, RawQuery: q.Encode()}).String())
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// VACUUM INTO creates dst itself (with the process's umask): create
	// it empty and private first, which it accepts.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("VACUUM INTO: %w", err)
	}
	return syncFile(dst)
}

// add hashes the file written at dst and records it as rel.
func (w *writer) add(rel, dst string) error {
	size, sum, err := hashFile(dst)
	if err != nil {
		return err
	}
	w.m.Files = append(w.m.Files, File{Path: rel, Size: size, SHA256: sum})
	return nil
}

// party copies each channel directory's key record and conversations.
func (w *writer) party(ctx context.Context, partyDir string) error {
	entries, err := os.ReadDir(partyDir)
	if errors.Is(err, fs.ErrNotExist) || partyDir == "" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("party_dir %s: %w", partyDir, err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !e.IsDir() || !wire.ValidSafeName(e.Name()) {
			continue // a channel directory is a plain directory (session.Segment)
		}
		if err := w.channel(filepath.Join(partyDir, e.Name()), e.Name()); err != nil {
			return err
		}
	}
	return nil
}

// channel copies one channel directory, again when a file went away
// under the copy.
func (w *writer) channel(root, seg string) error {
	var err error
	for range copyAttempts {
		mark, files, skipped := len(w.m.Files), w.files, len(w.skipped)
		if err = w.channelOnce(root, seg); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		w.m.Files, w.files, w.skipped = w.m.Files[:mark], files, w.skipped[:skipped]
		if err := os.RemoveAll(filepath.Join(w.dir, partyTree, seg)); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: files kept going away under the copy: %w", root, err)
}

// channelOnce copies the key record, then the sessions tree through an
// os.Root of the workspace.
func (w *writer) channelOnce(root, seg string) error {
	key, err := privdir.ReadFile(filepath.Join(root, keyRecord), rtsandbox.MaxChannelKey, -1)
	if err != nil || !rtsandbox.ChannelKey(key).Valid() || session.Segment(rtsandbox.ChannelKey(key)) != seg {
		w.skipped = append(w.skipped, fmt.Sprintf("%s: no key record of its name's channel", root))
		return nil
	}
	out := filepath.Join(w.dir, partyTree, seg)
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}
	if err := writeNew(filepath.Join(out, keyRecord), bytes.NewReader(key)); err != nil {
		return err
	}
	if err := w.add(partyTree+"/"+seg+"/"+keyRecord, filepath.Join(out, keyRecord)); err != nil {
		return err
	}
	ws := filepath.Join(root, "workspace")
	if fi, err := os.Lstat(ws); err != nil || !fi.IsDir() {
		return nil // a channel that never started a worker
	}
	if fi, err := os.Lstat(filepath.Join(root, imageName)); err == nil && fi.Mode().IsRegular() && !mounted(ws) {
		// Mounting it here could race serve's own mount of it.
		w.unread = append(w.unread, fmt.Sprintf("%s: its conversations are in %s, which is not mounted; serve mounts it at the channel's next turn",
			root, imageName))
		return nil
	}
	r, err := os.OpenRoot(ws)
	if err != nil {
		return fmt.Errorf("%s: %w", ws, err)
	}
	defer r.Close()
	return w.tree(r, "sessions", partyTree+"/"+seg+"/"+sessionsPath)
}

// tree copies the directory name of r (a workspace) into the backup as
// rel, following no link and keeping within the bounds.
func (w *writer) tree(r *os.Root, name, rel string) error {
	fi, err := r.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) && name == "sessions" {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		w.skipped = append(w.skipped, fmt.Sprintf("%s: not a directory", rel))
		return nil
	}
	if strings.Count(rel, "/")+2 > MaxDepth {
		w.skipped = append(w.skipped, fmt.Sprintf("%s: deeper than %d", rel, MaxDepth))
		return nil
	}
	d, err := r.Open(name)
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	dst := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		child, childRel := path.Join(name, e.Name()), rel+"/"+e.Name()
		switch {
		case !wire.ValidSafeName(e.Name()) || len(childRel) > MaxPathBytes:
			w.skipped = append(w.skipped, fmt.Sprintf("%s/%q: not a valid name", rel, e.Name()))
		case e.IsDir():
			if err := w.tree(r, child, childRel); err != nil {
				return err
			}
		case !e.Type().IsRegular():
			w.skipped = append(w.skipped, fmt.Sprintf("%s: not a regular file (%v)", childRel, e.Type()))
		case w.files >= MaxFiles:
			w.skipped = append(w.skipped, fmt.Sprintf("%s: more than %d files", childRel, MaxFiles))
		default:
			if err := w.file(r, child, childRel, filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// file copies one regular file of the workspace: at most its size when
// opened; a conversation (.jsonl) cut after its last newline.
func (w *writer) file(r *os.Root, name, rel, dst string) error {
	f, err := openRegular(r, name)
	if errors.Is(err, privdir.ErrNotRegular) {
		w.skipped = append(w.skipped, fmt.Sprintf("%s: %v", rel, err))
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := writeNew(dst, io.LimitReader(f, fi.Size())); err != nil {
		return err
	}
	if strings.HasSuffix(name, ".jsonl") {
		if err := cutAfterLastNewline(dst); err != nil {
			return err
		}
	}
	w.files++
	return w.add(rel, dst)
}

// cutAfterLastNewline truncates the file at p after its last newline
// (to nothing without one).
func cutAfterLastNewline(p string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	keep := bytes.LastIndexByte(data, '\n') + 1
	if keep == len(data) {
		return nil
	}
	if err := os.Truncate(p, int64(keep)); err != nil {
		return err
	}
	return syncFile(p)
}

// writeNew creates p (0600, exclusively, no link followed), copies r
// into it and syncs it.
func writeNew(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncFile fsyncs the file at p.
func syncFile(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// hashFile returns the size and hex SHA-256 of the file at p.
func hashFile(p string) (int64, string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	return hashReader(f)
}

func hashReader(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func isSQLite(name string) bool { return slices.Contains(sqliteFiles, name) }
