package memstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// The one migration path. Open imports, once, every channel the older
// layouts hold:
//
//   - the previous version's state files, <ChannelStateDir>/<id>.json
//     ({"memory":[…],"history":[…]}, written by the host), then
//   - the per-channel workspaces of the versions before,
//     <LegacyRoot>/<id>/memory.json and history.json (written by guests).
//
// Each is read as untrusted input: bounded, without following a link,
// without blocking on a FIFO, parsed strictly and checked against the
// limits. A channel is imported in one transaction that records where it
// came from, and the file or directory is removed once it committed. One
// that cannot be imported (a link, a FIFO, a device, too large, does not
// parse, breaks the limits), or whose channel the database already holds
// (a leftover of an import cut short, a workspace the state file already
// replaced, a file restored later), is renamed aside to
// <name>.unmigrated-<unix nanoseconds> for the operator, with a warning
// naming it and the reason: guest-planted data never wedges the host, and
// nothing that was not imported is deleted. Names that are not a channel
// id are left alone. Emptied directories are removed, so that afterwards
// no per-channel memory file is left on the host.

// Bounds of what an import reads.
const (
	// maxStateFile bounds a previous version's state file: memory (512 KiB)
	// and history (20 × 8 KiB) as JSON with room for the wrapper.
	maxStateFile = 1 << 20
	// maxLegacyFile bounds each legacy workspace file: old workers wrote at
	// most 512 KiB of memory and 20 × 8 KiB of history.
	maxLegacyFile = 2 << 20
)

// Sources of an import, as the channels table records them.
const (
	sourceStateFile = "state-file"
	sourceWorkspace = "workspace"
)

// migrate imports both older layouts (see above).
func (s *Store) migrate(ctx context.Context, stateDir, legacyRoot string) error {
	if stateDir != "" {
		if err := s.importDir(ctx, stateDir, sourceStateFile, ".json", readStateFile); err != nil {
			return err
		}
	}
	if legacyRoot != "" {
		if err := s.importDir(ctx, legacyRoot, sourceWorkspace, "", readWorkspace); err != nil {
			return err
		}
	}
	return nil
}

// importDir imports every <id><suffix> in dir with read. A missing dir is
// fine; an emptied one is removed. A dir that is a link (or no directory)
// is never entered: its entries would be read and removed wherever it
// points.
func (s *Store) importDir(ctx context.Context, dir, source, suffix string, read func(string) (rtsandbox.ChannelState, error)) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil && !fi.IsDir() {
		s.log.Warn("migration: not a directory; left alone", "path", dir, "mode", fi.Mode().String())
		return nil
	}
	var names []os.DirEntry
	if err == nil {
		names, err = os.ReadDir(dir)
	}
	if err != nil {
		return fmt.Errorf("memory database %s: migration from %s: %w", s.path, dir, err)
	}
	for _, de := range names {
		id, ok := strings.CutSuffix(de.Name(), suffix)
		if !ok || !validID(id) {
			continue
		}
		if err := s.importOne(ctx, id, filepath.Join(dir, de.Name()), source, read); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err == nil {
		s.log.Info("migration: emptied directory removed", "dir", dir)
	}
	return nil
}

// validID reports whether name is a ChannelID: 64 lowercase hex digits.
func validID(name string) bool {
	_, err := hex.DecodeString(name)
	return len(name) == 64 && err == nil && strings.ToLower(name) == name
}

// importOne imports the channel id from path, or sets path aside.
func (s *Store) importOne(ctx context.Context, id, path, source string, read func(string) (rtsandbox.ChannelState, error)) error {
	st, why := read(path)
	imported := false
	if why == nil {
		err := s.tx(ctx, "import "+path, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM channels WHERE id = ?`, id).Scan(&n); err != nil || n > 0 {
				return err
			}
			imported = true
			return importState(ctx, tx, id, source, st)
		})
		if err != nil {
			return err
		}
		if !imported {
			why = errors.New("the database already holds this channel")
		}
	}
	if why != nil {
		return s.setAside(path, why)
	}
	if err := os.RemoveAll(path); err != nil {
		// Imported: the database holds the channel, so a later Open sets
		// what is left aside instead of importing it again.
		s.log.Warn("migration: imported but not removed", "path", path, "err", err)
		return nil
	}
	s.log.Info("migration: channel state imported into the memory database and removed", "channel_id", id,
		"source", source, "path", path, "memory", len(st.Memory), "history", len(st.History))
	return nil
}

// importState writes an imported channel: speaker entries have no owner
// yet (the old files name no principal; the speaker's first write claims
// them).
func importState(ctx context.Context, tx *sql.Tx, id, source string, st rtsandbox.ChannelState) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO channels (id, source) VALUES (?, ?)`, id, source); err != nil {
		return err
	}
	rows := make([]row, len(st.Memory))
	for i, e := range st.Memory {
		rows[i] = row{MemoryEntry: e}
	}
	if err := replaceMemory(ctx, tx, id, rows); err != nil {
		return err
	}
	return replaceHistory(ctx, tx, id, st.History)
}

// setAside renames path so that nothing reads it again, and warns the
// operator. Failing to rename it fails Open: the host must not run beside
// a state it could neither import nor put away. Another process that set
// it aside first is fine.
func (s *Store) setAside(path string, why error) error {
	aside := fmt.Sprintf("%s.unmigrated-%d", path, time.Now().UnixNano())
	err := os.Rename(path, aside)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("memory database %s: %s cannot be imported (%v) nor set aside: %w", s.path, path, why, err)
	}
	s.log.Warn("migration: channel state not imported; set aside for the operator", "path", path,
		"set_aside", aside, "reason", why.Error())
	return nil
}

// readStateFile reads a previous version's state file: a private regular
// file of the service, one object with the two lists and nothing else,
// within the limits.
func readStateFile(path string) (rtsandbox.ChannelState, error) {
	data, err := privdir.ReadFile(path, maxStateFile, os.Geteuid())
	if err != nil {
		return rtsandbox.ChannelState{}, err
	}
	return decodeStateFile(data)
}

// decodeStateFile parses a state file strictly and checks it.
func decodeStateFile(data []byte) (rtsandbox.ChannelState, error) {
	var st rtsandbox.ChannelState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return rtsandbox.ChannelState{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return rtsandbox.ChannelState{}, errors.New("trailing data")
	}
	return st, Check(st)
}

// readWorkspace reads memory.json and history.json of one old workspace
// (guest-written: any owner). Missing files are empty lists.
func readWorkspace(dir string) (rtsandbox.ChannelState, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return rtsandbox.ChannelState{}, err
	}
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
	return st, Check(st)
}
