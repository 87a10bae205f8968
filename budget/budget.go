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
//   - Because one process owns it, the counts of the days in use live in
//     memory, and the database is their copy (store.go): Reserve, Check
//     and Settle take a mutex for microseconds and never wait on SQLite,
//     so one slow or locked write never holds up a turn. One writer
//     goroutine writes the changed counts (absolute values) in one
//     transaction every FlushInterval, with a busy timeout of BusyTimeout,
//     and retries at the next tick until a write succeeds. A crash loses
//     at most the settlements of the last FlushInterval (and, as before,
//     the reservations of the work in flight); Close writes everything.
//   - While a change waits unwritten for longer than StoreGrace, the store
//     is unavailable: Check, which every turn calls before it starts,
//     follows the policy (Config.OnStoreError): Deny refuses with an error
//     wrapping rtsandbox.ErrStore that names the file; Allow passes, and
//     the counts stay in memory until the database takes them. Work already
//     running is counted either way. The ledger logs when the store becomes
//     unavailable and when it is written again (class "store", the file).
package budget

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
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

// Config holds the daily limits of each scope class and the policy while
// the database cannot be written.
type Config struct {
	PerSpeaker, PerChannel, PerInstallation Limits
	// OnStoreError is what Check does while the store is unavailable;
	// the zero value is Deny.
	OnStoreError Policy
	// Logger receives the store's records; nil discards them.
	Logger *slog.Logger
	// Grace is how long a change may wait unwritten, with the last write
	// failed, before the store is unavailable; 0 is StoreGrace.
	Grace time.Duration
}

// Policy is what a turn meets while the usage database cannot be written
// (budgets.on_store_error).
type Policy int

// The policies.
const (
	// Deny refuses new turns (Check fails with rtsandbox.ErrStore): no
	// turn runs whose counts a crash could forget.
	Deny Policy = iota
	// Allow runs them, counted in memory.
	Allow
)

func (p Policy) String() string {
	if p == Allow {
		return "allow"
	}
	return "deny"
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
	cfg  Config
	path string
	db   *sql.DB
	// lock is the exclusive lock on the database, held until Close.
	lock *os.File
	// Now is the clock of Today; tests may set it before use.
	Now func() time.Time
	// OnSettle, when set before use, is told every settled amount (the
	// spend metric). It must not block.
	OnSettle func(k Kind, amount int64)
	// mu guards the counts: one host process owns the state dir, so the
	// memory is the authority and the database its copy.
	mu     sync.Mutex
	counts map[key]count
	days   map[string]bool // days whose rows were read from the database
	dirty  map[key]struct{}
	// pendingSince is when the oldest unwritten change was made (zero
	// when none waits); clock is its clock (time.Now; tests set it).
	pendingSince time.Time
	clock        func() time.Time
	lastErr      error // the last write's error, nil after a good one
	down         bool  // the store was reported unavailable

	flushMu sync.Mutex // one write at a time
	stop    chan struct{}
	done    chan struct{}
}

// key names one count.
type key struct {
	day, scope string
	kind       Kind
}

// count is one scope's used and reserved amounts of a kind on a day.
type count struct{ used, reserved int64 }

// Open opens (creating 0600 when missing) the database at path, whose
// directory must be private to this service (internal/privdir), and
// clears reservations a previous process left behind, and starts its
// writer; Close writes what is left and releases it.
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
	go l.run()
	return l, nil
}

func open(path string, cfg Config) (*Ledger, error) {
	if err := create(path); err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("budget: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := initDB(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("budget: %s: %w", path, err)
	}
	return &Ledger{
		cfg: cfg, path: path, db: db, Now: time.Now, clock: time.Now,
		counts: map[key]count{}, days: map[string]bool{}, dirty: map[key]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
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

// Path is the database file.
func (l *Ledger) Path() string { return l.path }

// Today returns the current day key (UTC).
func (l *Ledger) Today() string { return Day(l.Now()) }

// Limit returns the limit of kind in scope; 0 is unlimited.
func (l *Ledger) Limit(scope string, k Kind) int64 { return l.cfg.limit(scope, k) }

// Reserve reserves amount of kind in every scope on day, or none: it
// returns an error wrapping ErrExhausted naming the first scope over its
// limit, or a database error (a day's first use reads its rows). It never
// waits on a write.
func (l *Ledger) Reserve(ctx context.Context, day string, scopes []string, k Kind, amount int64) (Reservation, error) {
	if amount < 0 {
		return Reservation{}, fmt.Errorf("budget: negative reservation: %w", rtsandbox.ErrInvalid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.load(ctx, day); err != nil {
		return Reservation{}, err
	}
	for _, s := range scopes {
		if err := l.check(day, s, k, amount); err != nil {
			return Reservation{}, err
		}
	}
	for _, s := range scopes {
		l.add(key{day, s, k}, 0, amount)
	}
	return Reservation{Day: day, Scopes: scopes, Kind: k, Amount: amount}, nil
}

// check refuses amount when it would take scope over its limit (l.mu held).
func (l *Ledger) check(day, scope string, k Kind, amount int64) error {
	limit := l.cfg.limit(scope, k)
	if limit == 0 {
		return nil
	}
	c := l.counts[key{day, scope, k}]
	if c.used+c.reserved+amount > limit {
		return fmt.Errorf("%w: %s %s (%d used, %d reserved, limit %d)", ErrExhausted, scope, k, c.used, c.reserved, limit)
	}
	return nil
}

// Check returns an error wrapping ErrExhausted when any limited kind of
// any scope has nothing left on day (used+reserved >= limit), so that work
// that would be refused at its first call is refused before it starts. It
// reserves nothing. While the store is unavailable and the policy is Deny
// it returns an error wrapping rtsandbox.ErrStore that names the file.
func (l *Ledger) Check(ctx context.Context, day string, scopes []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.storeCheck(); err != nil {
		return err
	}
	if err := l.load(ctx, day); err != nil {
		return err
	}
	for _, s := range scopes {
		for _, k := range Kinds() {
			if err := l.check(day, s, k, 1); err != nil {
				return err
			}
		}
	}
	return nil
}

// Settle moves r from reserved to used with the actual amount spent. It
// never waits on a write; its change is written with the next batch.
func (l *Ledger) Settle(ctx context.Context, r Reservation, actual int64) error {
	actual = max(actual, 0)
	l.mu.Lock()
	err := l.load(ctx, r.Day)
	if err == nil {
		for _, s := range r.Scopes {
			l.add(key{r.Day, s, r.Kind}, actual, -r.Amount)
		}
	}
	l.mu.Unlock()
	if err == nil && l.OnSettle != nil {
		l.OnSettle(r.Kind, actual)
	}
	return err
}

// add adds to a count's used and reserved amounts (reserved never below
// 0) and marks it for the next write (l.mu held).
func (l *Ledger) add(k key, used, reserved int64) {
	c := l.counts[k]
	c.used += used
	c.reserved = max(c.reserved+reserved, 0)
	l.counts[k] = c
	l.dirty[k] = struct{}{}
	if l.pendingSince.IsZero() {
		l.pendingSince = l.clock()
	}
}

// Usage returns scope's counts of every kind on day, with their limits.
func (l *Ledger) Usage(ctx context.Context, day, scope string) ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.load(ctx, day); err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(Kinds()))
	for _, k := range Kinds() {
		c := l.counts[key{day, scope, k}]
		out = append(out, Entry{Kind: k, Used: c.used, Reserved: c.reserved, Limit: l.cfg.limit(scope, k)})
	}
	return out, nil
}
