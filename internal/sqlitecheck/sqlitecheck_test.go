package sqlitecheck_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox/internal/sqlitecheck"
)

// makeDB writes a WAL database of a few pages at path and closes it.
func makeDB(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)`,
		`CREATE INDEX tv ON t (v)`,
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 400) INSERT INTO t SELECT i, printf('%0100d', i) FROM n`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// overwrite writes b at off in the file at path.
func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestQuickCheck(t *testing.T) {
	tests := []struct {
		name    string
		prep    func(t *testing.T, path string)
		damaged bool
		missing bool
	}{
		{"healthy", func(t *testing.T, path string) { makeDB(t, path) }, false, false},
		{"missing", func(*testing.T, string) {}, false, true},
		{"not-a-database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("garbage!"), 1024), 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, false},
		{"pages-overwritten", func(t *testing.T, path string) {
			makeDB(t, path)
			overwrite(t, path, 3*4096, bytes.Repeat([]byte{0xa5}, 3*4096))
		}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			tt.prep(t, path)
			err := sqlitecheck.QuickCheck(context.Background(), path)
			got := []bool{errors.Is(err, sqlitecheck.ErrDamaged), errors.Is(err, fs.ErrNotExist)}
			if diff := cmp.Diff([]bool{tt.damaged, tt.missing}, got); diff != "" {
				t.Fatalf("QuickCheck = %v; damaged, missing (-want +got):\n%s", err, diff)
			}
			if err != nil && !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
		})
	}
}

// MoveAside takes the database with its -wal and -shm to a name of their
// own, and never replaces a file.
func TestMoveAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "memory.db")
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.WriteFile(p, []byte(filepath.Base(p)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 12, 4, 16, 5, 0, 0, time.UTC)
	kept, err := sqlitecheck.MoveAside(path, at)
	if err != nil {
		t.Fatal(err)
	}
	if want := path + ".damaged-20261204T160500Z"; kept != want {
		t.Errorf("kept = %s; want %s", kept, want)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"memory.db.damaged-20261204T160500Z", "memory.db.damaged-20261204T160500Z-shm", "memory.db.damaged-20261204T160500Z-wal"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("dir (-want +got):\n%s", diff)
	}
	if b, _ := os.ReadFile(kept + "-wal"); string(b) != "memory.db-wal" {
		t.Errorf("kept -wal holds %q", b)
	}
	if err := os.WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlitecheck.MoveAside(path, at); !errors.Is(err, fs.ErrExist) {
		t.Errorf("MoveAside onto a kept file = %v; want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(kept); string(b) != "memory.db" {
		t.Errorf("the kept database was replaced: %q", b)
	}
}
