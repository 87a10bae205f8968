package budget

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/rtsandbox/rtsandbox"
)

// The database is the counts' copy (see the package doc): how often it is
// written, how long a write waits for a lock, and how long a change may
// wait unwritten before the store counts as unavailable.
const (
	// FlushInterval is the batching window: a crash loses at most the
	// settlements of this long.
	FlushInterval = 250 * time.Millisecond
	// BusyTimeout is how long one write waits for a lock another
	// connection holds (an operator's sqlite3 shell); a write that times
	// out is retried at the next tick.
	BusyTimeout = 100 * time.Millisecond
	// StoreGrace is how long a change may wait unwritten, with the last
	// write failed, before the store is unavailable (Check's policy).
	StoreGrace = time.Second
	// openTimeout bounds Open's wait for a locked database, and
	// closeTimeout Close's last write.
	openTimeout  = 5 * time.Second
	closeTimeout = 5 * time.Second
	// writeTimeout bounds one batch write past its busy wait.
	writeTimeout = 2 * time.Second
)

const schema = `CREATE TABLE IF NOT EXISTS usage (
	day TEXT NOT NULL, scope TEXT NOT NULL, kind TEXT NOT NULL,
	used INTEGER NOT NULL DEFAULT 0, reserved INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (day, scope, kind))`

// dsn is the driver's name for path: a file URI with the connection's
// pragmas; writes take the write lock at BEGIN (immediate), where the
// busy timeout applies.
func dsn(path string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	return (&url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}).String()
}

// initDB creates the schema and clears reservations a previous process
// left behind, retrying a locked database for up to openTimeout.
func initDB(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	for {
		err := initOnce(ctx, db)
		if err == nil || !busy(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(BusyTimeout):
		}
	}
}

func initOnce(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE usage SET reserved = 0 WHERE reserved <> 0`); err != nil {
		return fmt.Errorf("clear reservations: %w", err)
	}
	return nil
}

// busy reports whether err is SQLite's "locked by another connection".
func busy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// load reads day's rows into memory on its first use (l.mu held). A
// reader is not blocked by another connection's write lock (WAL); a read
// that fails is the store's, whatever the policy: the day's counts are
// unknown.
func (l *Ledger) load(ctx context.Context, day string) error {
	if l.days[day] {
		return nil
	}
	rows, err := l.db.QueryContext(ctx, `SELECT scope, kind, used FROM usage WHERE day=?`, day)
	if err != nil {
		return l.storeErr("read", err)
	}
	defer rows.Close()
	got := map[key]int64{}
	for rows.Next() {
		var scope, kind string
		var used int64
		if err := rows.Scan(&scope, &kind, &used); err != nil {
			return l.storeErr("read", err)
		}
		got[key{day, scope, Kind(kind)}] = used
	}
	if err := rows.Err(); err != nil {
		return l.storeErr("read", err)
	}
	for k, used := range got {
		c := l.counts[k]
		c.used += used
		l.counts[k] = c
	}
	l.days[day] = true
	return nil
}

// storeErr wraps a database error as the store's, naming the file.
func (l *Ledger) storeErr(op string, err error) error {
	return fmt.Errorf("budget: usage database %s: %s: %w: %w", l.path, op, rtsandbox.ErrStore, err)
}

// writeErr wraps a failed write, naming the file; the policy, not the
// write, decides whether a turn meets rtsandbox.ErrStore.
func (l *Ledger) writeErr(op string, err error) error {
	return fmt.Errorf("budget: usage database %s: %s: %w", l.path, op, err)
}

// unavailable reports whether a change has waited unwritten for
// StoreGrace while the last write failed (l.mu held).
func (l *Ledger) unavailable() bool {
	grace := l.cfg.Grace
	if grace <= 0 {
		grace = StoreGrace
	}
	return l.lastErr != nil && !l.pendingSince.IsZero() && l.clock().Sub(l.pendingSince) >= grace
}

// storeCheck is the policy's answer while the store is unavailable
// (l.mu held): Deny refuses, naming the file and the last write's error.
func (l *Ledger) storeCheck() error {
	if l.cfg.OnStoreError == Allow || !l.unavailable() {
		return nil
	}
	return fmt.Errorf("budget: usage database %s: %w: counts unwritten for %s (budgets.on_store_error: deny): %w",
		l.path, rtsandbox.ErrStore, l.clock().Sub(l.pendingSince).Round(time.Millisecond), l.lastErr)
}

// row is one count to write.
type row struct {
	k key
	c count
}

// Flush writes every changed count in one transaction. A write that fails
// leaves its counts marked for the next one. The ledger's own writer calls
// it every FlushInterval; Close calls it last.
func (l *Ledger) Flush(ctx context.Context) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	began := l.clock()
	batch := make([]row, 0, len(l.dirty))
	for k := range l.dirty {
		batch = append(batch, row{k, l.counts[k]})
	}
	clear(l.dirty)
	l.mu.Unlock()
	err := l.write(ctx, batch)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		for _, r := range batch {
			l.dirty[r.k] = struct{}{}
		}
		l.lastErr = err
		return err
	}
	l.lastErr = nil
	if len(l.dirty) == 0 {
		l.pendingSince = time.Time{}
	} else {
		l.pendingSince = began
	}
	l.prune()
	return nil
}

// write writes batch's absolute counts: the process owns the database,
// so its memory is the truth and a retried write is harmless.
func (l *Ledger) write(ctx context.Context, batch []row) error {
	if len(batch) == 0 {
		return nil
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return l.writeErr("begin", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage (day, scope, kind, used, reserved) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (day, scope, kind) DO UPDATE SET used = excluded.used, reserved = excluded.reserved`)
	if err != nil {
		return l.writeErr("write", err)
	}
	defer stmt.Close()
	for _, r := range batch {
		if _, err := stmt.ExecContext(ctx, r.k.day, r.k.scope, string(r.k.kind), r.c.used, r.c.reserved); err != nil {
			return l.writeErr("write", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return l.writeErr("commit", err)
	}
	return nil
}

// prune forgets the counts of days before yesterday once they are written
// and hold no reservation (l.mu held); a later use reads them again.
func (l *Ledger) prune() {
	if len(l.days) <= 2 {
		return
	}
	yesterday := Day(l.clock().Add(-24 * time.Hour))
	keep := map[string]bool{}
	for k, c := range l.counts {
		if _, dirty := l.dirty[k]; dirty || c.reserved != 0 {
			keep[k.day] = true
		}
	}
	for k := range l.counts {
		if k.day < yesterday && !keep[k.day] {
			delete(l.counts, k)
		}
	}
	for d := range l.days {
		if d < yesterday && !keep[d] {
			delete(l.days, d)
		}
	}
}

// run is the writer: a batch every FlushInterval until Close.
func (l *Ledger) run() {
	defer close(l.done)
	t := time.NewTicker(FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), BusyTimeout+writeTimeout)
		err := l.Flush(ctx)
		cancel()
		l.report(err)
	}
}

// report logs when the store becomes unavailable and when it is written
// again, once each.
func (l *Ledger) report(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.down && l.unavailable():
		l.down = true
		l.log().Error("usage database unavailable: budget counts wait in memory; inspect the file (another process holding a lock, a full disk, damage: docs/operations.md)",
			"class", "store", "file", l.path, "policy", l.cfg.OnStoreError.String(),
			"unwritten_for", l.clock().Sub(l.pendingSince).Round(time.Millisecond), "err", l.lastErr)
	case l.down && err == nil:
		l.down = false
		l.log().Warn("usage database written again: budget counts are stored", "class", "store", "file", l.path)
	}
}

func (l *Ledger) log() *slog.Logger {
	if l.cfg.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.cfg.Logger
}

// Close stops the writer, writes what is left (retrying a locked database
// for up to closeTimeout), and closes the database and its lock. Counts it
// could not write are lost, and logged.
func (l *Ledger) Close() error {
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := l.Flush(ctx)
	for err != nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(FlushInterval):
			err = l.Flush(ctx)
		}
	}
	if err != nil {
		l.log().Error("usage database: budget counts not written at close are lost", "class", "store", "file", l.path, "err", err)
	}
	cerr := l.db.Close()
	l.lock.Close()
	return errors.Join(err, cerr)
}
