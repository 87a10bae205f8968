// `rtsandbox backup` and `rtsandbox restore` (docs/operations.md, "Backup
// and restore"): the layout and the locks of a config's state; package
// backup does the copying.

package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rtsandbox/rtsandbox/backup"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// backupLayout is where cfg keeps its state, and the worker user a root
// host hands restored workspaces to.
func backupLayout(cfg *config.Config) backup.Layout {
	l := backup.Layout{StateDir: cfg.StateDir, PartyDir: cfg.Session.PartyDir}
	if os.Geteuid() == 0 {
		if uid, gid, err := workerUser(cfg); err == nil {
			l.Worker = &backup.Owner{UID: uid, GID: gid}
		} else {
			l.WorkerErr = err
		}
	}
	return l
}

// Backup writes a consistent backup of cfg's state into dir, which must
// be new or empty. It takes no lock: it runs beside a serve.
func Backup(ctx context.Context, cfg *config.Config, dir string, now time.Time) (backup.Report, error) {
	if err := privdir.Check(cfg.StateDir, os.Geteuid()); err != nil {
		return backup.Report{}, fmt.Errorf("state_dir: %w", err)
	}
	return backup.Write(ctx, backupLayout(cfg), dir, now)
}

// Restore checks the backup in dir (its manifest and every file), then
// writes it into cfg's state dir while no serve,
// turn or chat holds it (ErrServeRunning): it holds their locks (the run
// root's, the usage database's and the channel store's) throughout.
func Restore(ctx context.Context, cfg *config.Config, dir string, force bool, now time.Time) (backup.Restored, error) {
	m, err := backup.Check(ctx, dir) // before anything is touched
	if err != nil {
		return backup.Restored{}, err
	}
	if _, err := privdir.Make(cfg.StateDir); err != nil {
		return backup.Restored{}, fmt.Errorf("state_dir: %w (it must be owned by uid %d with mode 0700)", err, os.Geteuid())
	}
	release, err := holdStateDir(cfg.StateDir)
	if err != nil {
		return backup.Restored{}, err
	}
	defer release()
	store, err := privdir.Lock(filepath.Join(cfg.StateDir, channels.LockFile))
	if errors.Is(err, privdir.ErrLocked) {
		return backup.Restored{}, fmt.Errorf("%w (%w)", ErrServeRunning, err)
	}
	if err != nil {
		return backup.Restored{}, err
	}
	defer store.Close()
	return backup.Restore(ctx, backupLayout(cfg), dir, m, force, now)
}
