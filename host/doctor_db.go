package host

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/internal/sqlitecheck"
	"github.com/rtsandbox/rtsandbox/memstore"
)

// repairFix is the fix of a damaged database (docs/operations.md).
const repairFix = "stop serve, then run rtsandbox repair --config FILE: it moves the damaged file aside (kept for recovery) and the next start begins a fresh one (docs/operations.md)"

// dbChecks runs PRAGMA quick_check on the memory and usage databases in
// the state dir, read-only. A missing one is ok (created at first use).
func dbChecks(ctx context.Context, stateDir string) []Check {
	var out []Check
	for _, name := range []string{memstore.FileName, budget.FileName} {
		out = append(out, dbCheck(ctx, filepath.Join(stateDir, name)))
	}
	return out
}

func dbCheck(ctx context.Context, path string) Check {
	name := filepath.Base(path)
	err := sqlitecheck.QuickCheck(ctx, path)
	switch {
	case err == nil:
		return ok(name, "%s passed quick_check", path)
	case errors.Is(err, fs.ErrNotExist):
		return ok(name, "%s does not exist yet; it is created at first use", path)
	case errors.Is(err, sqlitecheck.ErrDamaged):
		return fail(name, repairFix, "%v", err)
	}
	return warn(name, "make the file readable by this user, or stop the process that holds it", "could not check: %v", err)
}
