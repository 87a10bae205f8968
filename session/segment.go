package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"golang.org/x/sys/unix"
)

// A channel's directory name under the party directory (issue 21 item
// 6a). Earlier versions named it by replacing every character outside
// [A-Za-z0-9_-] with "_", which is lossy: "http:a.b" and "http:a_b" shared
// one directory, whose .channel-key record then refused the second
// channel for good. Segment is injective, and a directory of the earlier
// name is moved to the new one once (migrate).

// maxSegment bounds a segment so that <party_dir>/<segment>/run/broker.sock
// stays within maxSocketPath for every party directory config accepts
// (config.MaxPartyDirLen is 100 − 28 − 17); it is also far below the
// filesystem's 255-byte name limit.
const maxSegment = 28

// hashedPrefix bounds the readable part of a hashed segment:
// maxSegment less "+" and 16 hex digits.
const hashedPrefix = maxSegment - 1 - 16

// Segment is the directory name of channel, injective over valid keys:
//
//   - ASCII letters, digits and "-" stay, ":" becomes "_", and every other
//     byte becomes "." and its two lowercase hex digits ("http:a.b" is
//     http_a.2eb, "http:a_b" is http_a.5fb, "discord:123" keeps the
//     name earlier versions gave it, discord_123). Each code starts with
//     a character of its own class, so the escaped form decodes uniquely.
//   - An escaped form longer than maxSegment (28) bytes is cut, at a whole
//     code, to at most 11 bytes, followed by "+" and 16 hex digits of
//     sha256(channel). "+" never appears in an escaped form (it would be
//     .2b), so a hashed name never equals an escaped one; two hashed names
//     are equal only if the two keys' hashes agree in 64 bits.
//
// A key starts with a lowercase letter (its kind), so a segment never
// starts with "." or "-".
func Segment(channel rtsandbox.ChannelKey) string {
	var b strings.Builder
	cut := 0 // the last code boundary within hashedPrefix
	for i := range len(channel) {
		if b.Len() <= hashedPrefix {
			cut = b.Len()
		}
		switch c := channel[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		case c == ':':
			b.WriteByte('_')
		default:
			b.WriteByte('.')
			b.WriteString(hex.EncodeToString([]byte{c}))
		}
	}
	seg := b.String()
	if len(seg) <= maxSegment {
		return seg
	}
	sum := sha256.Sum256([]byte(channel))
	return seg[:cut] + "+" + hex.EncodeToString(sum[:8])
}

var legacyRE = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// legacySegment is the lossy name earlier versions gave channel's
// directory.
func legacySegment(channel rtsandbox.ChannelKey) string {
	return legacyRE.ReplaceAllString(string(channel), "_")
}

// ErrMigration refuses a channel whose directory under its earlier name
// cannot be moved to its segment safely (a link there).
var ErrMigration = fmt.Errorf("%w: channel directory migration refused", rtsandbox.ErrRefused)

// migrate moves, once, a directory that earlier versions made for
// channel under its lossy name (legacySegment) to its segment:
//
//   - only when the segment differs, nothing is at the segment yet, and
//     the earlier directory is a real directory (lstat, no link followed)
//     whose .channel-key record names channel exactly; one of another
//     channel stays where it is;
//   - a link at the earlier name is refused (ErrMigration, with an
//     operator log line): the channel's turns fail until the operator
//     removes it;
//   - when both exist, nothing moves: the channel keeps its new directory
//     and the operator log says, once per process, which earlier
//     directory was left;
//   - before the move, the channel's container is removed (it binds the
//     earlier paths) and, in hard mode, the workspace image unmounted; the
//     image file moves with the directory and is mounted at the new place
//     by the next start;
//   - the move is one renameat2(RENAME_NOREPLACE) within the party
//     directory: atomic, and refused should anything appear at the
//     segment meanwhile.
func (s *settings) migrate(channel rtsandbox.ChannelKey) error {
	from, to := legacySegment(channel), Segment(channel)
	if from == to {
		return nil
	}
	s.migration.Lock()
	defer s.migration.Unlock()
	if s.migration.done[channel] {
		return nil
	}
	err := s.migrateOnce(channel, from, to)
	if err == nil {
		s.migration.done[channel] = true
	}
	return err
}

func (s *settings) migrateOnce(channel rtsandbox.ChannelKey, from, to string) error {
	party, err := openDir(s.PartyDir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("party directory: %w", err)
	}
	defer unix.Close(party)
	owned, err := legacyDir(party, from, channel)
	if err != nil {
		s.Logger.Error("session channel directory not migrated: its earlier name is a link", "channel", string(channel),
			"from", filepath.Join(s.PartyDir, from), "to", filepath.Join(s.PartyDir, to))
		return err
	}
	if !owned {
		return nil
	}
	var st unix.Stat_t
	switch err := unix.Fstatat(party, to, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		s.logConflict(channel, from, to)
		return nil
	case !errors.Is(err, unix.ENOENT):
		return fmt.Errorf("channel directory: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), freshTimeout)
	defer cancel()
	if err := s.Driver.Remove(ctx, s.name(channel)); err != nil {
		return fmt.Errorf("migrate the channel directory: %w", err)
	}
	s.disk.mu.Lock()
	_, err = detachImage(filepath.Join(s.PartyDir, from))
	s.disk.mu.Unlock()
	if err != nil {
		return fmt.Errorf("migrate the channel directory: %w", err)
	}
	if err := renameNoReplace(party, from, party, to); err != nil {
		if errors.Is(err, unix.EEXIST) {
			s.logConflict(channel, from, to)
			return nil
		}
		return fmt.Errorf("migrate the channel directory: %w", err)
	}
	s.Logger.Info("session channel directory migrated", "channel", string(channel),
		"from", filepath.Join(s.PartyDir, from), "to", filepath.Join(s.PartyDir, to))
	return nil
}

// logConflict says that channel's earlier directory was left because its
// new one exists.
func (s *settings) logConflict(channel rtsandbox.ChannelKey, from, to string) {
	s.Logger.Error("session channel directory not migrated: its new name exists; the earlier directory is left for the operator",
		"channel", string(channel), "from", filepath.Join(s.PartyDir, from), "to", filepath.Join(s.PartyDir, to))
}

// legacyDir reports whether party/name is a real directory whose
// .channel-key names channel; a link there is ErrMigration.
func legacyDir(party int, name string, channel rtsandbox.ChannelKey) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(party, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return false, fmt.Errorf("%w: %s is a link", ErrMigration, name)
	case unix.S_IFDIR:
	default:
		return false, nil
	}
	fd, err := openSub(party, name)
	if err != nil {
		return false, nil // replaced meanwhile
	}
	defer unix.Close(fd)
	got, err := readFileAt(fd, keyFile, rtsandbox.MaxChannelKey+1)
	return err == nil && string(got) == string(channel), nil
}
