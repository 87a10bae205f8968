package channels

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type key = rtsandbox.ChannelKey

func mustOpen(tb testing.TB, dir string, initial ...key) *Store {
	tb.Helper()
	s, err := Open(dir, initial)
	if err != nil {
		tb.Fatalf("Open(%q, %q) error: %v", dir, initial, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func stateDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "state")
}

func TestOpenCreatesPrivateDirAndSeeds(t *testing.T) {
	dir := stateDir(t)
	s := mustOpen(t, dir, "fake:guests", "fake:guests", "discord:1")
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("state dir mode = %v; want 0700", got)
	}
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatalf("state file not written on first start: %v", err)
	}
	if got, want := string(data), `["fake:guests","discord:1"]`; got != want {
		t.Errorf("state file = %s; want %s", got, want)
	}
	if !s.Enabled("fake:guests") || s.Enabled("fake:other") {
		t.Errorf("Enabled: want only the seeded keys, got list %q", s.List())
	}
}

func TestInitialOnlyOnFirstStart(t *testing.T) {
	dir := stateDir(t)
	s := mustOpen(t, dir, "fake:a")
	if err := s.Disable("fake:a"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := mustOpen(t, dir, "fake:a", "fake:b")
	if got := s2.List(); len(got) != 0 {
		t.Errorf("List() after restart with initial keys = %q; want [] (initial only seeds a missing file)", got)
	}
}

// The reference's test "Store persistence".
func TestStorePersistence(t *testing.T) {
	dir := stateDir(t)
	s := mustOpen(t, dir)
	if err := s.Enable("fake:guests"); err != nil {
		t.Fatalf("Enable: %v", err)
	}
	if err := s.Enable("fake:more"); err != nil {
		t.Fatalf("Enable: %v", err)
	}
	if err := s.Enable("fake:guests"); err != nil {
		t.Fatalf("Enable twice: %v", err)
	}
	if err := s.Enable("bad"); !errors.Is(err, ErrKey) || !errors.Is(err, rtsandbox.ErrInvalid) {
		t.Errorf("Enable(bad) = %v; want ErrKey", err)
	}
	if err := s.Disable("Bad:x"); !errors.Is(err, ErrKey) {
		t.Errorf("Disable(Bad:x) = %v; want ErrKey", err)
	}
	s.Close()

	s2 := mustOpen(t, dir)
	if diff := cmp.Diff([]key{"fake:guests", "fake:more"}, s2.List()); diff != "" {
		t.Errorf("reopened List() (-want +got):\n%s", diff)
	}
	if err := s2.Disable("fake:guests"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Disable("fake:never"); err != nil {
		t.Errorf("Disable of a key not enabled = %v; want nil", err)
	}
	s2.Close()

	s3 := mustOpen(t, dir)
	if diff := cmp.Diff([]key{"fake:more"}, s3.List()); diff != "" {
		t.Errorf("List() after disable and reopen (-want +got):\n%s", diff)
	}
	fi, err := os.Lstat(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode = %v; want 0600", fi.Mode().Perm())
	}
}

// The reference's test "Store rollback": a save that cannot land must leave
// the in-memory set as it was. Temp names are random here, so the save is
// made to fail at its rename instead: a directory in place of the state
// file refuses it, even for root.
func TestStoreRollback(t *testing.T) {
	dir := stateDir(t)
	s := mustOpen(t, dir, "fake:a")
	if err := os.Remove(filepath.Join(dir, StateFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, StateFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Enable("fake:b"); err == nil {
		t.Errorf("Enable(fake:b) with a blocked temp file = nil; want error")
	}
	if diff := cmp.Diff([]key{"fake:a"}, s.List()); diff != "" {
		t.Errorf("List() after failed enable (-want +got):\n%s", diff)
	}
	if err := s.Disable("fake:a"); err == nil {
		t.Errorf("Disable(fake:a) with a blocked temp file = nil; want error")
	}
	if diff := cmp.Diff([]key{"fake:a"}, s.List()); diff != "" {
		t.Errorf("List() after failed disable (-want +got):\n%s", diff)
	}
	if !s.Enabled("fake:a") || s.Enabled("fake:b") {
		t.Errorf("Enabled disagrees with the file after rollback")
	}
	if names, _ := filepath.Glob(filepath.Join(dir, StateFile+".tmp*")); len(names) != 0 {
		t.Errorf("temp files left: %v", names)
	}
}

func TestInvalidStateFailsClosed(t *testing.T) {
	tests := []struct {
		name    string
		content string
	}{
		{"object", `{"invalid":"state"}`},
		{"null", `null`},
		{"not-json", `[fake:a`},
		{"number-item", `["fake:a", 1]`},
		{"bad-key", `["Fake:a"]`},
		{"key-without-id", `["fake:"]`},
		{"key-with-newline", `["fake:a\nb"]`},
		{"key-over-256-bytes", `["http:` + strings.Repeat("c", rtsandbox.MaxChannelKey-4) + `"]`},
		{"trailing-data", `["fake:a"] []`},
		{"empty-file", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := stateDir(t)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, []key{"fake:seed"})
			if !errors.Is(err, ErrState) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open with state %q = %v; want ErrState", tt.content, err)
			}
			// The lock was released: a valid file opens now.
			os.WriteFile(filepath.Join(dir, StateFile), []byte(`[]`), 0o600)
			mustOpen(t, dir)
		})
	}
}

func TestInvalidInitialKey(t *testing.T) {
	for _, bad := range []key{"nocolon", key("http:" + strings.Repeat("c", rtsandbox.MaxChannelKey-4))} {
		if _, err := Open(stateDir(t), []key{"fake:a", bad}); !errors.Is(err, ErrState) {
			t.Errorf("Open with initial key %.20q… = %v; want ErrState", bad, err)
		}
	}
	// The longest key that is allowed opens.
	s, err := Open(stateDir(t), []key{key("http:" + strings.Repeat("c", rtsandbox.MaxChannelKey-5))})
	if err != nil {
		t.Fatalf("Open with a %d-byte key = %v", rtsandbox.MaxChannelKey, err)
	}
	s.Close()
}

// The reference's test "Permissions fail closed" (store half).
func TestPermissionsFailClosed(t *testing.T) {
	t.Run("dir-group-readable", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, nil); !errors.Is(err, ErrPrivate) {
			t.Errorf("Open(0755 dir) = %v; want ErrPrivate", err)
		}
	})
	t.Run("dir-is-file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, nil, 0o600)
		if _, err := Open(f, nil); err == nil {
			t.Errorf("Open(a file) = nil; want error")
		}
	})
	t.Run("symlinked-dir-checks-target", func(t *testing.T) {
		root := t.TempDir()
		target := filepath.Join(root, "open")
		os.Mkdir(target, 0o777)
		os.Chmod(target, 0o777)
		link := filepath.Join(root, "link")
		os.Symlink(target, link)
		if _, err := Open(link, nil); !errors.Is(err, ErrPrivate) {
			t.Errorf("Open(symlink to 0777 dir) = %v; want ErrPrivate", err)
		}
	})
	t.Run("state-file-symlink", func(t *testing.T) {
		dir := stateDir(t)
		os.MkdirAll(dir, 0o700)
		other := filepath.Join(t.TempDir(), "elsewhere.json")
		os.WriteFile(other, []byte(`["fake:a"]`), 0o600)
		os.Symlink(other, filepath.Join(dir, StateFile))
		if _, err := Open(dir, nil); !errors.Is(err, ErrPrivate) {
			t.Errorf("Open with symlinked state file = %v; want ErrPrivate", err)
		}
	})
	t.Run("state-file-directory", func(t *testing.T) {
		dir := stateDir(t)
		os.MkdirAll(filepath.Join(dir, StateFile), 0o700)
		if _, err := Open(dir, nil); !errors.Is(err, ErrPrivate) {
			t.Errorf("Open with a directory as state file = %v; want ErrPrivate", err)
		}
	})
	t.Run("lock-file-symlink", func(t *testing.T) {
		dir := stateDir(t)
		os.MkdirAll(dir, 0o700)
		os.Symlink(filepath.Join(t.TempDir(), "x"), filepath.Join(dir, LockFile))
		if _, err := Open(dir, nil); err == nil {
			t.Errorf("Open with symlinked lock file = nil; want error")
		}
	})
}

func TestExclusiveLock(t *testing.T) {
	dir := stateDir(t)
	s := mustOpen(t, dir, "fake:a")
	if s2, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open = %v; want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v; want nil", err)
	}
	if err := s.Enable("fake:b"); !errors.Is(err, ErrClosed) {
		t.Errorf("Enable after Close = %v; want ErrClosed", err)
	}
	if !s.Enabled("fake:a") {
		t.Errorf("Enabled after Close = false; want the last known set")
	}
	mustOpen(t, dir) // the lock was released
}

// TestDeletedStoreIsNotAFirstStart is issue finding "a deleted
// channels.json is treated as a first start": after the first start a
// missing state file is an error naming it, until Reseed is asked for.
func TestDeletedStoreIsNotAFirstStart(t *testing.T) {
	dir := stateDir(t)
	s := mustOpen(t, dir, "fake:seed")
	if err := s.Enable("fake:owner-enabled"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Remove(filepath.Join(dir, StateFile)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, []key{"fake:seed"})
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), filepath.Join(dir, StateFile)) {
		t.Fatalf("Open after deleting the store = %v; want ErrMissing naming the file", err)
	}
	if err := Reseed(dir); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, "fake:seed")
	if diff := cmp.Diff([]key{"fake:seed"}, s.List()); diff != "" {
		t.Errorf("List() after reseed (-want +got):\n%s", diff)
	}
	if err := Reseed(dir); !errors.Is(err, ErrLocked) {
		t.Errorf("Reseed while a store is open = %v; want ErrLocked", err)
	}
}

// TestOlderStoreGetsMarked: a store written before the marker existed is
// marked at its next start, so a later deletion is caught too.
func TestOlderStoreGetsMarked(t *testing.T) {
	dir := stateDir(t)
	mustOpen(t, dir, "fake:a").Close()
	if err := os.Remove(filepath.Join(dir, SeededFile)); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, dir).Close()
	if _, err := os.Lstat(filepath.Join(dir, SeededFile)); err != nil {
		t.Errorf("marker after opening an older store: %v", err)
	}
}

// TestReadWhileLocked: the read-only view works while a store holds the
// lock, and says when nothing was stored yet.
func TestReadWhileLocked(t *testing.T) {
	dir := stateDir(t)
	if _, err := Read(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read(new dir) = %v; want ErrNotExist", err)
	}
	s := mustOpen(t, dir, "fake:a")
	if err := s.Enable("fake:b"); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]key{"fake:a", "fake:b"}, got); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
}

// TestOpenPendingSeedsOnlyOnSeed (issue 26 item 3): a start that opens the
// store pending and is then refused writes nothing, so the next start
// seeds from the config it has then; Seed writes the keys and the record.
func TestOpenPendingSeedsOnlyOnSeed(t *testing.T) {
	dir := stateDir(t)
	s, err := OpenPending(dir, []key{"fake:a"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.List(); !cmp.Equal(got, []key{"fake:a"}) {
		t.Errorf("pending List = %v; want the initial keys", got)
	}
	for _, f := range []string{StateFile, SeededFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s before Seed: %v; want none", f, err)
		}
	}
	s.Close() // the start was refused

	s, err = OpenPending(dir, []key{"fake:a", "fake:b"}) // the operator fixed and extended the config
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Seed(); err != nil {
		t.Fatal(err)
	}
	if err := s.Seed(); err != nil { // idempotent
		t.Fatal(err)
	}
	s.Close()
	for _, f := range []string{StateFile, SeededFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s after Seed: %v", f, err)
		}
	}
	s = mustOpen(t, dir)
	if got := s.List(); !cmp.Equal(got, []key{"fake:a", "fake:b"}) {
		t.Errorf("stored = %v; want the keys of the start that succeeded", got)
	}
}

// A pending store's first change writes the set and the record, as Seed.
func TestPendingChangeSeeds(t *testing.T) {
	dir := stateDir(t)
	s, err := OpenPending(dir, []key{"fake:a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Enable("fake:b"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Lstat(filepath.Join(dir, SeededFile)); err != nil {
		t.Errorf("record after the first change: %v", err)
	}
	if got := mustOpen(t, dir).List(); !cmp.Equal(got, []key{"fake:a", "fake:b"}) {
		t.Errorf("stored = %v; want the initial key and the enabled one", got)
	}
}
