package backup

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/inflight"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/session"
)

// Restored is what Restore did.
type Restored struct {
	Manifest Manifest
	// Aside are the directories the earlier state was moved to (forced).
	Aside []string
}

// ReadManifest reads and parses dir's manifest (ParseManifest).
func ReadManifest(dir string) (Manifest, error) {
	data, err := privdir.ReadFile(filepath.Join(dir, ManifestName), MaxManifestBytes, -1)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("%s: %w: it has no %s (a backup that did not finish)", dir, ErrIncomplete, ManifestName)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestName), err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestName), err)
	}
	return m, nil
}

// Verify checks every file of m in dir against its size and SHA-256, and
// every key record against its directory's name, reading through an
// os.Root of dir (no link leads out of it). Errors name the file.
func Verify(ctx context.Context, dir string, m Manifest) error {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, f := range m.Files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := verifyOne(r, f); err != nil {
			return err
		}
	}
	return nil
}

// verifyOne checks one file of the backup.
func verifyOne(r *os.Root, f File) error {
	in, err := openRegular(r, f.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	defer in.Close()
	size, sum, err := hashReader(io.LimitReader(in, f.Size+1))
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if size != f.Size || sum != f.SHA256 {
		return fmt.Errorf("%s: %w (manifest: %d bytes, sha256 %s; file: %d bytes, sha256 %s)", f.Path, ErrChecksum, f.Size, f.SHA256, size, sum)
	}
	if keyFileOf(f.Path) == "" {
		return nil
	}
	key, err := r.ReadFile(f.Path)
	seg, _ := channelOf(f.Path)
	if err != nil || !rtsandbox.ChannelKey(key).Valid() || session.Segment(rtsandbox.ChannelKey(key)) != seg {
		return fmt.Errorf("%s: %w: not the key record of channel directory %s", f.Path, ErrManifest, seg)
	}
	return nil
}

// openRegular opens name in r, never blocking, and requires what it
// opened to be the regular file that lstat found there: a link is never
// followed (os.Root follows one within the root even with O_NOFOLLOW), not
// even one swapped in between the two calls.
func openRegular(r *os.Root, name string) (*os.File, error) {
	name = filepath.FromSlash(name)
	lfi, err := r.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !lfi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w (%v)", privdir.ErrNotRegular, lfi.Mode().Type())
	}
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !os.SameFile(lfi, fi) {
		f.Close()
		return nil, fmt.Errorf("%w: it changed while it was opened", privdir.ErrNotRegular)
	}
	return f, nil
}

// Check reads dir's manifest and verifies every file against it: what
// Restore needs, done before anything is touched.
func Check(ctx context.Context, dir string) (Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return Manifest{}, err
	}
	if err := Verify(ctx, dir, m); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Restore writes the backup in dir, whose manifest m Check returned, into
// l: when l's state dir or party dir holds state, it refuses
// (ErrNotEmpty, naming what is there) unless force, which moves that
// state aside; then it writes each file atomically, checking its bytes
// against m again as it copies them. The caller holds serve's locks on
// l.StateDir.
func Restore(ctx context.Context, l Layout, dir string, m Manifest, force bool, now time.Time) (Restored, error) {
	hasParty := slices.ContainsFunc(m.Files, func(f File) bool { _, ok := channelOf(f.Path); return ok })
	if hasParty && os.Geteuid() == 0 && l.Worker == nil {
		return Restored{}, fmt.Errorf("the backup holds session workspaces, which a host running as root hands to the worker user: %w", l.WorkerErr)
	}
	if _, err := privdir.Make(l.StateDir); err != nil {
		return Restored{}, fmt.Errorf("state_dir: %w", err)
	}
	if hasParty {
		if _, err := privdir.Make(l.PartyDir); err != nil {
			return Restored{}, fmt.Errorf("party_dir: %w", err)
		}
	}
	held, err := occupied(l)
	if err != nil {
		return Restored{}, err
	}
	out := Restored{Manifest: m}
	if len(held) > 0 {
		if !force {
			return Restored{}, fmt.Errorf("%w: %s holds state (%s); restore only into an empty state dir, or pass --force to move it aside first",
				ErrNotEmpty, l.StateDir, strings.Join(held, ", "))
		}
		if out.Aside, err = moveAside(l, now); err != nil {
			return out, err
		}
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return out, err
	}
	defer r.Close()
	w := restorer{l: l, src: r}
	for _, f := range ordered(m.Files) {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if err := w.file(f); err != nil {
			return out, fmt.Errorf("restore %s: %w", f.Path, err)
		}
	}
	return out, nil
}

// ordered is files in the order restore writes them: the workspaces,
// then the state files in StateFiles' order (the channel store last).
func ordered(files []File) []File {
	out := slices.Clone(files)
	rank := func(f File) int {
		if name, ok := strings.CutPrefix(f.Path, stateTree+"/"); ok {
			return 1 + slices.Index(StateFiles(), name)
		}
		return 0
	}
	slices.SortStableFunc(out, func(a, b File) int { return rank(a) - rank(b) })
	return out
}

// stateNames are the state dir's names that count as state: a restore
// refuses to write over them and a forced one moves them aside.
func stateNames() []string {
	names := []string{inflight.FileName}
	for _, n := range StateFiles() {
		names = append(names, n)
		if isSQLite(n) {
			names = append(names, n+"-wal", n+"-shm", n+"-journal")
		}
	}
	return names
}

// occupied names the state in l: state files and channel directories.
func occupied(l Layout) ([]string, error) {
	var held []string
	for _, n := range stateNames() {
		if _, err := os.Lstat(filepath.Join(l.StateDir, n)); err == nil {
			held = append(held, n)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	segs, err := channelDirs(l.PartyDir)
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		held = append(held, filepath.Join(l.PartyDir, s))
	}
	return held, nil
}

// channelDirs are the names of the entries of the party dir.
func channelDirs(partyDir string) ([]string, error) {
	entries, err := os.ReadDir(partyDir)
	if errors.Is(err, fs.ErrNotExist) || partyDir == "" {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("party_dir %s: %w", partyDir, err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

// moveAside moves the state of l into <state_dir>.pre-restore-<time> and
// the channel directories into <party_dir>.pre-restore-<time> (each
// beside its tree, so the renames stay on one filesystem), after checking
// that no workspace is mounted. Nothing is deleted.
func moveAside(l Layout, now time.Time) ([]string, error) {
	segs, err := channelDirs(l.PartyDir)
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		if mounted(filepath.Join(l.PartyDir, s, "workspace")) {
			return nil, fmt.Errorf("%w: %s; stop its session container and unmount it first (rtsandbox reap --config FILE)",
				ErrMounted, filepath.Join(l.PartyDir, s, "workspace"))
		}
	}
	suffix := ".pre-restore-" + now.UTC().Format("20060102T150405Z")
	var aside []string
	stateAside := filepath.Clean(l.StateDir) + suffix
	if err := os.Mkdir(stateAside, 0o700); err != nil {
		return nil, fmt.Errorf("move the old state aside: %w", err)
	}
	aside = append(aside, stateAside)
	for _, n := range stateNames() {
		err := os.Rename(filepath.Join(l.StateDir, n), filepath.Join(stateAside, n))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return aside, fmt.Errorf("move the old state aside: %w", err)
		}
	}
	if len(segs) == 0 {
		return aside, nil
	}
	partyAside := filepath.Clean(l.PartyDir) + suffix
	if err := os.Mkdir(partyAside, 0o700); err != nil {
		return aside, fmt.Errorf("move the old channel directories aside: %w", err)
	}
	aside = append(aside, partyAside)
	for _, s := range segs {
		if err := os.Rename(filepath.Join(l.PartyDir, s), filepath.Join(partyAside, s)); err != nil {
			return aside, fmt.Errorf("move the old channel directories aside: %w", err)
		}
	}
	return aside, nil
}

// mounted reports whether p is a mount point: a directory on another
// device than its parent.
func mounted(p string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(p, &st) != nil || syscall.Lstat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// restorer writes a backup's files into a layout.
type restorer struct {
	l   Layout
	src *os.Root
}

// file writes one file of the backup to its place, atomically.
func (w restorer) file(f File) error {
	if name, ok := strings.CutPrefix(f.Path, stateTree+"/"); ok {
		return w.copy(f, filepath.Join(w.l.StateDir, name), nil)
	}
	seg, _ := channelOf(f.Path)
	rel := strings.TrimPrefix(f.Path, partyTree+"/"+seg+"/")
	root := filepath.Join(w.l.PartyDir, seg)
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if rel == keyRecord {
		return w.copy(f, filepath.Join(root, keyRecord), nil)
	}
	// workspace/ and what lies under it are the worker user's.
	owner := w.l.Worker
	if os.Geteuid() != 0 {
		owner = nil
	}
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		d := filepath.Join(root, filepath.Join(parts[:i]...))
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s: not a directory", d)
		}
		if err := chown(d, owner); err != nil {
			return err
		}
	}
	return w.copy(f, filepath.Join(root, filepath.FromSlash(rel)), owner)
}

// copy writes f to dst: a temp file beside it (0600, exclusive), the
// bytes checked again against the manifest, fsync, owner, rename, fsync
// of the directory.
func (w restorer) copy(f File, dst string, owner *Owner) error {
	in, err := openRegular(w.src, f.Path)
	if err != nil {
		return err
	}
	defer in.Close()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := dst + ".restore-" + hex.EncodeToString(rnd[:])
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(in, f.Size+1))
	if err == nil && (n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256) {
		err = fmt.Errorf("%w: it changed after it was verified", ErrChecksum)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = chown(tmp, owner)
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// chown hands p to owner; nil leaves it the host user's.
func chown(p string, owner *Owner) error {
	if owner == nil {
		return nil
	}
	if err := os.Lchown(p, owner.UID, owner.GID); err != nil {
		return fmt.Errorf("hand %s to the worker user: %w", p, err)
	}
	return nil
}
