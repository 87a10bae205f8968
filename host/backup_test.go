package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/sealed"
)

// backupConfig is a config of a fresh state dir with a channel store.
func backupConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	cfg := &config.Config{StateDir: dir, Session: config.Session{PartyDir: filepath.Join(dir, config.DefaultPartyDirName)}}
	if os.Geteuid() == 0 {
		cfg.Sandbox.UID, cfg.Sandbox.GID = 65534, 65534
	}
	return cfg
}

// TestRestoreRefusedWhileServeRuns: restore takes each lock a live serve
// holds (the run root's, the usage database's, the channel store's) and
// refuses with ErrServeRunning while any is held, writing nothing into
// the state dir.
func TestRestoreRefusedWhileServeRuns(t *testing.T) {
	src := backupConfig(t)
	store, err := channels.Open(src.StateDir, []rtsandbox.ChannelKey{"http:lobby"})
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := Backup(context.Background(), src, dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	for name, hold := range map[string]func(t *testing.T, stateDir string) func(){
		"run root": func(t *testing.T, stateDir string) func() {
			root := filepath.Join(stateDir, RunRootName)
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			f, err := sealed.LockRunRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			return func() { f.Close() }
		},
		"channel store": func(t *testing.T, stateDir string) func() {
			s, err := channels.OpenPending(stateDir, nil)
			if err != nil {
				t.Fatal(err)
			}
			return func() { s.Close() }
		},
		"usage database": func(t *testing.T, stateDir string) func() {
			l, err := budget.Open(filepath.Join(stateDir, budget.FileName), budget.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return func() { l.Close() }
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := backupConfig(t)
			if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			release := sync.OnceFunc(hold(t, cfg.StateDir))
			defer release()
			before := dirNames(t, cfg.StateDir)
			_, err := Restore(context.Background(), cfg, dir, true, time.Now())
			if !errors.Is(err, ErrServeRunning) {
				t.Fatalf("Restore while the %s is held = %v; want ErrServeRunning", name, err)
			}
			if after := dirNames(t, cfg.StateDir); !slices.Equal(before, after) {
				t.Errorf("state dir %v after the refusal; was %v", after, before)
			}
			release()
			if _, err := Restore(context.Background(), cfg, dir, true, time.Now()); err != nil {
				t.Fatalf("Restore once the %s is free = %v", name, err)
			}
			if keys, err := channels.Read(cfg.StateDir); err != nil || !slices.Equal(keys, []rtsandbox.ChannelKey{"http:lobby"}) {
				t.Errorf("restored channels = %v, %v", keys, err)
			}
		})
	}
}

// dirNames are the names in dir but the lock files, which restore creates
// as serve does before it finds a lock held.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if !strings.HasSuffix(e.Name(), ".lock") {
			out = append(out, e.Name())
		}
	}
	return out
}
