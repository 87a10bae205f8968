// `rtsandbox repair`: moves a damaged memory or usage database aside so
// that the next start begins a fresh one (docs/operations.md).
//
// The contract: repair runs only while no serve holds the state directory
// (it takes the run root's lock and the usage database's lock, as a live
// serve holds them, and refuses when either is held). It checks both
// databases with PRAGMA quick_check and leaves a healthy or missing one
// as it is; a damaged one is renamed, with its -wal and -shm, to
// "<name>.damaged-<UTC time>" beside it, never over a file, and named in
// the output: the data is kept for recovery (sqlite3's .recover), never
// deleted. A damaged memory.db loses every channel's memory and sealed
// history to the fresh start; a damaged usage.db the day's counts.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/internal/sqlitecheck"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/sealed"
)

// ErrServeRunning refuses a repair while a serve holds the state dir.
var ErrServeRunning = errors.New("a serve (or another rtsandbox process) holds the state dir: stop it first")

// ErrNotRepaired marks a repair that left a database it could not check
// or move.
var ErrNotRepaired = errors.New("a database was not repaired")

// Repair checks the memory and usage databases of cfg's state dir and
// moves each damaged one aside, one line per database on out.
func Repair(ctx context.Context, cfg *config.Config, out io.Writer, now time.Time) error {
	dir := cfg.StateDir
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(out, "%s does not exist: nothing to repair\n", dir)
		return nil
	}
	if err := privdir.Check(dir, os.Geteuid()); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	release, err := holdStateDir(dir)
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	defer release()
	var bad error
	for _, name := range []string{memstore.FileName, budget.FileName} {
		if err := repairOne(ctx, filepath.Join(dir, name), out, now); err != nil {
			fmt.Fprintf(out, "%s: %v\n", name, err)
			bad = fmt.Errorf("repair: %w: %w", ErrNotRepaired, err)
		}
	}
	return bad
}

// holdStateDir takes the locks a live serve holds: the run root's (when
// it exists) and the usage database's (repair and restore).
func holdStateDir(dir string) (func(), error) {
	var held []*os.File
	release := func() {
		for _, f := range held {
			f.Close()
		}
	}
	root := filepath.Join(dir, RunRootName)
	if _, err := os.Lstat(root); err == nil {
		f, err := sealed.LockRunRoot(root)
		if err != nil {
			return nil, fmt.Errorf("%w (%w)", ErrServeRunning, err)
		}
		held = append(held, f)
	}
	f, err := privdir.Lock(filepath.Join(dir, budget.FileName) + ".lock")
	if err != nil {
		release()
		if errors.Is(err, privdir.ErrLocked) {
			return nil, fmt.Errorf("%w (%w)", ErrServeRunning, err)
		}
		return nil, err
	}
	held = append(held, f)
	return release, nil
}

// repairOne checks one database and moves it aside when it is damaged.
func repairOne(ctx context.Context, path string, out io.Writer, now time.Time) error {
	name := filepath.Base(path)
	err := sqlitecheck.QuickCheck(ctx, path)
	switch {
	case err == nil:
		fmt.Fprintf(out, "%s: passed quick_check; left as it is\n", name)
		return nil
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(out, "%s: does not exist; nothing to do\n", name)
		return nil
	case !errors.Is(err, sqlitecheck.ErrDamaged):
		return err
	}
	kept, merr := sqlitecheck.MoveAside(path, now)
	if merr != nil {
		return fmt.Errorf("%w; moving it aside failed: %w", err, merr)
	}
	fmt.Fprintf(out, "%s: damaged (%v)\n  moved aside: kept as %s; the next start creates a fresh %s\n", name, err, kept, name)
	return nil
}
