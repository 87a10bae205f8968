// Package sqlitelock holds a SQLite database's write lock from a
// connection of its own, as an operator's sqlite3 shell in a write
// transaction does (BEGIN IMMEDIATE), for tests of what the host does
// while it cannot write. Tests only.
package sqlitelock

import (
	"context"
	"database/sql"
	"net/url"
	"sync"
	"testing"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Hold takes the write lock of the database at path and returns the
// function that releases it; the test's cleanup releases it too. Release
// may be called from any goroutine (a watchdog's timer) and more than
// once: the first call releases.
func Hold(tb testing.TB, path string) (release func()) {
	tb.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		tb.Fatalf("sqlitelock: open %s: %v", path, err)
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		tb.Fatalf("sqlitelock: %s: %v", path, err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		db.Close()
		tb.Fatalf("sqlitelock: BEGIN IMMEDIATE on %s: %v", path, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				tb.Errorf("sqlitelock: ROLLBACK on %s: %v", path, err)
			}
			conn.Close()
			db.Close()
		})
	}
	tb.Cleanup(release)
	return release
}
