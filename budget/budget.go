// Package budget keeps the daily budgets of calls, upstream tokens and turn
// seconds per speaker, per channel and for the whole installation, in an
// embedded SQLite database (modernc.org/sqlite) so that a restart does not
// reset them.
//
// The contract:
//
//   - A day is a UTC calendar date ("2006-01-02"): every budget starts
//     afresh at 00:00 UTC, whatever the host's or the guests' time zone.
//   - Work reserves before it is dispatched and settles after: Reserve
//     checks used+reserved+amount <= limit for every scope it names and
//     adds the amount to each scope's reserved count in one transaction,
//     or changes nothing and returns an error wrapping ErrExhausted (and
//     so rtsandbox.ErrOverBudget) that names the first scope and kind at
//     fault (for the operator log only). Concurrent reservations never
//     overspend a limit.
//   - Settle moves a reservation to used with the actual amount, which may
//     exceed the reservation (an upstream that spent more tokens than
//     estimated): it is recorded as spent, and later reservations fail
//     sooner. Settle never fails for being over a limit.
//   - A limit of 0 is unlimited; usage is recorded all the same so that
//     owners can see it.
//   - One process at a time owns the database (Open takes an exclusive lock
//     on "<path>.lock", privdir.Lock), so reservations do not outlive their
//     process: Open clears reserved counts a crash left behind, and keeps
//     the used ones.
package budget

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// Kind is what a budget counts.
type Kind string

// The kinds of budget.
const (
	Calls   Kind = "calls"   // broker calls
	Tokens  Kind = "tokens"  // upstream model tokens (usage.total_tokens)
	Seconds Kind = "seconds" // turn seconds, rounded up per turn
)

// Kinds lists every kind, in display order; a new slice on every call.
func Kinds() []Kind { return []Kind{Calls, Tokens, Seconds} }

// Installation is the scope of the whole installation.
const Installation = "installation"

// FileName is the database's name in the state dir.
const FileName = "usage.db"

// SpeakerScope and ChannelScope name the per-speaker (by principal id) and
// per-channel scopes.
func SpeakerScope(principal string) string { return "speaker:" + principal }

// ChannelScope names the per-channel scope.
func ChannelScope(ch rtsandbox.ChannelKey) string { return "channel:" + string(ch) }

// Scopes returns the three scopes a guest's work is counted against:
// speaker, channel, installation.
func Scopes(ch rtsandbox.ChannelKey, principal string) []string {
	return []string{SpeakerScope(principal), ChannelScope(ch), Installation}
}

// ChannelScopes returns the scopes of work a channel's worker does on its
// own, which no speaker asked for (a session worker's startup window):
// channel, installation.
func ChannelScopes(ch rtsandbox.ChannelKey) []string {
	return []string{ChannelScope(ch), Installation}
}

// Limits are one scope class's daily limits; 0 is unlimited.
type Limits struct {
	Calls, Tokens, Seconds int64
}

// Of returns the limit of kind.
func (l Limits) Of(k Kind) int64 {
	switch k {
	case Calls:
		return l.Calls
	case Tokens:
		return l.Tokens
	case Seconds:
		return l.Seconds
	}
	return 0
}

// Config holds the daily limits of each scope class.
type Config struct {
	PerSpeaker, PerChannel, PerInstallation Limits
}

// limit returns the limit of kind in scope.
func (c Config) limit(scope string, k Kind) int64 {
	switch {
	case scope == Installation:
		return c.PerInstallation.Of(k)
	case strings.HasPrefix(scope, "speaker:"):
		return c.PerSpeaker.Of(k)
	case strings.HasPrefix(scope, "channel:"):
		return c.PerChannel.Of(k)
	}
	return 0
}

// ErrExhausted refuses a reservation over a daily limit.
var ErrExhausted = fmt.Errorf("budget: %w", rtsandbox.ErrOverBudget)

// Day returns the UTC date of t, the key of a day's budgets.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Reservation is an amount reserved in some scopes; Settle completes it.
type Reservation struct {
	Day    string
	Scopes []string
	Kind   Kind
	Amount int64
}

// Entry is one scope's count of one kind on one day.
type Entry struct {
	Kind     Kind  `json:"kind"`
	Used     int64 `json:"used"`
	Reserved int64 `json:"reserved"`
	Limit    int64 `json:"limit"` // 0 is unlimited
}

// Ledger is the budget database. It is safe for concurrent use.
type Ledger struct {
	cfg Config
	db  *sql.DB
	// lock is the exclusive lock on the database, held until Close.
	lock *os.File
	// Now is the clock of Today; tests may set it before use.
	Now func() time.Time
	// OnSettle, when set before use, is told every settled amount (the
	// spend metric). It must not block.
	OnSettle func(k Kind, amount int64)

	// mu serialises the read-check-write of Reserve: one host process
	// owns the state dir, so a mutex in front of SQLite is enough.
	mu sync.Mutex
}

const schema = `CREATE TABLE IF NOT EXISTS usage (
	day TEXT NOT NULL, scope TEXT NOT NULL, kind TEXT NOT NULL,
	used INTEGER NOT NULL DEFAULT 0, reserved INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (day, scope, kind))`

// Open opens (creating 0600 when missing) the database at path, whose
// directory must be private to this service (internal/privdir), and
// clears reservations a previous process left behind.
func Open(path string, cfg Config) (*Ledger, error) {
	if err := privdir.Check(filepath.Dir(path), os.Geteuid()); err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	lock, err := privdir.Lock(path + ".lock")
	if err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	l, err := open(path, cfg)
	if err != nil {
		lock.Close()
		return nil, err
	}
	l.lock = lock
	return l, nil
}

func open(path string, cfg Config) (*Ledger, error) {
	if err := create(path); err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, fmt.Errorf("budget: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := initDB(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("budget: %s: %w", path, err)
	}
	return &Ledger{cfg: cfg, db: db, Now: time.Now}, nil
}

// create makes the file 0600 before SQLite opens it (SQLite would use the
// umask), never through a link.
func create(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s: %w", path, privdir.ErrNotPrivate)
	}
	return nil
}

func initDB(db *sql.DB) error {
	if _, err := db.Exec(schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if _, err := db.Exec(`UPDATE usage SET reserved = 0 WHERE reserved <> 0`); err != nil {
		return fmt.Errorf("clear reservations: %w", err)
	}
	return nil
}

// Close closes the database and releases its lock.
func (l *Ledger) Close() error {
	err := l.db.Close()
	l.lock.Close()
	return err
}

// Today returns the current day key (UTC).
func (l *Ledger) Today() string { return Day(l.Now()) }

// Limit returns the limit of kind in scope; 0 is unlimited.
func (l *Ledger) Limit(scope string, k Kind) int64 { return l.cfg.limit(scope, k) }

// Reserve reserves amount of kind in every scope on day, or none: it
// returns an error wrapping ErrExhausted naming the first scope over its
// limit, or a database error.
func (l *Ledger) Reserve(ctx context.Context, day string, scopes []string, k Kind, amount int64) (Reservation, error) {
	if amount < 0 {
		return Reservation{}, fmt.Errorf("budget: negative reservation: %w", rtsandbox.ErrInvalid)
	}
	r := Reservation{Day: day, Scopes: scopes, Kind: k, Amount: amount}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.tx(ctx, func(tx *sql.Tx) error {
		for _, s := range scopes {
			if err := l.check(ctx, tx, day, s, k, amount); err != nil {
				return err
			}
		}
		for _, s := range scopes {
			if err := add(ctx, tx, day, s, k, 0, amount); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Reservation{}, err
	}
	return r, nil
}

// check refuses amount when it would take scope over its limit.
func (l *Ledger) check(ctx context.Context, tx *sql.Tx, day, scope string, k Kind, amount int64) error {
	limit := l.cfg.limit(scope, k)
	if limit == 0 {
		return nil
	}
	used, reserved, err := get(ctx, tx, day, scope, k)
	if err != nil {
		return err
	}
	if used+reserved+amount > limit {
		return fmt.Errorf("%w: %s %s (%d used, %d reserved, limit %d)", ErrExhausted, scope, k, used, reserved, limit)
	}
	return nil
}

// Check returns an error wrapping ErrExhausted when any limited kind of
// any scope has nothing left on day (used+reserved >= limit), so that work
// that would be refused at its first call is refused before it starts. It
// reserves nothing.
func (l *Ledger) Check(ctx context.Context, day string, scopes []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tx(ctx, func(tx *sql.Tx) error {
		for _, s := range scopes {
			for _, k := range Kinds() {
				if err := l.check(ctx, tx, day, s, k, 1); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Settle moves r from reserved to used with the actual amount spent.
func (l *Ledger) Settle(ctx context.Context, r Reservation, actual int64) error {
	actual = max(actual, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.tx(ctx, func(tx *sql.Tx) error {
		for _, s := range r.Scopes {
			if err := add(ctx, tx, r.Day, s, r.Kind, actual, -r.Amount); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && l.OnSettle != nil {
		l.OnSettle(r.Kind, actual)
	}
	return err
}

// Usage returns scope's counts of every kind on day, with their limits.
func (l *Ledger) Usage(ctx context.Context, day, scope string) ([]Entry, error) {
	out := make([]Entry, 0, len(Kinds()))
	for _, k := range Kinds() {
		e := Entry{Kind: k, Limit: l.cfg.limit(scope, k)}
		err := l.db.QueryRowContext(ctx, `SELECT used, reserved FROM usage WHERE day=? AND scope=? AND kind=?`,
			day, scope, string(k)).Scan(&e.Used, &e.Reserved)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("budget: usage: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

func (l *Ledger) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("budget: begin: %w", err)
	}
	defer tx.Rollback()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("budget: commit: %w", err)
	}
	return nil
}

func get(ctx context.Context, tx *sql.Tx, day, scope string, k Kind) (used, reserved int64, err error) {
	err = tx.QueryRowContext(ctx, `SELECT used, reserved FROM usage WHERE day=? AND scope=? AND kind=?`,
		day, scope, string(k)).Scan(&used, &reserved)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("budget: read: %w", err)
	}
	return used, reserved, nil
}

// add adds to a row's used and reserved counts (reserved never below 0).
func add(ctx context.Context, tx *sql.Tx, day, scope string, k Kind, used, reserved int64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO usage (day, scope, kind, used, reserved) VALUES (?, ?, ?, ?, max(?, 0))
		ON CONFLICT (day, scope, kind) DO UPDATE SET used = used + excluded.used,
		reserved = max(reserved + ?, 0)`, day, scope, string(k), used, reserved, reserved)
	if err != nil {
		return fmt.Errorf("budget: write: %w", err)
	}
	return nil
}
