package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/sqlitecheck"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/sealed"
)

// storeDir is a state dir with a memory database holding one channel's
// note and a usage database, both closed.
func storeDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	ctx := context.Background()
	m, err := memstore.Open(ctx, memstore.Options{Path: filepath.Join(dir, memstore.FileName)})
	if err != nil {
		t.Fatal(err)
	}
	st := rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: strings.Repeat("n", 2000)}}, History: []rtsandbox.HistoryEntry{}}
	if err := m.Save(ctx, rtsandbox.Binding{Channel: "http:a", Speaker: rtsandbox.Speaker{ID: "s", Name: "S", PrincipalID: "http:s"}}, st); err != nil {
		t.Fatal(err)
	}
	m.Close()
	l, err := budget.Open(filepath.Join(dir, budget.FileName), budget.Config{PerChannel: budget.Limits{Calls: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, l.Today(), budget.Scopes("http:a", "http:s"), budget.Calls, 1); err != nil {
		t.Fatal(err)
	}
	l.Close()
	return dir
}

// damage overwrites every page of the file at path after the first with
// a pattern no SQLite page has.
func damage(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= 4096 {
		t.Fatalf("%s has %d bytes: one page, nothing to damage", path, fi.Size())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, int(fi.Size())-4096), 4096); err != nil {
		t.Fatal(err)
	}
}

// doctor's database checks: ok for healthy and missing files, a failure
// with the repair fix for a damaged one.
func TestDBChecks(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		dir  func(t *testing.T) string
		want []brief
		text string
	}{
		{"healthy", storeDir, []brief{{"ok", "memory.db", false}, {"ok", "usage.db", false}}, "passed quick_check"},
		{"missing", func(t *testing.T) string { return t.TempDir() }, []brief{{"ok", "memory.db", false}, {"ok", "usage.db", false}}, "does not exist yet"},
		{"memory-damaged", func(t *testing.T) string {
			dir := storeDir(t)
			damage(t, filepath.Join(dir, memstore.FileName))
			return dir
		}, []brief{{"fail", "memory.db", true}, {"ok", "usage.db", false}}, "database damaged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := dbChecks(ctx, tt.dir(t))
			var got []brief
			for _, c := range checks {
				got = append(got, briefOf(c))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || !strings.Contains(checks[0].msg, tt.text) {
				t.Errorf("dbChecks (-want +got):\n%s\nfirst msg %q; want it to contain %q", diff, checks[0].msg, tt.text)
			}
			if checks[0].status == statusFail && !strings.Contains(checks[0].fix, "rtsandbox repair") {
				t.Errorf("fix %q does not name rtsandbox repair", checks[0].fix)
			}
		})
	}
}

// The repair path: a damaged memory.db is moved aside (kept, named in the
// output), the healthy usage.db is left alone, and the next open starts a
// fresh memory database.
func TestRepairMovesDamagedAside(t *testing.T) {
	ctx := context.Background()
	dir := storeDir(t)
	path := filepath.Join(dir, memstore.FileName)
	damage(t, path)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	usageBefore, _ := os.ReadFile(filepath.Join(dir, budget.FileName))
	if err := sqlitecheck.QuickCheck(ctx, path); !errors.Is(err, sqlitecheck.ErrDamaged) {
		t.Fatalf("QuickCheck of the damaged file = %v; the test damages nothing", err)
	}
	var out bytes.Buffer
	at := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	if err := Repair(ctx, &config.Config{StateDir: dir}, &out, at); err != nil {
		t.Fatalf("Repair = %v\n%s", err, out.String())
	}
	kept := path + ".damaged-20261204T170000Z"
	if !strings.Contains(out.String(), "kept as "+kept) || !strings.Contains(out.String(), "usage.db: passed quick_check; left as it is") {
		t.Errorf("output:\n%s\nwant the kept file named and usage.db left", out.String())
	}
	if got, err := os.ReadFile(kept); err != nil || !bytes.Equal(got, before) {
		t.Errorf("kept file: %v; want the damaged bytes unchanged", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, budget.FileName)); !bytes.Equal(got, usageBefore) {
		t.Error("usage.db changed")
	}
	m, err := memstore.Open(ctx, memstore.Options{Path: path})
	if err != nil {
		t.Fatalf("memstore.Open after repair = %v", err)
	}
	defer m.Close()
	if err := sqlitecheck.QuickCheck(ctx, path); err != nil {
		t.Errorf("fresh database: %v", err)
	}
}

// Repair refuses while a serve holds the state dir (its run root lock).
func TestRepairRefusesWhileServing(t *testing.T) {
	dir := storeDir(t)
	root := filepath.Join(dir, RunRootName)
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := sealed.LockRunRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	damage(t, filepath.Join(dir, memstore.FileName))
	var out bytes.Buffer
	if err := Repair(context.Background(), &config.Config{StateDir: dir}, &out, time.Now()); !errors.Is(err, ErrServeRunning) {
		t.Fatalf("Repair while serving = %v; want ErrServeRunning", err)
	}
	if _, err := os.Stat(filepath.Join(dir, memstore.FileName)); err != nil {
		t.Errorf("memory.db moved while serving: %v", err)
	}
}
