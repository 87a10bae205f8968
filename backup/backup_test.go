package backup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/backup"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/wire"
)

var (
	lobby = rtsandbox.ChannelKey("http:lobby")
	alice = rtsandbox.Binding{Channel: lobby, Speaker: rtsandbox.Speaker{ID: "alice", Name: "Alice", PrincipalID: "http:alice"}, Tier: rtsandbox.TierMember}
	t0    = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
)

// layout is a fresh state dir with its party dir inside, as the default
// config has it.
func layout(t *testing.T) backup.Layout {
	t.Helper()
	dir := t.TempDir()
	l := backup.Layout{StateDir: filepath.Join(dir, "state"), PartyDir: filepath.Join(dir, "state", "party")}
	if err := os.MkdirAll(l.PartyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		l.Worker = &backup.Owner{UID: 65534, GID: 65534}
	}
	return l
}

func openMemory(t *testing.T, stateDir string) *memstore.Store {
	t.Helper()
	s, err := memstore.Open(context.Background(), memstore.Options{Path: filepath.Join(stateDir, memstore.FileName)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func remember(t *testing.T, s *memstore.Store, key, text string) {
	t.Helper()
	_, err := s.Call(context.Background(), alice, wire.MemoryCall{Tool: wire.MemorySet, Scope: wire.ScopeChannel, Key: key, HasKey: true, Text: text})
	if err != nil {
		t.Fatalf("memory_set %s: %v", key, err)
	}
}

func recall(t *testing.T, s *memstore.Store) string {
	t.Helper()
	out, err := s.Call(context.Background(), alice, wire.MemoryCall{Tool: wire.MemoryGet, Scope: wire.ScopeChannel})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// spend records settled calls of the lobby in the usage database and
// closes the ledger, which writes them.
func spend(t *testing.T, stateDir string, calls int64) {
	t.Helper()
	l, err := budget.Open(filepath.Join(stateDir, budget.FileName), budget.Config{PerChannel: budget.Limits{Calls: 100}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := l.Reserve(ctx, "2026-12-04", budget.ChannelScopes(lobby), budget.Calls, calls)
	if err == nil {
		err = l.Settle(ctx, r, calls)
	}
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

func usedCalls(t *testing.T, stateDir string) int64 {
	t.Helper()
	l, err := budget.Open(filepath.Join(stateDir, budget.FileName), budget.Config{PerChannel: budget.Limits{Calls: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	es, err := l.Usage(context.Background(), "2026-12-04", budget.ChannelScope(lobby))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind == budget.Calls {
			return e.Used
		}
	}
	return -1
}

// conversation is a channel's workspace with a conversation file in the
// worker's format (worker/sessionstore.go), appended in whole lines as
// the worker appends them.
type conversation struct {
	sessions, file string
}

func newConversation(t *testing.T, l backup.Layout, key rtsandbox.ChannelKey) *conversation {
	t.Helper()
	root := filepath.Join(l.PartyDir, session.Segment(key))
	c := &conversation{sessions: filepath.Join(root, "workspace", "sessions")}
	if err := os.MkdirAll(c.sessions, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ".channel-key"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	c.file = filepath.Join(c.sessions, "2026-12-04T10-00-00.000Z-0a1b2c3d.jsonl")
	c.append(t, `{"type":"session","format":"rtsandbox-session","version":2,"id":"2026-12-04T10-00-00.000Z-0a1b2c3d","created":"2026-12-04T10:00:00Z"}`+"\n")
	return c
}

// turn is one whole exchange's lines.
func turn(i int) string {
	id := fmt.Sprintf("t%d", i)
	return fmt.Sprintf(`{"type":"reader","turnId":%q,"reader":"http:alice","privateMemory":false}
{"type":"message","turnId":%q,"message":{"role":"user","content":"[Alice (alice)] turn %d"}}
{"type":"message","turnId":%q,"message":{"role":"assistant","content":"Answer to turn %d"}}
{"type":"end","turnId":%q,"ok":true}
`, id, id, i, id, i, id)
}

func (c *conversation) append(tb testing.TB, lines string) {
	f, err := os.OpenFile(c.file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		tb.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(lines); err != nil {
		tb.Error(err)
	}
}

// TestBackupRoundTripWhileWriting: memory, usage, channels and a session
// conversation survive a backup taken while the memory store and the
// conversation are being written, restored into a fresh state dir and read
// back through the real stores; the copy of the conversation is whole lines,
// a prefix of what the worker wrote.
func TestBackupRoundTripWhileWriting(t *testing.T) {
	ctx := context.Background()
	src := layout(t)
	mem := openMemory(t, src.StateDir)
	remember(t, mem, "drink", "Alice drinks tea")
	spend(t, src.StateDir, 7)
	store, err := channels.Open(src.StateDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close() // held open, as serve holds it
	if err := store.Enable(lobby); err != nil {
		t.Fatal(err)
	}
	conv := newConversation(t, src, lobby)
	conv.append(t, turn(1))
	conv.append(t, `{"type":"reader","turnId":"torn"`) // a line being written

	// Writers keep going while the backup runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var wrote atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			remember(t, mem, fmt.Sprintf("k%d", i%50), fmt.Sprintf("note %d", i))
			wrote.Add(1)
		}
	})
	dir := filepath.Join(t.TempDir(), "backup")
	rep, err := backup.Write(ctx, src, dir, t0)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if wrote.Load() == 0 {
		t.Log("the memory writer wrote nothing during the backup")
	}
	if len(rep.Skipped) != 0 {
		t.Errorf("skipped = %q; want nothing", rep.Skipped)
	}
	wantPaths := []string{"state/memory.db", "state/channels.seeded", "state/channels.json", "state/usage.db",
		"party/" + session.Segment(lobby) + "/.channel-key", "party/" + session.Segment(lobby) + "/workspace/sessions/" + filepath.Base(conv.file)}
	if diff := cmp.Diff(sortedSet(wantPaths), sortedSet(paths(rep.Manifest))); diff != "" {
		t.Errorf("manifest paths (-want +got):\n%s", diff)
	}
	assertPrivate(t, dir)

	dst := layout(t)
	m, err := backup.Check(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Restore(ctx, dst, dir, m, false, t0); err != nil {
		t.Fatal(err)
	}

	restored := openMemory(t, dst.StateDir)
	if got := recall(t, restored); !strings.Contains(got, "Alice drinks tea") {
		t.Errorf("restored memory = %s; want the entry set before the backup", got)
	}
	if got := usedCalls(t, dst.StateDir); got != 7 {
		t.Errorf("restored usage = %d calls; want 7", got)
	}
	keys, err := channels.Read(dst.StateDir)
	if err != nil || !cmp.Equal(keys, []rtsandbox.ChannelKey{lobby}) {
		t.Errorf("restored channels = %v, %v; want [%s]", keys, err, lobby)
	}
	got, err := os.ReadFile(filepath.Join(dst.PartyDir, session.Segment(lobby), "workspace", "sessions", filepath.Base(conv.file)))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(conv.file)
	if !bytes.HasPrefix(want, got) || !bytes.HasSuffix(got, []byte("\n")) || !bytes.Contains(got, []byte("Answer to turn 1")) || bytes.Contains(got, []byte(`"torn"`)) {
		t.Errorf("restored conversation =\n%s\nwant whole lines holding turn 1, a prefix of\n%s", got, want)
	}
	assertOwners(t, dst)
}

func paths(m backup.Manifest) []string {
	var out []string
	for _, f := range m.Files {
		out = append(out, f.Path)
	}
	return out
}

func sortedSet(s []string) map[string]bool {
	out := map[string]bool{}
	for _, v := range s {
		out[v] = true
	}
	return out
}

// assertPrivate requires every directory 0700 and every file 0600.
func assertPrivate(t *testing.T, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v; want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// assertOwners requires a restored workspace to be the worker user's when
// the host runs as root, and everything else the host user's.
func assertOwners(t *testing.T, l backup.Layout) {
	t.Helper()
	err := filepath.Walk(filepath.Dir(l.StateDir), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		uid := os.Geteuid()
		if l.Worker != nil && strings.Contains(p, string(filepath.Separator)+"workspace") {
			uid = l.Worker.UID
		}
		if got := ownerOf(fi); got != uid {
			t.Errorf("%s: owner %d; want %d", p, got, uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// populated is a state dir with a memory entry, channels and a
// conversation, and its backup.
func populated(t *testing.T) (backup.Layout, string) {
	t.Helper()
	src := layout(t)
	mem := openMemory(t, src.StateDir)
	remember(t, mem, "drink", "Alice drinks tea")
	if err := mem.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := channels.Open(src.StateDir, []rtsandbox.ChannelKey{lobby})
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	conv := newConversation(t, src, lobby)
	conv.append(t, turn(1))
	dir := filepath.Join(t.TempDir(), "backup")
	if _, err := backup.Write(context.Background(), src, dir, t0); err != nil {
		t.Fatal(err)
	}
	return src, dir
}

// entries lists what lies under dir (relative paths), for "nothing was
// written" checks.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestRestoreRefusesTamperedBackup: a backup whose file differs from its
// manifest (one byte changed, or a file missing) is refused, naming the
// file, and nothing of the state dir is written.
func TestRestoreRefusesTamperedBackup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir string)
		want   string
	}{
		{"byte changed", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "state", "channels.json")
			b, _ := os.ReadFile(p)
			b[len(b)-2] ^= 1
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "state/channels.json"},
		{"conversation grown", func(t *testing.T, dir string) {
			matches, _ := filepath.Glob(filepath.Join(dir, "party", "*", "workspace", "sessions", "*.jsonl"))
			f, err := os.OpenFile(matches[0], os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(turn(2))
			f.Close()
		}, ".jsonl"},
		{"file missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "state", "memory.db")); err != nil {
				t.Fatal(err)
			}
		}, "state/memory.db"},
		{"file replaced by a link", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "state", "memory.db")
			os.Rename(p, p+".moved")
			if err := os.Symlink("memory.db.moved", p); err != nil {
				t.Fatal(err)
			}
		}, "state/memory.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dir := populated(t)
			tc.tamper(t, dir)
			dst := layout(t)
			_, err := backup.Check(context.Background(), dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v; want a refusal naming %s", err, tc.want)
			}
			if got := entries(t, dst.StateDir); !cmp.Equal(got, []string{"party"}) {
				t.Errorf("state dir after the refusal = %q; want only the empty party dir", got)
			}
		})
	}
}

// TestRestoreRefusesIncompleteBackup: a backup without its manifest (one
// that did not finish) is refused.
func TestRestoreRefusesIncompleteBackup(t *testing.T) {
	_, dir := populated(t)
	if err := os.Remove(filepath.Join(dir, backup.ManifestName)); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Check(context.Background(), dir); !errors.Is(err, backup.ErrIncomplete) {
		t.Fatalf("Check = %v; want ErrIncomplete", err)
	}
}

// TestBackupRefusesNonEmptyDir: a backup goes only into a new or empty
// directory, and writes nothing into a non-empty one.
func TestBackupRefusesNonEmptyDir(t *testing.T) {
	src, _ := populated(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := backup.Write(context.Background(), src, dir, t0)
	if !errors.Is(err, backup.ErrNotEmpty) {
		t.Fatalf("Write into a non-empty dir = %v; want ErrNotEmpty", err)
	}
	if got := entries(t, dir); !cmp.Equal(got, []string{"keep"}) {
		t.Errorf("dir after the refusal = %q; want only keep", got)
	}
	empty := t.TempDir()
	os.Chmod(empty, 0o755)
	if _, err := backup.Write(context.Background(), src, empty, t0); err != nil {
		t.Fatalf("Write into an empty dir = %v", err)
	}
	assertPrivate(t, empty)
}

// TestRestoreNonEmptyStateDir: a state dir that holds state is refused,
// naming it; --force moves it aside (state files and channel
// directories), never deleting it, and restores.
func TestRestoreNonEmptyStateDir(t *testing.T) {
	ctx := context.Background()
	src, dir := populated(t)
	m, err := backup.Check(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	before := entries(t, src.StateDir)
	_, err = backup.Restore(ctx, src, dir, m, false, t0)
	if !errors.Is(err, backup.ErrNotEmpty) || !strings.Contains(err.Error(), "memory.db") {
		t.Fatalf("Restore over state = %v; want ErrNotEmpty naming memory.db", err)
	}
	if diff := cmp.Diff(before, entries(t, src.StateDir)); diff != "" {
		t.Errorf("state dir changed by a refused restore (-before +after):\n%s", diff)
	}

	// The state changes after the backup: forced, the restore moves the
	// changed state aside and brings back the backup's.
	mem := openMemory(t, src.StateDir)
	remember(t, mem, "drink", "Alice drinks coffee now")
	mem.Close()
	r, err := backup.Restore(ctx, src, dir, m, true, t0)
	if err != nil {
		t.Fatal(err)
	}
	aside := src.StateDir + ".pre-restore-20261204T100000Z"
	partyAside := src.PartyDir + ".pre-restore-20261204T100000Z"
	if diff := cmp.Diff([]string{aside, partyAside}, r.Aside); diff != "" {
		t.Errorf("aside (-want +got):\n%s", diff)
	}
	old := openMemory(t, aside)
	if got := recall(t, old); !strings.Contains(got, "coffee") {
		t.Errorf("memory moved aside = %s; want the later entry kept", got)
	}
	if _, err := os.Stat(filepath.Join(partyAside, session.Segment(lobby), ".channel-key")); err != nil {
		t.Errorf("channel directory moved aside: %v", err)
	}
	restored := openMemory(t, src.StateDir)
	if got := recall(t, restored); !strings.Contains(got, "tea") || strings.Contains(got, "coffee") {
		t.Errorf("restored memory = %s; want the backup's", got)
	}
}

// TestSecBackupNeverFollowsAPlantedLink: a worker that plants links in
// its sessions directory (to a host file, to a directory outside its
// workspace) or a FIFO gets none of them copied: the backup, which a
// restore writes back into the workspace, never carries a host file into
// a guest's reach, and never blocks on the FIFO.
func TestSecBackupNeverFollowsAPlantedLink(t *testing.T) {
	src := layout(t)
	conv := newConversation(t, src, lobby)
	conv.append(t, turn(1))
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "host-secret.jsonl")
	if err := os.WriteFile(secret, []byte("HOST SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"stolen.jsonl":   secret,
		"stolen-dir":     secretDir,
		"relative.jsonl": "../../../../../" + strings.TrimPrefix(secret, "/"),
		"archive-escape": "../../..",
	} {
		if err := os.Symlink(target, filepath.Join(conv.sessions, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := mkfifo(filepath.Join(conv.sessions, "pipe.jsonl")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "backup")
	rep, err := backup.Write(context.Background(), src, dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Manifest.Files {
		if strings.Contains(f.Path, "stolen") || strings.Contains(f.Path, "relative") || strings.Contains(f.Path, "escape") || strings.Contains(f.Path, "pipe") {
			t.Errorf("manifest holds %s", f.Path)
		}
	}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("HOST SECRET")) {
				t.Errorf("%s holds the host's file", p)
			}
		}
		return nil
	})
	if len(rep.Skipped) != 5 {
		t.Errorf("skipped = %q; want the 4 links and the FIFO named", rep.Skipped)
	}
}

// TestBackupNamesUnmountedWorkspaceImage: a hard-bounded workspace whose
// filesystem image is not mounted cannot be read without mounting it
// (which could race serve's own mount): the backup holds everything else
// and names the channel, never passing the empty mount point off as the
// conversation.
func TestBackupNamesUnmountedWorkspaceImage(t *testing.T) {
	src := layout(t)
	conv := newConversation(t, src, lobby)
	conv.append(t, turn(1)) // in the mount point's own directory: not what the worker sees
	root := filepath.Dir(filepath.Dir(conv.sessions))
	if err := os.WriteFile(filepath.Join(root, "workspace.img"), []byte("ext4"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := backup.Write(context.Background(), src, filepath.Join(t.TempDir(), "backup"), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Unread) != 1 || !strings.Contains(rep.Unread[0], root) || !strings.Contains(rep.Unread[0], "not mounted") {
		t.Errorf("unread = %q; want the channel named", rep.Unread)
	}
	if diff := cmp.Diff([]string{"party/" + session.Segment(lobby) + "/.channel-key"}, paths(rep.Manifest)); diff != "" {
		t.Errorf("manifest paths (-want +got):\n%s", diff)
	}
}
