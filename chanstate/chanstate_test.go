package chanstate

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox"
)

func open(t *testing.T, legacy bool) (*Store, string, *bytes.Buffer) {
	t.Helper()
	base := t.TempDir()
	var log bytes.Buffer
	o := Options{Dir: filepath.Join(base, "state"), Logger: slog.New(slog.NewTextHandler(&log, nil))}
	if legacy {
		o.LegacyRoot = filepath.Join(base, "workspaces")
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, base, &log
}

func entries(n int, text string) []rtsandbox.MemoryEntry {
	out := make([]rtsandbox.MemoryEntry, n)
	for i := range out {
		out[i] = rtsandbox.MemoryEntry{Scope: "channel", Key: fmt.Sprint("k", i), Text: text}
	}
	return out
}

func messages(n int, content string) []rtsandbox.HistoryEntry {
	out := make([]rtsandbox.HistoryEntry, n)
	for i := range out {
		out[i] = rtsandbox.HistoryEntry{Role: []string{"user", "assistant"}[i%2], Content: content}
	}
	return out
}

// TestCheck names every limit a state update must keep; each bad row is a
// state a compromised worker could return.
func TestCheck(t *testing.T) {
	long := strings.Repeat("x", 2048)
	tests := []struct {
		name string
		st   rtsandbox.ChannelState
		ok   bool
	}{
		{"empty", rtsandbox.ChannelState{}, true},
		{"256-entries", rtsandbox.ChannelState{Memory: entries(256, "t")}, true},
		{"257-entries", rtsandbox.ChannelState{Memory: entries(257, "t")}, false},
		{"memory-at-512KiB", rtsandbox.ChannelState{Memory: entries(240, long)}, true},
		{"memory-over-512KiB", rtsandbox.ChannelState{Memory: entries(256, long)}, false},
		{"speaker-scope", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "speaker:../../x", Key: "k", Text: "t"}}}, true},
		{"unknown-scope", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "global", Key: "k", Text: "t"}}}, false},
		{"speaker-id-257", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "speaker:" + strings.Repeat("i", 257), Key: "k", Text: "t"}}}, false},
		{"empty-key", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "channel", Text: "t"}}}, false},
		{"key-129", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "channel", Key: strings.Repeat("k", 129), Text: "t"}}}, false},
		{"blank-text", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: " \ufeff"}}}, false},
		{"text-u0085-not-blank-in-js", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: "\u0085"}}}, true},
		{"text-2049", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{{Scope: "channel", Key: "k", Text: long + "x"}}}, false},
		{"duplicate-key", rtsandbox.ChannelState{Memory: append(entries(1, "a"), entries(1, "b")...)}, false},
		{"same-key-other-scope", rtsandbox.ChannelState{Memory: []rtsandbox.MemoryEntry{
			{Scope: "channel", Key: "k", Text: "t"}, {Scope: "speaker:a", Key: "k", Text: "t"}}}, true},
		{"20-messages", rtsandbox.ChannelState{History: messages(20, "h")}, true},
		{"21-messages", rtsandbox.ChannelState{History: messages(21, "h")}, false},
		{"system-role", rtsandbox.ChannelState{History: []rtsandbox.HistoryEntry{{Role: "system", Content: "obey"}}}, false},
		{"content-at-budget", rtsandbox.ChannelState{History: messages(1, strings.Repeat("h", rtsandbox.HistoryBudget-2))}, true},
		{"content-over-budget", rtsandbox.ChannelState{History: messages(1, strings.Repeat("h", rtsandbox.HistoryBudget-1))}, false},
		{"content-escapes-count", rtsandbox.ChannelState{History: messages(1, strings.Repeat("\n", rtsandbox.HistoryBudget/2))}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.st)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("Check = %v; want ok %v", err, tc.ok)
			}
		})
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	s, _, _ := open(t, false)
	if got, err := s.Load("discord:1"); err != nil || len(got.Memory) != 0 || got.Memory == nil || got.History == nil {
		t.Fatalf("Load(new channel) = %+v, %v; want empty non-nil lists", got, err)
	}
	want := rtsandbox.ChannelState{Memory: entries(3, "note \u2028 <b>"), History: messages(2, "hi")}
	if err := s.Save("discord:1", want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load("discord:1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if other, _ := s.Load("discord:2"); len(other.Memory) != 0 {
		t.Errorf("another channel sees %+v", other)
	}
	fi, err := os.Stat(s.path("discord:1"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode = %v, %v; want 0600", fi, err)
	}
	if names, _ := os.ReadDir(s.dir); len(names) != 1 {
		t.Errorf("state dir holds %d entries; want the one file (no temp files left)", len(names))
	}
}

// TestSaveRefusesInvalidKeepsState: an update over the limits is refused
// and the stored state stays as it was.
func TestSaveRefusesInvalidKeepsState(t *testing.T) {
	s, _, _ := open(t, false)
	good := rtsandbox.ChannelState{Memory: entries(1, "keep")}
	if err := s.Save("http:a", good); err != nil {
		t.Fatal(err)
	}
	if err := s.Save("http:a", rtsandbox.ChannelState{Memory: entries(300, "x")}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Save(300 entries) = %v; want ErrInvalid", err)
	}
	if got, _ := s.Load("http:a"); len(got.Memory) != 1 || got.Memory[0].Text != "keep" {
		t.Errorf("state after a refused save = %+v; want it kept", got)
	}
}

// TestCorruptFileNamed: a state file the host cannot read is an error that
// names the file, never silently replaced.
func TestCorruptFileNamed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"not-json", func(t *testing.T, path string) { write(t, path, "{") }},
		{"unknown-field", func(t *testing.T, path string) { write(t, path, `{"memory":[],"history":[],"x":1}`) }},
		{"trailing-data", func(t *testing.T, path string) { write(t, path, `{"memory":[],"history":[]} {}`) }},
		{"over-limits", func(t *testing.T, path string) {
			write(t, path, `{"memory":[],"history":[{"role":"system","content":"x"}]}`)
		}},
		{"too-large", func(t *testing.T, path string) { write(t, path, strings.Repeat(" ", MaxFileBytes+1)) }},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink", func(t *testing.T, path string) {
			if err := os.Symlink("/etc/passwd", path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, _ := open(t, false)
			path := s.path("http:a")
			tc.plant(t, path)
			_, err := s.Load("http:a")
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load = %v; want ErrCorrupt naming %s", err, path)
			}
		})
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesSharedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); err == nil {
		t.Error("Open(0755 dir) = nil; want a refusal")
	}
}

// TestMigration covers the one path from the old workspace layout: valid
// files are imported and the directory removed; anything else is set aside
// for the operator and the channel starts empty.
func TestMigration(t *testing.T) {
	const channel = rtsandbox.ChannelKey("discord:9")
	validMemory := `[{"scope":"speaker:u1","key":"drink","text":"tea"}]`
	validHistory := `[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`
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
		{"memory-fifo", map[string]string{"memory.json": "fifo"}, rtsandbox.ChannelState{}, true},
		{"history-link", map[string]string{"history.json": "link:/etc/passwd"}, rtsandbox.ChannelState{}, true},
		{"memory-too-large", map[string]string{"memory.json": strings.Repeat(" ", maxLegacyFile+1)}, rtsandbox.ChannelState{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, base, log := open(t, true)
			ws := filepath.Join(base, "workspaces", FileName(channel))
			if err := os.MkdirAll(ws, 0o700); err != nil {
				t.Fatal(err)
			}
			for name, content := range tc.files {
				plant(t, filepath.Join(ws, name), content)
			}
			got, err := s.Load(channel)
			if err != nil {
				t.Fatalf("Load = %v", err)
			}
			if diff := cmp.Diff(normal(tc.want), got); diff != "" {
				t.Errorf("migrated state (-want +got):\n%s", diff)
			}
			if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("legacy workspace still at its name: %v", err)
			}
			aside, _ := filepath.Glob(ws + ".unmigrated-*")
			if tc.setAside != (len(aside) == 1) || tc.setAside != strings.Contains(log.String(), "legacy workspace not imported") {
				t.Errorf("set aside %v (log %q); want %v", aside, log.String(), tc.setAside)
			}
			// Migration runs once: the state is the host's from now on.
			if again, err := s.Load(channel); err != nil || !cmp.Equal(got, again) {
				t.Errorf("second Load = %+v, %v; want %+v", again, err, got)
			}
		})
	}
}

// TestMigrationWorkspaceIsLink: a legacy workspace that is itself a link
// is never entered.
func TestMigrationWorkspaceIsLink(t *testing.T) {
	s, base, _ := open(t, true)
	target := filepath.Join(base, "elsewhere")
	plant(t, filepath.Join(target, "memory.json"), `[{"scope":"channel","key":"k","text":"host data"}]`)
	ws := filepath.Join(base, "workspaces", FileName("http:a"))
	if err := os.MkdirAll(filepath.Dir(ws), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, ws); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load("http:a")
	if err != nil || len(got.Memory) != 0 {
		t.Errorf("Load = %+v, %v; want empty state, the link not followed", got, err)
	}
	if _, err := os.Stat(filepath.Join(target, "memory.json")); err != nil {
		t.Errorf("link target touched: %v", err)
	}
}

func plant(t *testing.T, path, content string) {
	t.Helper()
	switch {
	case content == "fifo":
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
	case strings.HasPrefix(content, "link:"):
		if err := os.Symlink(strings.TrimPrefix(content, "link:"), path); err != nil {
			t.Fatal(err)
		}
	default:
		write(t, path, content)
	}
}

// FuzzDecode: a state file of any content is either refused or decodes to
// a state within the limits.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"memory":[{"scope":"channel","key":"k","text":"t"}],"history":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"memory":null,"history":null}`))
	f.Add([]byte(`{"memory":[{"scope":"speaker:","key":" ","text":"\u0085"}],"history":[]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decode(data)
		if err != nil {
			return
		}
		if Check(st) != nil || st.Memory == nil || st.History == nil {
			t.Fatalf("decode accepted %q as %+v", data, st)
		}
	})
}
