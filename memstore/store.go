// Package memstore keeps what the host remembers of each channel in one
// embedded SQLite database (modernc.org/sqlite, pure Go, so the binary
// stays static): the memory entries of both modes, and the recent history
// of sealed channels. No guest can write it, and no per-channel file
// exists beside it.
//
// The contract:
//
//   - One database file (FileName in the state directory), created 0600
//     before SQLite opens it, never through a link, in a directory private
//     to the service (0700, owned by it; package privdir). SQLite makes
//     its -wal and -shm files with the database file's mode, so they are
//     0600 too; Open refuses to start when one of them exists and is not a
//     private regular file of the service. Every commit is durable
//     (synchronous FULL: the JSON files it replaces were fsynced too), and
//     forgotten entries are overwritten in the file (secure_delete).
//   - Channels are keyed by ChannelID, the hex sha256 of the channel key,
//     the name the older layouts used, so that they import without knowing
//     the key. An entry has a scope, "channel" or "speaker:<speaker id>"
//     (the sealed wire's namespace), and an owner: the principal of the
//     speaker who wrote it (Binding.Speaker.PrincipalID), "" for channel
//     notes and for speaker entries imported from the old files, which
//     name no principal. The first write by a speaker claims that
//     speaker's unclaimed entries; a speaker whose namespace belongs to
//     another principal is refused (ErrOwner), which the router's rule
//     (principal = <channel kind>:<speaker id>) never produces.
//   - The limits of the shared contract bound each channel, all speakers
//     and notes together: at most 256 entries and 512 KiB of JS-style
//     JSON (rtsandbox.MaxMemoryEntries, MaxMemoryBytes). Per channel, not
//     per owner, because the sealed turn carries the channel's whole
//     memory and its worker checks these limits over all of it (the host
//     must agree, or a "Saved." would fail at commit), because a channel
//     may change mode between turns, and because with open access a
//     per-owner bound would not bound the database. As in sealed mode, one
//     speaker can fill a channel's memory.
//   - Every change is one transaction (immediate: it holds the write lock
//     from its start); a change that breaks the limits is refused and
//     leaves the store as it was. Queries are bounded by the limits (a
//     channel never has more rows than they allow; more is ErrCorrupt).
//   - Data that breaks the limits is ErrCorrupt, naming the channel: the
//     host wrote it, so it is never silently replaced or dropped.
//   - Open imports the older layouts once (migrate.go); afterwards the
//     database is the only copy.
//
// Several processes may open the same database (SQLite locks it). A lock
// another process holds never stops every channel: reads run on
// connections of their own and, the file being in WAL mode, never wait
// for a writer; each change waits at most WriteWait from its call, for
// the write connection and the lock together, then fails as ErrLocked
// (a rtsandbox.ErrStore), so changes queued behind a waiting one never
// wait its wait and theirs.
package memstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// FileName is the database's name in the host's state directory.
const FileName = "memory.db"

// schemaVersion is the database's PRAGMA user_version.
const schemaVersion = 1

// busyTimeout is how long a writer waits for another process's write.
const busyTimeout = 5000 // ms

// WriteWait bounds one change from its call: the wait for the store's
// one write connection (held by changes before it) and for another
// process's write lock together, so that a lock an operator's sqlite3
// shell holds costs each change this long, never the sum of the changes
// queued before it.
const WriteWait = busyTimeout * time.Millisecond

// readConns is how many reads run at once, each on a connection of its
// own: a read never queues behind a change that waits for a lock.
const readConns = 4

// errWriteWait is the cause of a change's context that ran out its
// WriteWait.
var errWriteWait = errors.New("write wait over")

// Error classes. Test with errors.Is.
var (
	// ErrInvalid: a change breaks the limits; nothing was written.
	ErrInvalid = fmt.Errorf("%w: channel state breaks its limits", rtsandbox.ErrInvalid)
	// ErrCorrupt: stored data breaks the limits or the file is damaged.
	ErrCorrupt = errors.New("corrupt memory database")
	// ErrOwner: the speaker's namespace in this channel belongs to
	// another principal.
	ErrOwner = fmt.Errorf("%w: the speaker's memory in this channel belongs to another principal", rtsandbox.ErrRefused)
	// ErrLocked: a change waited WriteWait for another connection's
	// write lock (an operator's sqlite3 shell in a transaction) and did
	// not get it; nothing was written. A rtsandbox.ErrStore.
	ErrLocked = fmt.Errorf("%w: memory database locked by another connection", rtsandbox.ErrStore)
	// ErrSpeaker: a speaker-scope call without a speaker id and principal.
	ErrSpeaker = fmt.Errorf("%w: speaker memory needs the speaker's id and principal", rtsandbox.ErrInvalid)
)

// Options configure Open.
type Options struct {
	// Path is the database file. Its directory is created 0700 when
	// missing and must be private to the service.
	Path string
	// ChannelStateDir holds the JSON state files of the previous version
	// (<ChannelID>.json); "" imports none.
	ChannelStateDir string
	// LegacyRoot holds the per-channel workspaces of the versions before
	// (<ChannelID>/memory.json, history.json); "" imports none.
	LegacyRoot string
	// Logger receives migration records; nil discards them.
	Logger *slog.Logger
}

// Store is the memory database. It is safe for concurrent use.
type Store struct {
	path string
	db   *sql.DB // the one write connection (tx)
	rdb  *sql.DB // readConns read-only connections (view)
	log  *slog.Logger
}

// ChannelID is a channel's id in the database (and its name in the older
// layouts): the full hex sha256 of the key's UTF-8 bytes.
func ChannelID(channel rtsandbox.ChannelKey) string {
	sum := sha256.Sum256([]byte(channel))
	return hex.EncodeToString(sum[:])
}

// Open opens the database (creating it when missing), then imports the
// older layouts. Errors name the file and the reason.
func Open(ctx context.Context, o Options) (*Store, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Path == "" {
		return nil, fmt.Errorf("memory database: no path: %w", rtsandbox.ErrInvalid)
	}
	dir, err := privdir.Make(filepath.Dir(o.Path))
	if err != nil {
		return nil, fmt.Errorf("memory database %s: %w", o.Path, err)
	}
	path := filepath.Join(dir, filepath.Base(o.Path))
	if err := prepareFiles(path); err != nil {
		return nil, fmt.Errorf("memory database %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("memory database %s: %w", path, err)
	}
	// One connection: in this process the store's operations queue in
	// database/sql, never against SQLite's busy timeout.
	db.SetMaxOpenConns(1)
	s := &Store{path: path, db: db, log: log}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, err
	}
	// After init, so the file is in WAL mode: readers then never wait
	// for a writer, of this process or another.
	if s.rdb, err = sql.Open("sqlite", readDSN(path)); err != nil {
		db.Close()
		return nil, fmt.Errorf("memory database %s: %w", path, err)
	}
	s.rdb.SetMaxOpenConns(readConns)
	if err := s.migrate(ctx, o.ChannelStateDir, o.LegacyRoot); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// dsn is the driver's name for path's write connection: a file URI (so
// no character of the path is read as a parameter) with the connection's
// pragmas; its transactions take the write lock at their start.
func dsn(path string) string {
	return fileDSN(path, "immediate", "journal_mode(WAL)", "synchronous(FULL)", "secure_delete(ON)")
}

// readDSN is dsn for the read connections: query_only, and deferred
// transactions, which take no lock a writer waits for.
func readDSN(path string) string {
	return fileDSN(path, "deferred", "query_only(1)")
}

// fileDSN is path's file URI with the busy timeout, trusted_schema off,
// pragmas and the transactions' lock mode.
func fileDSN(path, txlock string, pragmas ...string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout))
	q.Add("_pragma", "trusted_schema(OFF)")
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", txlock)
	return (&url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}).String()
}

// prepareFiles creates the database file 0600 before SQLite opens it
// (SQLite would use the umask), never through a link, and checks the
// file and any -wal, -shm or -journal file beside it: each must be a
// regular file of the service with no group or other bits.
func prepareFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return err
	}
	if err := private(fi); err != nil {
		return err
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		fi, err := os.Lstat(path + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			err = private(fi)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(path+suffix), err)
		}
	}
	return nil
}

// private requires a regular file owned by the effective uid with mode
// bits for its owner only.
func private(fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return privdir.ErrNotRegular
	case !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("mode %v: %w", fi.Mode().Perm(), privdir.ErrNotPrivate)
	}
	return nil
}

const schema = `
CREATE TABLE IF NOT EXISTS channels (
	id     TEXT PRIMARY KEY,          -- ChannelID
	key    TEXT NOT NULL DEFAULT '',  -- the channel key, once the store has seen it
	source TEXT NOT NULL DEFAULT ''   -- the older layout it was imported from
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory (
	channel   TEXT NOT NULL,     -- ChannelID
	scope     TEXT NOT NULL,     -- "channel" or "speaker:<speaker id>"
	key       TEXT NOT NULL,
	text      TEXT NOT NULL,
	principal TEXT NOT NULL,     -- owner; "" for notes and unclaimed imports
	seq       INTEGER NOT NULL,  -- order within the channel
	PRIMARY KEY (channel, scope, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_order ON memory (channel, seq);
CREATE TABLE IF NOT EXISTS history (
	channel TEXT NOT NULL,
	pos     INTEGER NOT NULL,
	role    TEXT NOT NULL,
	content TEXT NOT NULL,
	PRIMARY KEY (channel, pos)
) WITHOUT ROWID;`

// init creates the schema of a new database and refuses one of another
// version.
func (s *Store) init(ctx context.Context) error {
	return s.tx(ctx, "schema", func(tx *sql.Tx) error {
		var v int
		if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
			return err
		}
		if v != 0 && v != schemaVersion {
			return fmt.Errorf("%w: schema version %d, this version reads %d", ErrCorrupt, v, schemaVersion)
		}
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion))
		return err
	})
}

// Close closes the database.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.rdb != nil {
		err = errors.Join(err, s.rdb.Close())
	}
	if err != nil {
		return fmt.Errorf("memory database %s: %w", s.path, err)
	}
	return nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Channels counts the channels the store holds: written or imported.
func (s *Store) Channels(ctx context.Context) (int, error) {
	var n int
	if err := s.rdb.QueryRowContext(ctx, `SELECT count(*) FROM channels`).Scan(&n); err != nil {
		return 0, s.wrap("count", err)
	}
	return n, nil
}

// tx runs f in one write transaction (immediate: it takes the write lock
// at its start) and commits when f succeeds, all within WriteWait of the
// call: a change that could not get the lock in time is ErrLocked.
// Errors are wrapped with the file and op (wrap).
func (s *Store) tx(ctx context.Context, op string, f func(*sql.Tx) error) error {
	wctx, cancel := context.WithTimeoutCause(ctx, WriteWait, errWriteWait)
	defer cancel()
	err := s.run(wctx, s.db, op, nil, f)
	if err != nil && ctx.Err() == nil && (busy(err) || errors.Is(context.Cause(wctx), errWriteWait)) {
		err = fmt.Errorf("%w: %w", ErrLocked, err)
	}
	return err
}

// view runs f in one read transaction on a read connection: a consistent
// snapshot that takes no write lock and never waits for one.
func (s *Store) view(ctx context.Context, op string, f func(*sql.Tx) error) error {
	return s.run(ctx, s.rdb, op, &sql.TxOptions{ReadOnly: true}, f)
}

func (s *Store) run(ctx context.Context, db *sql.DB, op string, opts *sql.TxOptions, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return s.wrap(op, err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return s.wrap(op, err)
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(op, err)
	}
	return nil
}

// busy reports whether err is SQLite's "database is locked" (SQLITE_BUSY,
// after the busy timeout).
func busy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// wrap names the file and op and classifies SQLite's codes: a full disk
// is syscall.ENOSPC (rtsandbox.KindDiskFull), a damaged file ErrCorrupt.
// Errors of this package's own classes pass through with the file named.
func (s *Store) wrap(op string, err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL:
			err = fmt.Errorf("%w: %w", syscall.ENOSPC, err)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	return fmt.Errorf("memory database %s: %s: %w", s.path, op, err)
}

// touch records that the store holds channel.
func touch(ctx context.Context, tx *sql.Tx, channel rtsandbox.ChannelKey) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO channels (id, key) VALUES (?, ?)
		ON CONFLICT (id) DO UPDATE SET key = excluded.key`, ChannelID(channel), string(channel))
	return err
}
