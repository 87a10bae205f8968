// Package channels is the persisted set of sandboxed channels: a JSON array
// of channel keys in a private, service-owned state directory that one host
// process owns at a time.
//
// The contract (sealed spec §5.1, §7.1 items 11 and 14):
//
//   - Open creates the directory 0700 when missing. The directory (its
//     canonical path) must be owned by the process's effective uid with no
//     group or other permission bits, else ErrPrivate. Open then takes an
//     exclusive, non-blocking flock on <dir>/channels.lock; a second opener,
//     in this or another process, gets ErrLocked.
//   - An existing <dir>/channels.json must be a regular file (lstat: not a
//     symlink) owned by the service, else ErrPrivate; its content must be a
//     JSON array of valid channel keys, else ErrState. The store fails closed:
//     Open returns no store.
//   - When channels.json does not exist, the initial keys seed it and it is
//     written at once, so initial keys matter only on the very first start.
//   - Enable and Disable save atomically (write <file>.tmp 0600, fsync,
//     rename, fsync the directory). A failed save restores the in-memory set
//     under the same lock, so memory never claims what the disk lacks.
package channels

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
)

// File names inside the state directory.
const (
	StateFile = "channels.json"
	LockFile  = "channels.lock"
)

// maxStateSize bounds what Open reads: far more than any real channel list.
const maxStateSize = 4 << 20

// Error classes. Test with errors.Is.
var (
	// ErrLocked: another store (in any process) holds the directory.
	ErrLocked = fmt.Errorf("%w: channel state directory is in use by another host process", rtsandbox.ErrRefused)
	// ErrPrivate: the directory or a file in it is not private to the service.
	ErrPrivate = fmt.Errorf("%w: routing state must be private and service-owned", rtsandbox.ErrRefused)
	// ErrState: the state file or the initial keys are not a list of valid keys.
	ErrState = fmt.Errorf("%w: invalid sandbox channel state", rtsandbox.ErrInvalid)
	// ErrKey: Enable or Disable got an invalid channel key.
	ErrKey = fmt.Errorf("%w: invalid channel key", rtsandbox.ErrInvalid)
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("channel store is closed")
)

// Store is the set of sandboxed channels. It is safe for concurrent use.
type Store struct {
	dir  string
	path string
	lock *os.File

	mu     sync.Mutex
	keys   []rtsandbox.ChannelKey // insertion order
	closed bool
}

// Open opens (creating when missing) the state directory dir and loads the
// channel set. initial seeds a state file that does not exist yet. Errors
// wrap ErrPrivate, ErrLocked, ErrState or the underlying I/O error.
func Open(dir string, initial []rtsandbox.ChannelKey) (*Store, error) {
	dir, err := privateDir(dir)
	if err != nil {
		return nil, err
	}
	lock, err := acquire(filepath.Join(dir, LockFile))
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, path: filepath.Join(dir, StateFile), lock: lock}
	if err := s.load(initial); err != nil {
		lock.Close() // releases the flock
		return nil, err
	}
	return s, nil
}

// privateDir creates dir (0700) when missing and checks the canonical
// directory: owned by this process, no group/other bits.
func privateDir(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("channel state directory: empty path: %w", rtsandbox.ErrInvalid)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("channel state directory: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return "", fmt.Errorf("channel state directory: %w", err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("channel state directory: %w", err)
	}
	if !fi.IsDir() || !ownedByUs(fi) || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("channel state directory %s (mode %v): %w", abs, fi.Mode().Perm(), ErrPrivate)
	}
	return abs, nil
}

func ownedByUs(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// acquire opens the lock file without following symlinks and takes a
// non-blocking exclusive flock. flock belongs to the open file description,
// so a second Open in the same process is refused too.
func acquire(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("channel state lock: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && (!fi.Mode().IsRegular() || !ownedByUs(fi)) {
		err = ErrPrivate
	}
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			err = ErrLocked
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("channel state lock %s: %w", path, err)
	}
	return f, nil
}

// load reads the state file, or seeds it from initial when it is missing.
func (s *Store) load(initial []rtsandbox.ChannelKey) error {
	fi, err := os.Lstat(s.path)
	if errors.Is(err, os.ErrNotExist) {
		keys, err := validKeys(initial)
		if err != nil {
			return fmt.Errorf("initial channels: %w", err)
		}
		s.keys = keys
		return s.save(s.keys)
	}
	if err != nil {
		return fmt.Errorf("channel state: %w", err)
	}
	if !fi.Mode().IsRegular() || !ownedByUs(fi) {
		return fmt.Errorf("channel state %s: %w", s.path, ErrPrivate)
	}
	data, err := readState(s.path)
	if err != nil {
		return err
	}
	var raw []string
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil || raw == nil || dec.More() {
		// raw == nil: the file says null, which is not a list.
		return fmt.Errorf("channel state %s: %w", s.path, ErrState)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("channel state %s: trailing data: %w", s.path, ErrState)
	}
	keys := make([]rtsandbox.ChannelKey, len(raw))
	for i, k := range raw {
		keys[i] = rtsandbox.ChannelKey(k)
	}
	if s.keys, err = validKeys(keys); err != nil {
		return fmt.Errorf("channel state %s: %w", s.path, err)
	}
	return nil
}

// readState reads at most maxStateSize bytes without following a symlink
// swapped in after the lstat.
func readState(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("channel state: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxStateSize+1))
	if err != nil {
		return nil, fmt.Errorf("channel state: %w", err)
	}
	if len(data) > maxStateSize {
		return nil, fmt.Errorf("channel state %s: larger than %d bytes: %w", path, maxStateSize, ErrState)
	}
	return data, nil
}

// validKeys checks every key and drops duplicates, keeping first
// occurrences (the reference stores a Set).
func validKeys(keys []rtsandbox.ChannelKey) ([]rtsandbox.ChannelKey, error) {
	out := make([]rtsandbox.ChannelKey, 0, len(keys))
	for _, k := range keys {
		if !k.Valid() {
			return nil, fmt.Errorf("key %q: %w", k, ErrState)
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Enabled reports whether key is sandboxed.
func (s *Store) Enabled(key rtsandbox.ChannelKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.keys, key)
}

// List returns the sandboxed channels in the order they were enabled.
func (s *Store) List() []rtsandbox.ChannelKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// Enable sandboxes key and saves. Enabling an enabled key writes nothing.
// Errors: ErrKey, ErrClosed, or the save error (the set is then unchanged).
func (s *Store) Enable(key rtsandbox.ChannelKey) error {
	if !key.Valid() {
		return fmt.Errorf("enable %q: %w", key, ErrKey)
	}
	return s.change(key, func(keys []rtsandbox.ChannelKey) []rtsandbox.ChannelKey {
		if slices.Contains(keys, key) {
			return nil
		}
		return append(slices.Clone(keys), key)
	})
}

// Disable stops sandboxing key and saves; the channel's workspace and memory
// are not touched. Disabling a key that is not enabled writes nothing.
// Errors: ErrKey, ErrClosed, or the save error (the set is then unchanged).
func (s *Store) Disable(key rtsandbox.ChannelKey) error {
	if !key.Valid() {
		return fmt.Errorf("disable %q: %w", key, ErrKey)
	}
	return s.change(key, func(keys []rtsandbox.ChannelKey) []rtsandbox.ChannelKey {
		i := slices.Index(keys, key)
		if i < 0 {
			return nil
		}
		return slices.Delete(slices.Clone(keys), i, i+1)
	})
}

// change computes the next set (nil: no change), saves it and only then
// makes it current, all under s.mu: the in-memory set is rolled back by
// never replacing it when the save fails.
func (s *Store) change(key rtsandbox.ChannelKey, next func([]rtsandbox.ChannelKey) []rtsandbox.ChannelKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	keys := next(s.keys)
	if keys == nil {
		return nil
	}
	if err := s.save(keys); err != nil {
		return fmt.Errorf("channel %q: %w", key, err)
	}
	s.keys = keys
	return nil
}

// save writes keys atomically: <file>.tmp (0600, no symlink follow), fsync,
// rename over the state file, fsync the directory. A fixed temp name is
// safe because the flock makes this process the only writer.
func (s *Store) save(keys []rtsandbox.ChannelKey) error {
	data, err := json.Marshal(keys)
	if err != nil {
		return fmt.Errorf("save channel state: %w", err)
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("save channel state: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600) // an old temp file may have had other bits
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		os.Remove(tmp) // ours: the open succeeded
		return fmt.Errorf("save channel state: %w", err)
	}
	syncDir(s.dir)
	return nil
}

// syncDir makes the rename durable. It is best effort: after the rename
// the new state is what the file holds, so reporting a failure here would
// make memory disagree with the file.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// Close releases the directory lock. Later changes fail with ErrClosed;
// Enabled and List keep answering from memory. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.lock.Close()
}
