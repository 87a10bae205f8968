// Package channels is the persisted set of sandboxed channels: a JSON array
// of channel keys in a private, service-owned state directory that one host
// process owns at a time.
//
// The contract (docs/host.md, "State that survives restarts"; docs/sealed-turn.md, "Decisions where the issue was silent"):
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
//     The first start is recorded durably beside it (channels.seeded): a
//     state file missing after that is ErrMissing, naming the file, never
//     a silent re-seed that would forget every channel an owner enabled.
//     Reseed removes the record on purpose (rtsandbox serve --reseed).
//   - OpenPending is Open for a start that may still be refused: a store it
//     would seed holds the initial keys in memory only, and Seed writes the
//     state file and its record once the start succeeded (or the first
//     Enable or Disable does), so a refused start spends nothing.
//   - Read gives a read-only view without the lock, for commands that run
//     beside a server.
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
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// File names inside the state directory.
const (
	StateFile = "channels.json"
	LockFile  = "channels.lock"
	// SeededFile records that the store was seeded once: a state file
	// missing after that is an error, not a first start.
	SeededFile = "channels.seeded"
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
	// ErrMissing: the state file is gone although the store was seeded.
	ErrMissing = fmt.Errorf("%w: channel store is missing", rtsandbox.ErrInvalid)
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
	// pending: the keys are the initial ones, not written yet (OpenPending).
	pending bool
}

// Open opens (creating when missing) the state directory dir and loads the
// channel set. initial seeds a state file that does not exist yet. Errors
// wrap ErrPrivate, ErrLocked, ErrState or the underlying I/O error.
func Open(dir string, initial []rtsandbox.ChannelKey) (*Store, error) {
	s, err := OpenPending(dir, initial)
	if err != nil {
		return nil, err
	}
	if err := s.Seed(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// OpenPending is Open that writes nothing yet when it would seed: the
// store answers with the initial keys from memory until Seed, Enable or
// Disable writes them (and the record of the seeding), so a start refused
// after it leaves the state directory as it found it.
func OpenPending(dir string, initial []rtsandbox.ChannelKey) (*Store, error) {
	dir, err := privateDir(dir)
	if err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
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
	abs, err := privdir.Make(dir)
	if errors.Is(err, privdir.ErrNotPrivate) {
		return "", fmt.Errorf("channel state directory: %w (%v)", ErrPrivate, err)
	}
	if err != nil {
		return "", fmt.Errorf("channel state directory: %w", err)
	}
	return abs, nil
}

func ownedByUs(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// load reads the state file, or seeds it from initial when it is missing.
func (s *Store) load(initial []rtsandbox.ChannelKey) error {
	keys, err := readKeys(s.path)
	seeded := filepath.Join(s.dir, SeededFile)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Lstat(seeded); serr == nil {
			return fmt.Errorf("%w: %s is missing but %s says it was seeded; restore it from a backup, or start with --reseed to seed initial_channels again", ErrMissing, s.path, seeded)
		}
		if keys, err = validKeys(initial); err != nil {
			return fmt.Errorf("initial channels: %w", err)
		}
		s.keys, s.pending = keys, true
		return nil
	} else if err != nil {
		return err
	}
	s.keys = keys
	return s.mark()
}

// mark writes the record of the seeding when it is missing. It follows
// the state file, so a crash between the two leaves a store that is
// marked at the next start.
func (s *Store) mark() error {
	seeded := filepath.Join(s.dir, SeededFile)
	if _, err := os.Lstat(seeded); errors.Is(err, os.ErrNotExist) {
		if err := privdir.WriteFile(seeded, []byte("the channel store was seeded; see rtsandbox serve --reseed\n")); err != nil {
			return fmt.Errorf("channel store marker: %w", err)
		}
	}
	return nil
}

// Seed writes the initial keys a pending store holds (OpenPending), then
// the record of the seeding; a store already written is left alone.
// Errors: ErrClosed, or the write's.
func (s *Store) Seed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.pending {
		return nil
	}
	if s.closed {
		return ErrClosed
	}
	return s.write(s.keys)
}

// write saves keys and, for a pending store, marks it seeded.
func (s *Store) write(keys []rtsandbox.ChannelKey) error {
	if err := s.save(keys); err != nil {
		return err
	}
	if !s.pending {
		return nil
	}
	if err := s.mark(); err != nil {
		return err
	}
	s.pending = false
	return nil
}

// Read returns the stored channel set without taking the lock, for
// read-only views while a server runs (the file is replaced atomically).
// It wraps os.ErrNotExist when no store was written yet.
func Read(dir string) ([]rtsandbox.ChannelKey, error) {
	dir, err := privateDir(dir)
	if err != nil {
		return nil, err
	}
	return readKeys(filepath.Join(dir, StateFile))
}

// Reseed removes the marker of a seeded store so that the next Open seeds
// initial channels again when the state file is missing. It refuses while
// a store holds the directory.
func Reseed(dir string) error {
	dir, err := privateDir(dir)
	if err != nil {
		return err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := os.Remove(filepath.Join(dir, SeededFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("channel store marker: %w", err)
	}
	return nil
}

// lockDir takes the store's exclusive lock on dir (privdir.Lock on
// LockFile) without waiting. Errors wrap ErrLocked when another store holds
// it and ErrPrivate when the lock file is not the service's own.
func lockDir(dir string) (*os.File, error) {
	lock, err := privdir.Lock(filepath.Join(dir, LockFile))
	switch {
	case errors.Is(err, privdir.ErrLocked):
		return nil, fmt.Errorf("%w (%v)", ErrLocked, err)
	case errors.Is(err, privdir.ErrNotPrivate):
		return nil, fmt.Errorf("%w (%v)", ErrPrivate, err)
	case err != nil:
		return nil, fmt.Errorf("channel state lock: %w", err)
	}
	return lock, nil
}

// readKeys reads and checks a state file; it wraps os.ErrNotExist when
// there is none.
func readKeys(path string) ([]rtsandbox.ChannelKey, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("channel state: %w", err)
	}
	if !fi.Mode().IsRegular() || !ownedByUs(fi) {
		return nil, fmt.Errorf("channel state %s: %w", path, ErrPrivate)
	}
	data, err := readState(path)
	if err != nil {
		return nil, err
	}
	var raw []string
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil || raw == nil || dec.More() {
		// raw == nil: the file says null, which is not a list.
		return nil, fmt.Errorf("channel state %s: %w", path, ErrState)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("channel state %s: trailing data: %w", path, ErrState)
	}
	keys := make([]rtsandbox.ChannelKey, len(raw))
	for i, k := range raw {
		keys[i] = rtsandbox.ChannelKey(k)
	}
	if keys, err = validKeys(keys); err != nil {
		return nil, fmt.Errorf("channel state %s: %w", path, err)
	}
	return keys, nil
}

// readState reads at most maxStateSize bytes without following a symlink
// swapped in after the lstat, and without blocking on a FIFO.
func readState(path string) ([]byte, error) {
	data, err := privdir.ReadFile(path, maxStateSize, os.Geteuid())
	switch {
	case errors.Is(err, privdir.ErrTooLarge):
		return nil, fmt.Errorf("channel state %s: larger than %d bytes: %w", path, maxStateSize, ErrState)
	case errors.Is(err, privdir.ErrNotRegular), errors.Is(err, privdir.ErrNotPrivate):
		return nil, fmt.Errorf("channel state %s: %w", path, ErrPrivate)
	case err != nil:
		return nil, fmt.Errorf("channel state: %w", err)
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
	if err := s.write(keys); err != nil {
		return fmt.Errorf("channel %q: %w", key, err)
	}
	s.keys = keys
	return nil
}

// save writes keys atomically (privdir.WriteFile: a fresh 0600 temp file,
// fsync, rename, fsync of the directory).
func (s *Store) save(keys []rtsandbox.ChannelKey) error {
	data, err := json.Marshal(keys)
	if err != nil {
		return fmt.Errorf("save channel state: %w", err)
	}
	if err := privdir.WriteFile(s.path, data); err != nil {
		return fmt.Errorf("save channel state: %w", err)
	}
	return nil
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
