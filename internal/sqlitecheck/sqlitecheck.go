// Package sqlitecheck checks the host's SQLite databases (memory.db,
// usage.db) for damage and moves a damaged one aside, for
// `rtsandbox doctor` and `rtsandbox repair` (docs/operations.md).
//
// The contract: QuickCheck reads only (the file is opened read-only; it
// runs PRAGMA quick_check) and says whether the file is damaged
// (ErrDamaged, with SQLite's first findings), missing (fs.ErrNotExist) or
// could not be read for another reason. MoveAside renames a database and
// its -wal, -shm and -journal files to a name of their own in the same
// directory, never over an existing file, so that the next start creates a
// fresh database and the damaged one is kept for recovery.
package sqlitecheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrDamaged marks a database that failed its check.
var ErrDamaged = errors.New("database damaged")

// maxFindings bounds what quick_check reports and what an error carries.
const maxFindings = 5

// busyTimeout is how long the check waits for a lock another process
// holds (a read in WAL mode waits only for a checkpoint).
const busyTimeout = 2 * time.Second

// QuickCheck runs PRAGMA quick_check on the database at path, read-only.
func QuickCheck(ctx context.Context, path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}).String())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	findings, err := quickCheck(ctx, db)
	if err != nil {
		if damaged(err) {
			return fmt.Errorf("%s: %w: %w", path, ErrDamaged, err)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(findings) == 1 && findings[0] == "ok" {
		return nil
	}
	return fmt.Errorf("%s: %w: %s", path, ErrDamaged, strings.Join(findings, "; "))
}

func quickCheck(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, fmt.Sprintf("PRAGMA quick_check(%d)", maxFindings))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// damaged reports whether err is SQLite's "damaged" or "not a database".
func damaged(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB
}

// MoveAside renames the database at path, and each of its -wal, -shm and
// -journal files that exists, to "<name>.damaged-<UTC time>" (with the
// same suffixes) in the same directory, never replacing a file (renameat2
// RENAME_NOREPLACE). The -wal goes with the database: it may hold
// committed pages. It returns the database's new path.
func MoveAside(path string, now time.Time) (string, error) {
	kept := path + ".damaged-" + now.UTC().Format("20060102T150405Z")
	if err := rename(path, kept); err != nil {
		return "", err
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if err := rename(path+suffix, kept+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return kept, err
		}
	}
	return kept, nil
}

func rename(from, to string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
