package backup

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/wire"
)

// ManifestName is the manifest's file in a backup directory; it is
// written last, so a backup without it is incomplete.
const ManifestName = "manifest.json"

// Format and version of the manifest.
const (
	Format  = "rtsandbox-backup"
	Version = 1
)

// Bounds of a manifest (a backup directory is input from disk that may
// have been tampered with; every bound is checked before anything is
// restored).
const (
	// MaxManifestBytes bounds what ReadManifest reads: MaxFiles entries
	// at their longest path fit.
	MaxManifestBytes = 64 << 20
	// MaxFiles bounds the files of one backup: far more than the state
	// files and the conversations of a host's session channels.
	MaxFiles = 100000
	// MaxDepth bounds the components of a path (the tree of a
	// workspace's sessions/ and its archives is shallow).
	MaxDepth = 16
	// MaxPathBytes bounds one path.
	MaxPathBytes = 1024
	// MaxFileBytes bounds one file's size as stated by the manifest.
	MaxFileBytes = 1 << 40
)

// The two trees of a backup: the state directory's files, and the party
// directory's channel directories.
const (
	stateTree = "state"
	partyTree = "party"
	// keyRecord is a channel directory's key record (package session).
	keyRecord = ".channel-key"
	// sessionsPath is the part of a channel's directory a backup holds:
	// the conversations the worker keeps, with their archives.
	sessionsPath = "workspace/sessions"
)

// StateFiles are the state directory's files a backup holds, in the
// order restore writes them: the channel store last, so a restore cut
// short is refused by serve (channels.seeded without channels.json)
// rather than seeding initial_channels over it.
func StateFiles() []string {
	return []string{memstore.FileName, budget.FileName, channels.SeededFile, channels.StateFile}
}

// sqliteFiles are the state files that are SQLite databases: copied by
// VACUUM INTO, moved aside with their -wal and -shm.
var sqliteFiles = []string{memstore.FileName, budget.FileName}

// ErrManifest marks a manifest that breaks a rule: it names the rule.
var ErrManifest = fmt.Errorf("%w: backup manifest refused", rtsandbox.ErrInvalid)

// Manifest lists a backup's files.
type Manifest struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	Files   []File    `json:"files"`
}

// File is one file of a backup: its slash-separated path in the backup
// directory ("state/<name>" or "party/<segment>/…"), its size and the hex
// SHA-256 of its bytes.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ParseManifest reads a manifest: one JSON object of exactly the
// Manifest's members, nothing after it, within every bound above, each
// path a state file or a file of a channel's key record or sessions/
// tree, no path twice or both a file and a directory, and every channel
// directory with its key record. Errors wrap ErrManifest and name the
// rule (and the path) broken.
func ParseManifest(data []byte) (Manifest, error) {
	if len(data) > MaxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: %d bytes, more than %d", ErrManifest, len(data), MaxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %w", ErrManifest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Manifest{}, fmt.Errorf("%w: data after the object", ErrManifest)
	}
	if err := m.check(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// check applies ParseManifest's rules to m.
func (m Manifest) check() error {
	switch {
	case m.Format != Format:
		return fmt.Errorf("%w: format %q, want %q", ErrManifest, m.Format, Format)
	case m.Version != Version:
		return fmt.Errorf("%w: version %d, want %d", ErrManifest, m.Version, Version)
	case m.Created.IsZero():
		return fmt.Errorf("%w: no creation time", ErrManifest)
	case len(m.Files) > MaxFiles:
		return fmt.Errorf("%w: %d files, more than %d", ErrManifest, len(m.Files), MaxFiles)
	}
	files := make(map[string]bool, len(m.Files))
	channelDirs := map[string]bool{}
	for _, f := range m.Files {
		if err := f.check(); err != nil {
			return err
		}
		if files[f.Path] {
			return fmt.Errorf("%w: %s: listed twice", ErrManifest, f.Path)
		}
		files[f.Path] = true
		if seg, ok := channelOf(f.Path); ok {
			channelDirs[seg] = true
		}
	}
	for p := range files {
		for dir := parentOf(p); dir != ""; dir = parentOf(dir) {
			if files[dir] {
				return fmt.Errorf("%w: %s: both a file and a directory", ErrManifest, dir)
			}
		}
	}
	for seg := range channelDirs {
		if !files[partyTree+"/"+seg+"/"+keyRecord] {
			return fmt.Errorf("%w: %s/%s: channel directory without its %s", ErrManifest, partyTree, seg, keyRecord)
		}
	}
	return nil
}

// check applies the rules of one entry.
func (f File) check() error {
	if err := checkPath(f.Path); err != nil {
		return err
	}
	if f.Size < 0 || f.Size > MaxFileBytes {
		return fmt.Errorf("%w: %s: size %d outside 0–%d", ErrManifest, f.Path, f.Size, int64(MaxFileBytes))
	}
	if len(f.SHA256) != 64 || strings.ToLower(f.SHA256) != f.SHA256 {
		return fmt.Errorf("%w: %s: sha256 is not 64 lower-case hex digits", ErrManifest, f.Path)
	}
	if _, err := hex.DecodeString(f.SHA256); err != nil {
		return fmt.Errorf("%w: %s: sha256 is not 64 lower-case hex digits", ErrManifest, f.Path)
	}
	if keyFileOf(f.Path) != "" && f.Size > rtsandbox.MaxChannelKey {
		return fmt.Errorf("%w: %s: a key record longer than a channel key", ErrManifest, f.Path)
	}
	return nil
}

// keyFileOf is "<segment>/.channel-key" when p is a channel's key
// record, else "".
func keyFileOf(p string) string {
	parts := strings.Split(p, "/")
	if len(parts) == 3 && parts[0] == partyTree && parts[2] == keyRecord {
		return parts[1] + "/" + keyRecord
	}
	return ""
}

// checkPath: a relative, slash-separated path of valid names (no "",
// ".", "..", "\" or control character: wire.ValidSafeName), within
// MaxPathBytes and MaxDepth, that is a state file ("state/<one of
// StateFiles>") or in a channel directory ("party/<segment>/" and either
// its key record or a file under workspace/sessions/).
func checkPath(p string) error {
	if len(p) > MaxPathBytes {
		return fmt.Errorf("%w: a path of %d bytes, more than %d", ErrManifest, len(p), MaxPathBytes)
	}
	parts := strings.Split(p, "/")
	if len(parts) > MaxDepth {
		return fmt.Errorf("%w: %q: deeper than %d", ErrManifest, p, MaxDepth)
	}
	for _, c := range parts {
		if !wire.ValidSafeName(c) {
			return fmt.Errorf("%w: %q: not a relative path of plain names (no absolute path, no . or .., no empty, \\ or control character)", ErrManifest, p)
		}
	}
	switch {
	case len(parts) == 2 && parts[0] == stateTree && slices.Contains(StateFiles(), parts[1]):
		return nil
	case len(parts) == 3 && parts[0] == partyTree && parts[2] == keyRecord:
		return nil
	case len(parts) > 4 && parts[0] == partyTree && parts[2]+"/"+parts[3] == sessionsPath:
		return nil
	}
	return fmt.Errorf("%w: %q: not a state file (%s/%s) nor a channel's %s or %s file", ErrManifest, p,
		stateTree, strings.Join(StateFiles(), "|"), keyRecord, sessionsPath)
}

// channelOf is the segment of a path in the party tree.
func channelOf(p string) (string, bool) {
	parts := strings.SplitN(p, "/", 3)
	if len(parts) < 3 || parts[0] != partyTree {
		return "", false
	}
	return parts[1], true
}

// parentOf is p's directory, "" at the top.
func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// marshal is m's JSON, indented for an operator who reads it.
func (m Manifest) marshal() ([]byte, error) {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
