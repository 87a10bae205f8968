// Package chanstate keeps the sealed mode's per-channel state (the memory
// and history of rtsandbox.ChannelState) on the host.
//
// Before this package the worker kept memory.json and history.json in a
// per-channel directory that the guest could write and that outlived every
// turn: a compromised worker filled it with 2 GiB, or planted a FIFO at
// memory.json that hung every later turn of the channel. Now no
// guest-writable host directory outlives a sealed turn. The contract:
//
//   - One file per channel, <dir>/<sha256 hex of the key>.json, holding
//     {"memory":[…],"history":[…]}, in a directory private to the service
//     (0700, owned by it; package privdir). Files are written atomically
//     and read bounded (MaxFileBytes), no-follow and non-blocking.
//   - Save checks the state against the limits of the shared contract
//     (Check) before it writes anything; an update that breaks them is
//     refused with ErrInvalid and the stored state stays as it was.
//   - A stored file that does not parse or breaks the limits is ErrCorrupt,
//     naming the file: the host wrote it, so it is never silently replaced.
//   - Migration, the one path from the old layout: when a channel has no
//     file yet and Options.LegacyRoot holds its old workspace directory,
//     its memory.json and history.json are imported (read as untrusted:
//     bounded, no-follow, non-blocking, checked), the state is saved, and
//     the old directory is removed. A legacy directory that cannot be
//     imported (a link, a FIFO, a file that does not parse or breaks the
//     limits) is renamed aside to <name>.unmigrated for the operator, with
//     a warning naming it and the reason, and the channel starts empty:
//     guest-planted data never wedges a channel and nothing is deleted.
package chanstate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// MaxFileBytes bounds a state file: memory (512 KiB) and history (20 × 8
// KiB) as JSON with room for the wrapper, far below this.
const MaxFileBytes = 1 << 20

// maxLegacyFile bounds each legacy workspace file. Old workers wrote at
// most 512 KiB of memory and 20 × 8 KiB of history.
const maxLegacyFile = 2 << 20

// Error classes. Test with errors.Is.
var (
	// ErrInvalid: a state update breaks the limits; nothing was written.
	ErrInvalid = fmt.Errorf("%w: channel state breaks its limits", rtsandbox.ErrInvalid)
	// ErrCorrupt: a stored state file does not parse or breaks the limits.
	ErrCorrupt = errors.New("corrupt channel state file")
)

// Options configure a Store.
type Options struct {
	// Dir holds the state files; it is created 0700 when missing and must
	// be private to the service.
	Dir string
	// LegacyRoot is the old per-channel workspace root to migrate from;
	// "" disables migration.
	LegacyRoot string
	// Logger receives migration warnings; nil discards them.
	Logger *slog.Logger
}

// Store reads and writes channel state files. It is safe for concurrent
// use; the sealed runtime runs one turn per channel at a time.
type Store struct {
	dir    string
	legacy string
	log    *slog.Logger
	mu     sync.Mutex // one migration or write at a time
}

// Open prepares the state directory.
func Open(o Options) (*Store, error) {
	dir, err := privdir.Make(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("channel state directory: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{dir: dir, legacy: o.LegacyRoot, log: log}, nil
}

// FileName is a channel's name in the state directory and in the legacy
// workspace root: the full hex sha256 of the key's UTF-8 bytes, never
// derived from anything path-like.
func FileName(channel rtsandbox.ChannelKey) string {
	sum := sha256.Sum256([]byte(channel))
	return hex.EncodeToString(sum[:])
}

func (s *Store) path(channel rtsandbox.ChannelKey) string {
	return filepath.Join(s.dir, FileName(channel)+".json")
}

// Load returns the channel's state: empty lists for a channel never seen,
// the migrated legacy state on first use. Errors: ErrCorrupt (naming the
// file), and I/O errors of the state directory.
func (s *Store) Load(channel rtsandbox.ChannelKey) (rtsandbox.ChannelState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.read(channel)
	if errors.Is(err, os.ErrNotExist) {
		return s.migrate(channel)
	}
	return st, err
}

func (s *Store) read(channel rtsandbox.ChannelKey) (rtsandbox.ChannelState, error) {
	path := s.path(channel)
	data, err := privdir.ReadFile(path, MaxFileBytes, os.Geteuid())
	if errors.Is(err, os.ErrNotExist) {
		return rtsandbox.ChannelState{}, err
	}
	if err != nil {
		return rtsandbox.ChannelState{}, fmt.Errorf("%w %s: %w", ErrCorrupt, path, err)
	}
	st, err := decode(data)
	if err != nil {
		return rtsandbox.ChannelState{}, fmt.Errorf("%w %s: %w", ErrCorrupt, path, err)
	}
	return st, nil
}

// Save checks st and writes it atomically as the channel's state.
func (s *Store) Save(channel rtsandbox.ChannelKey, st rtsandbox.ChannelState) error {
	if err := Check(st); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.write(channel, st)
}

func (s *Store) write(channel rtsandbox.ChannelKey, st rtsandbox.ChannelState) error {
	data, err := jsonjs.Marshal(normal(st))
	if err != nil {
		return fmt.Errorf("channel state: %w", err)
	}
	if err := privdir.WriteFile(s.path(channel), data); err != nil {
		return fmt.Errorf("channel state: %w", err)
	}
	return nil
}

// normal replaces nil lists with empty ones, as the wire wants.
func normal(st rtsandbox.ChannelState) rtsandbox.ChannelState {
	if st.Memory == nil {
		st.Memory = []rtsandbox.MemoryEntry{}
	}
	if st.History == nil {
		st.History = []rtsandbox.HistoryEntry{}
	}
	return st
}

// decode parses a state file strictly: one object with the two lists and
// nothing else, then Check.
func decode(data []byte) (rtsandbox.ChannelState, error) {
	var st rtsandbox.ChannelState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return rtsandbox.ChannelState{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return rtsandbox.ChannelState{}, errors.New("trailing data")
	}
	if err := Check(st); err != nil {
		return rtsandbox.ChannelState{}, err
	}
	return normal(st), nil
}

// Check applies the limits of the shared contract (sealed spec §4.6, §4.7):
// at most 256 memory entries whose JSON is at most 512 KiB, each with scope
// "channel" or "speaker:<id>", a key of 1..128 and a non-blank text of at
// most 2,048 UTF-16 units, no (scope, key) twice; at most 20 history
// messages with role user or assistant and content of at most 8 KiB as a
// JSON string. Errors wrap ErrInvalid and name the first rule broken.
func Check(st rtsandbox.ChannelState) error {
	if err := checkMemory(st.Memory); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, err)
	}
	if err := checkHistory(st.History); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, err)
	}
	return nil
}

func checkMemory(mem []rtsandbox.MemoryEntry) error {
	if len(mem) > rtsandbox.MaxMemoryEntries {
		return fmt.Errorf("memory has %d entries, more than %d", len(mem), rtsandbox.MaxMemoryEntries)
	}
	seen := make(map[[2]string]bool, len(mem))
	for i, e := range mem {
		id, speaker := strings.CutPrefix(e.Scope, "speaker:")
		switch {
		case e.Scope != "channel" && !speaker, speaker && rtsandbox.UTF16Len(id) > rtsandbox.MaxSpeakerField:
			return fmt.Errorf("memory entry %d: scope must be channel or speaker:<id>", i)
		case rtsandbox.UTF16Len(e.Key) < 1 || rtsandbox.UTF16Len(e.Key) > rtsandbox.MaxMemoryKey:
			return fmt.Errorf("memory entry %d: key must be 1..%d characters", i, rtsandbox.MaxMemoryKey)
		case rtsandbox.TrimJS(e.Text) == "" || rtsandbox.UTF16Len(e.Text) > rtsandbox.MaxMemoryText:
			return fmt.Errorf("memory entry %d: text must be 1..%d characters", i, rtsandbox.MaxMemoryText)
		case seen[[2]string{e.Scope, e.Key}]:
			return fmt.Errorf("memory entry %d: scope and key repeat an earlier entry", i)
		}
		seen[[2]string{e.Scope, e.Key}] = true
	}
	if n := jsonjs.Size(normal(rtsandbox.ChannelState{Memory: mem}).Memory); n > rtsandbox.MaxMemoryBytes {
		return fmt.Errorf("memory is %d bytes of JSON, more than %d", n, rtsandbox.MaxMemoryBytes)
	}
	return nil
}

func checkHistory(hist []rtsandbox.HistoryEntry) error {
	if len(hist) > rtsandbox.MaxHistory {
		return fmt.Errorf("history has %d messages, more than %d", len(hist), rtsandbox.MaxHistory)
	}
	for i, h := range hist {
		if h.Role != "user" && h.Role != "assistant" {
			return fmt.Errorf("history message %d: role must be user or assistant", i)
		}
		if jsonjs.StringSize(h.Content) > rtsandbox.HistoryBudget {
			return fmt.Errorf("history message %d: content is over %d bytes of JSON", i, rtsandbox.HistoryBudget)
		}
	}
	return nil
}

// migrate imports the channel's legacy workspace once (see the package
// doc). It runs under s.mu.
func (s *Store) migrate(channel rtsandbox.ChannelKey) (rtsandbox.ChannelState, error) {
	empty := normal(rtsandbox.ChannelState{})
	if s.legacy == "" {
		return empty, nil
	}
	dir := filepath.Join(s.legacy, FileName(channel))
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return empty, nil
	}
	if err != nil {
		return empty, fmt.Errorf("legacy workspace %s: %w", dir, err)
	}
	st, why := readLegacy(dir, fi)
	if why != nil {
		return empty, s.setAside(channel, dir, why)
	}
	if err := s.write(channel, st); err != nil {
		return empty, err
	}
	if err := os.RemoveAll(dir); err != nil {
		// The state is imported; the file now exists, so migration never
		// runs again for this channel. What is left is only guest data.
		s.log.Warn("legacy workspace imported but not removed", "dir", dir, "err", err)
	} else {
		s.log.Info("legacy workspace imported and removed", "channel", string(channel), "dir", dir)
	}
	return st, nil
}

// readLegacy reads memory.json and history.json of one old workspace as
// untrusted input. Missing files mean empty lists.
func readLegacy(dir string, fi os.FileInfo) (rtsandbox.ChannelState, error) {
	if !fi.IsDir() {
		return rtsandbox.ChannelState{}, errors.New("not a directory")
	}
	var st rtsandbox.ChannelState
	for _, f := range []struct {
		name string
		dst  any
	}{{"memory.json", &st.Memory}, {"history.json", &st.History}} {
		data, err := privdir.ReadFile(filepath.Join(dir, f.name), maxLegacyFile, -1)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return rtsandbox.ChannelState{}, fmt.Errorf("%s: %w", f.name, err)
		}
		if err := json.Unmarshal(data, f.dst); err != nil {
			return rtsandbox.ChannelState{}, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if err := Check(st); err != nil {
		return rtsandbox.ChannelState{}, err
	}
	return normal(st), nil
}

// setAside renames a legacy workspace that cannot be imported so that no
// later turn reads it, and warns the operator. Failing to rename it fails
// the load: the channel must not run on a half-read legacy state.
func (s *Store) setAside(channel rtsandbox.ChannelKey, dir string, why error) error {
	aside := fmt.Sprintf("%s.unmigrated-%d", dir, time.Now().UnixNano())
	if err := os.Rename(dir, aside); err != nil {
		return fmt.Errorf("legacy workspace %s cannot be imported (%v) nor set aside: %w", dir, why, err)
	}
	s.log.Warn("legacy workspace not imported; the channel starts with empty memory and history",
		"channel", string(channel), "set_aside", aside, "reason", why.Error())
	return nil
}
