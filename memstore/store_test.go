package memstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/privdir"
)

// TestOpenFileModes: the database, and the -wal and -shm files SQLite
// makes beside it, are 0600 in a 0700 directory.
func TestOpenFileModes(t *testing.T) {
	s, _ := testStore(t, nil)
	mustCall(t, s, bind(chanA, alice), "memory_set", `{"scope":"speaker","key":"k","text":"t"}`)
	dir := filepath.Dir(s.Path())
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	for _, name := range []string{FileName, FileName + "-wal", FileName + "-shm"} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want a regular 0600 file", name, fi, err)
		}
	}
}

// TestOpenRefusals: a database that cannot open is an error naming the
// file and the reason, and nothing is followed or read through a link.
func TestOpenRefusals(t *testing.T) {
	tests := []struct {
		name   string
		plant  func(t *testing.T, path string)
		reason error  // matched with errors.Is when set
		text   string // in the message
	}{
		{"shared-dir", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o755)
		}, privdir.ErrNotPrivate, ""},
		{"db-symlink", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o700)
			target := filepath.Join(filepath.Dir(filepath.Dir(path)), "target.db")
			if err := os.WriteFile(target, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			symlink(t, target, path)
		}, syscall.ELOOP, ""},
		{"db-fifo", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o700)
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, privdir.ErrNotRegular, ""},
		{"db-group-readable", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o700)
			writeFile(t, path, "", 0o640)
		}, privdir.ErrNotPrivate, ""},
		{"wal-symlink", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o700)
			symlink(t, "/etc/passwd", path+"-wal")
		}, privdir.ErrNotRegular, "-wal"},
		{"shm-group-readable", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o700)
			writeFile(t, path+"-shm", "", 0o644)
		}, privdir.ErrNotPrivate, "-shm"},
		{"not-a-database", func(t *testing.T, path string) {
			mkdir(t, filepath.Dir(path), 0o700)
			writeFile(t, path, strings.Repeat("not sqlite ", 1000), 0o600)
		}, ErrCorrupt, "not a database"},
		{"newer-schema", func(t *testing.T, path string) {
			s, err := Open(context.Background(), Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.db.Exec(`PRAGMA user_version = 99`); err != nil {
				t.Fatal(err)
			}
			s.Close()
		}, ErrCorrupt, "schema version 99"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state", FileName)
			tc.plant(t, path)
			s, err := Open(context.Background(), Options{Path: path})
			if err == nil {
				s.Close()
				t.Fatal("Open = nil; want a refusal")
			}
			if !strings.Contains(err.Error(), path) || (tc.reason != nil && !errors.Is(err, tc.reason)) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("Open = %v; want an error naming %s, %v and %q", err, path, tc.reason, tc.text)
			}
		})
	}
	if _, err := Open(context.Background(), Options{}); err == nil {
		t.Error("Open without a path = nil; want a refusal")
	}
}

// TestReopenKeepsData: a second Open (a restart) reads what the first wrote.
func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", FileName)
	s, err := Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	mustCall(t, s, bind(chanA, alice), "memory_set", `{"scope":"channel","key":"topic","text":"Tea"}`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := mustCall(t, s, bind(chanA, bob), "memory_get", `{"scope":"channel"}`); got != `[{"key":"topic","text":"Tea"}]` {
		t.Errorf("after reopening: %s", got)
	}
}

// TestContextCancelled: a cancelled context ends an operation with the
// context's error and changes nothing.
func TestContextCancelled(t *testing.T) {
	s, _ := testStore(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := mustParse(t, "memory_set", `{"scope":"channel","key":"k","text":"t"}`)
	if _, err := s.Call(ctx, bind(chanA, alice), c); !errors.Is(err, context.Canceled) {
		t.Errorf("Call(cancelled) = %v; want context.Canceled", err)
	}
	if got := mustCall(t, s, bind(chanA, alice), "memory_get", `{"scope":"channel"}`); got != "[]" {
		t.Errorf("after a cancelled set: %s", got)
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}
