package memstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

// legacyRoots are the two older layouts of a test store's state dir.
type legacyRoots struct{ stateFiles, workspaces string }

func newRoots(t *testing.T) legacyRoots {
	base := t.TempDir()
	return legacyRoots{stateFiles: filepath.Join(base, "channel-state"), workspaces: filepath.Join(base, "workspaces")}
}

func (r legacyRoots) options(o *Options) {
	o.ChannelStateDir, o.LegacyRoot = r.stateFiles, r.workspaces
}

// plantFile writes content at path: "fifo" plants a FIFO, "link:<target>"
// a symbolic link, anything else a 0600 file.
func plantFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	switch {
	case content == "fifo":
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
	case strings.HasPrefix(content, "link:"):
		symlink(t, strings.TrimPrefix(content, "link:"), path)
	default:
		writeFile(t, path, content, 0o600)
	}
}

const (
	validMemory  = `[{"scope":"speaker:u1","key":"drink","text":"tea"}]`
	validHistory = `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`
)

// TestMigrationWorkspaces is the one path from the oldest layout (the
// guest-written per-channel workspace): valid files are imported and the
// directory removed; anything else is set aside for the operator, not
// followed, and the channel starts empty. (chanstate's TestMigration,
// moved to the import at Open.)
func TestMigrationWorkspaces(t *testing.T) {
	const channel = rtsandbox.ChannelKey("discord:9")
	tests := []struct {
		name     string
		files    map[string]string // name → content; "fifo" and "link:" plant those
		want     rtsandbox.ChannelState
		setAside bool
	}{
		{"both-files", map[string]string{"memory.json": validMemory, "history.json": validHistory}, rtsandbox.ChannelState{
			Memory:  []rtsandbox.MemoryEntry{{Scope: "speaker:u1", Key: "drink", Text: "tea"}},
			History: []rtsandbox.HistoryEntry{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}},
		}, false},
		{"memory-only", map[string]string{"memory.json": validMemory}, rtsandbox.ChannelState{
			Memory: []rtsandbox.MemoryEntry{{Scope: "speaker:u1", Key: "drink", Text: "tea"}},
		}, false},
		{"empty-dir", map[string]string{}, rtsandbox.ChannelState{}, false},
		{"memory-not-json", map[string]string{"memory.json": "[", "history.json": validHistory}, rtsandbox.ChannelState{}, true},
		{"history-over-limits", map[string]string{"history.json": `[{"role":"system","content":"x"}]`}, rtsandbox.ChannelState{}, true},
		{"memory-257-entries", map[string]string{"memory.json": "[" + strings.Repeat(`{"scope":"channel","key":"k","text":"t"},`, 256) +
			`{"scope":"channel","key":"k","text":"t"}]`}, rtsandbox.ChannelState{}, true},
		// [SEC] a planted FIFO, link or oversize file is set aside, never
		// followed or waited on.
		{"memory-fifo", map[string]string{"memory.json": "fifo"}, rtsandbox.ChannelState{}, true},
		{"history-link", map[string]string{"history.json": "link:/etc/passwd"}, rtsandbox.ChannelState{}, true},
		{"memory-too-large", map[string]string{"memory.json": strings.Repeat(" ", maxLegacyFile+1)}, rtsandbox.ChannelState{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots := newRoots(t)
			ws := filepath.Join(roots.workspaces, ChannelID(channel))
			if err := os.MkdirAll(ws, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, content := range tc.files {
				plantFile(t, filepath.Join(ws, name), content)
			}
			s, log := testStore(t, roots.options)
			got := load(t, s, channel)
			if diff := cmp.Diff(normal(tc.want), got); diff != "" {
				t.Errorf("migrated state (-want +got):\n%s", diff)
			}
			assertMigrated(t, ws, log.String(), tc.setAside)
		})
	}
}

// TestMigrationStateFiles: the previous version's host-written state files
// are imported the same way, read as untrusted input: a file that does
// not parse strictly, breaks the limits, is not a regular file of the
// service or is too large is set aside.
func TestMigrationStateFiles(t *testing.T) {
	const channel = rtsandbox.ChannelKey("http:a")
	valid := `{"memory":` + validMemory + `,"history":` + validHistory + `}`
	tests := []struct {
		name     string
		content  string
		want     rtsandbox.ChannelState
		setAside bool
	}{
		{"valid", valid, rtsandbox.ChannelState{
			Memory:  []rtsandbox.MemoryEntry{{Scope: "speaker:u1", Key: "drink", Text: "tea"}},
			History: []rtsandbox.HistoryEntry{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}},
		}, false},
		{"null-lists", `{"memory":null,"history":null}`, rtsandbox.ChannelState{}, false},
		{"not-json", "{", rtsandbox.ChannelState{}, true},
		{"unknown-field", `{"memory":[],"history":[],"x":1}`, rtsandbox.ChannelState{}, true},
		{"trailing-data", `{"memory":[],"history":[]} {}`, rtsandbox.ChannelState{}, true},
		{"over-limits", `{"memory":[],"history":[{"role":"system","content":"x"}]}`, rtsandbox.ChannelState{}, true},
		{"other-owner", valid, rtsandbox.ChannelState{}, true},
		{"too-large", strings.Repeat(" ", maxStateFile+1), rtsandbox.ChannelState{}, true},
		{"fifo", "fifo", rtsandbox.ChannelState{}, true},
		{"symlink", "link:/etc/passwd", rtsandbox.ChannelState{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			roots := newRoots(t)
			path := filepath.Join(roots.stateFiles, ChannelID(channel)+".json")
			plantFile(t, path, tc.content)
			if tc.name == "other-owner" {
				if os.Geteuid() != 0 {
					t.Skip("changing a file's owner needs root")
				}
				if err := os.Chown(path, 4242, 4242); err != nil {
					t.Fatal(err)
				}
			}
			s, log := testStore(t, roots.options)
			if diff := cmp.Diff(normal(tc.want), load(t, s, channel)); diff != "" {
				t.Errorf("migrated state (-want +got):\n%s", diff)
			}
			assertMigrated(t, path, log.String(), tc.setAside)
			if _, err := os.Stat("/etc/passwd"); err != nil && tc.name == "symlink" {
				t.Errorf("link target touched: %v", err)
			}
		})
	}
}

// assertMigrated checks that nothing is left at path, that a set-aside
// copy is beside it exactly when the import failed, named in a warning,
// and that an emptied directory was removed.
func assertMigrated(t *testing.T, path, log string, setAside bool) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still at its name: %v", path, err)
	}
	aside, _ := filepath.Glob(path + ".unmigrated-*")
	warned := strings.Contains(log, "channel state not imported; set aside")
	if setAside != (len(aside) == 1) || setAside != warned {
		t.Errorf("set aside %v (warned %v); want %v; log:\n%s", aside, warned, setAside, log)
	}
	if _, err := os.Lstat(filepath.Dir(path)); !setAside && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("emptied directory %s not removed: %v", filepath.Dir(path), err)
	}
}

// TestMigrationWorkspaceIsLink: a legacy workspace that is itself a link
// is never entered; the link is set aside, its target untouched.
func TestMigrationWorkspaceIsLink(t *testing.T) {
	roots := newRoots(t)
	target := filepath.Join(t.TempDir(), "elsewhere")
	plantFile(t, filepath.Join(target, "memory.json"), `[{"scope":"channel","key":"k","text":"host data"}]`)
	ws := filepath.Join(roots.workspaces, ChannelID("http:a"))
	if err := os.MkdirAll(roots.workspaces, 0o700); err != nil {
		t.Fatal(err)
	}
	symlink(t, target, ws)
	s, log := testStore(t, roots.options)
	if got := load(t, s, "http:a"); len(got.Memory) != 0 {
		t.Errorf("Load = %+v; want empty state, the link not followed", got)
	}
	if _, err := os.Stat(filepath.Join(target, "memory.json")); err != nil {
		t.Errorf("link target touched: %v", err)
	}
	assertMigrated(t, ws, log.String(), true)
}

// TestMigrationRunsOnce: a channel is imported once; what the database
// holds is never replaced by an older layout found later (a state file
// after its workspace, a copy restored after the import): that is set
// aside. Names that are not channel ids are left alone.
func TestMigrationRunsOnce(t *testing.T) {
	const channel = rtsandbox.ChannelKey("discord:5")
	roots := newRoots(t)
	id := ChannelID(channel)
	plantFile(t, filepath.Join(roots.stateFiles, id+".json"), `{"memory":[{"scope":"channel","key":"from","text":"state file"}],"history":[]}`)
	plantFile(t, filepath.Join(roots.workspaces, id, "memory.json"), `[{"scope":"channel","key":"from","text":"workspace"}]`)
	plantFile(t, filepath.Join(roots.stateFiles, "notes.txt"), "operator's")
	plantFile(t, filepath.Join(roots.stateFiles, strings.ToUpper(id)+".json"), "{}")
	s, log := testStore(t, roots.options)
	want := []rtsandbox.MemoryEntry{{Scope: "channel", Key: "from", Text: "state file"}}
	if diff := cmp.Diff(want, load(t, s, channel).Memory); diff != "" {
		t.Errorf("memory (-want +got):\n%s", diff)
	}
	aside, _ := filepath.Glob(filepath.Join(roots.workspaces, id+".unmigrated-*"))
	if len(aside) != 1 || !strings.Contains(log.String(), "already holds this channel") {
		t.Errorf("superseded workspace: set aside %v; log:\n%s", aside, log.String())
	}
	for _, name := range []string{"notes.txt", strings.ToUpper(id) + ".json"} {
		if _, err := os.Stat(filepath.Join(roots.stateFiles, name)); err != nil {
			t.Errorf("%s: %v; want it left alone", name, err)
		}
	}
	// A copy restored after the import, then a restart.
	mustCall(t, s, bind(channel, alice), "memory_set", `{"scope":"channel","key":"later","text":"kept"}`)
	plantFile(t, filepath.Join(roots.stateFiles, id+".json"), `{"memory":[],"history":[]}`)
	again, err := Open(context.Background(), Options{Path: s.Path(), ChannelStateDir: roots.stateFiles, LegacyRoot: roots.workspaces})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := load(t, again, channel).Memory; len(got) != 2 {
		t.Errorf("after a restored copy: %+v; want the database's two entries", got)
	}
	if aside, _ := filepath.Glob(filepath.Join(roots.stateFiles, id+".json.unmigrated-*")); len(aside) != 1 {
		t.Errorf("restored copy set aside: %v", aside)
	}
}

// TestMigratedSpeakerEntriesClaimed: imported speaker entries name no
// principal; the speaker sees them in both modes, and the speaker's first
// change makes them its principal's.
func TestMigratedSpeakerEntriesClaimed(t *testing.T) {
	roots := newRoots(t)
	plantFile(t, filepath.Join(roots.workspaces, ChannelID(chanA), "memory.json"),
		`[{"scope":"speaker:alice","key":"drink","text":"tea"},{"scope":"speaker:bob","key":"pet","text":"cat"}]`)
	s, _ := testStore(t, roots.options)
	runSteps(t, s, []step{
		{bind(chanA, alice), "memory_get", `{"scope":"speaker"}`, `[{"key":"drink","text":"tea"}]`, nil},
		{bind(chanA, rtsandbox.Speaker{ID: "alice", PrincipalID: "http:alice"}), "memory_get", `{"scope":"speaker"}`, `[{"key":"drink","text":"tea"}]`, nil},
		{bind(chanA, alice), "memory_set", `{"scope":"speaker","key":"city","text":"Oslo"}`, "Saved.", nil},
		{bind(chanA, rtsandbox.Speaker{ID: "alice", PrincipalID: "http:alice"}), "memory_get", `{"scope":"speaker"}`, "", ErrOwner},
		{bind(chanA, alice), "memory_get", `{"scope":"speaker"}`, `[{"key":"drink","text":"tea"},{"key":"city","text":"Oslo"}]`, nil},
		{bind(chanA, bob), "memory_get", `{"scope":"speaker"}`, `[{"key":"pet","text":"cat"}]`, nil},
	})
}

// FuzzDecodeStateFile: a state file of any content is either refused or
// decodes to a state within the limits.
func FuzzDecodeStateFile(f *testing.F) {
	f.Add([]byte(`{"memory":[{"scope":"channel","key":"k","text":"t"}],"history":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"memory":null,"history":null}`))
	f.Add([]byte(`{"memory":[{"scope":"speaker:","key":" ","text":"\u0085"}],"history":[]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeStateFile(data)
		if err != nil {
			return
		}
		if Check(st) != nil {
			t.Fatalf("decodeStateFile accepted %q as %+v", data, st)
		}
	})
}

// TestMigrationRootIsLink: an older layout's directory that is a link is
// never entered, so nothing where it points is read or removed.
func TestMigrationRootIsLink(t *testing.T) {
	roots := newRoots(t)
	target := filepath.Join(t.TempDir(), "elsewhere")
	ws := filepath.Join(target, ChannelID(chanA))
	plantFile(t, filepath.Join(ws, "memory.json"), `[{"scope":"channel","key":"k","text":"elsewhere"}]`)
	symlink(t, target, roots.workspaces)
	s, log := testStore(t, roots.options)
	if got := load(t, s, chanA); len(got.Memory) != 0 {
		t.Errorf("Load = %+v; want nothing read through the link", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "memory.json")); err != nil {
		t.Errorf("link target touched: %v", err)
	}
	if !strings.Contains(log.String(), "not a directory; left alone") {
		t.Errorf("no warning; log:\n%s", log.String())
	}
}
