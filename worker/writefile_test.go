package worker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// runWriteFile runs write_file on box with args as the model's arguments.
func runWriteFile(t *testing.T, box *outbox, args map[string]any) (string, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	fields, _ := object(raw)
	return writeFile(box).run(t.Context(), toolInput{raw: raw, fields: fields})
}

// outboxEntries lists the outbox's entries, each with its size (a link's
// own size as Lstat gives it).
func outboxEntries(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		info, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = info.Size()
	}
	return out
}

// sized plants regular files of the given sizes (sparse: cheap at 10 MiB).
func sized(files map[string]int64) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		for name, n := range files {
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(filepath.Join(dir, name), n); err != nil {
				t.Fatal(err)
			}
		}
	}
}

const (
	invalidNameText = "Invalid file name: give a plain file name such as report.csv, without a directory or control characters."
	mib             = 1 << 20
)

// write_file (issue 13, "files out"): what it saves, under which name, and
// everything it refuses with a tool text while the turn goes on.
func TestWriteFile(t *testing.T) {
	ten := map[string]int64{}
	for i := range rtsandbox.MaxReplyFiles {
		ten["f"+strconv.Itoa(i)] = 1
	}
	forty9 := map[string]int64{"a": 10 * mib, "b": 10 * mib, "c": 10 * mib, "d": 10 * mib, "e": 9 * mib}
	long := strings.Repeat("n", rtsandbox.MaxSafeNameLen-4) + ".csv" // 255 units: no room for -2
	tests := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		args    map[string]any
		want    string
		// added is the outbox's entries the call adds, with their sizes.
		added map[string]int64
	}{
		{"a CSV", nil, map[string]any{"name": "report.csv", "content": "a,b\n1,2\n"},
			"Saved report.csv (8 bytes); it will be attached to your reply.", map[string]int64{"report.csv": 8}},
		{"name without an extension kept", nil, map[string]any{"name": "Makefile", "content": "all:\n"},
			"Saved Makefile (5 bytes); it will be attached to your reply.", map[string]int64{"Makefile": 5}},
		{"unusual extension kept", nil, map[string]any{"name": "Notes.TAR.Gz", "content": "x"},
			"Saved Notes.TAR.Gz (1 bytes); it will be attached to your reply.", map[string]int64{"Notes.TAR.Gz": 1}},
		{"non-ASCII name and text", nil, map[string]any{"name": "résumé.md", "content": "é"},
			"Saved résumé.md (2 bytes); it will be attached to your reply.", map[string]int64{"résumé.md": 2}},
		{"collision: stem-2.ext", sized(map[string]int64{"report.csv": 3}), map[string]any{"name": "report.csv", "content": "x"},
			"Saved report-2.csv (1 bytes); it will be attached to your reply.", map[string]int64{"report-2.csv": 1}},
		{"collision: stem-3.ext", sized(map[string]int64{"report.csv": 3, "report-2.csv": 3}), map[string]any{"name": "report.csv", "content": "x"},
			"Saved report-3.csv (1 bytes); it will be attached to your reply.", map[string]int64{"report-3.csv": 1}},
		{"collision without an extension", sized(map[string]int64{"Makefile": 3}), map[string]any{"name": "Makefile", "content": "x"},
			"Saved Makefile-2 (1 bytes); it will be attached to your reply.", map[string]int64{"Makefile-2": 1}},
		{"collision of a dot file", sized(map[string]int64{".env": 3}), map[string]any{"name": ".env", "content": "x"},
			"Saved .env-2 (1 bytes); it will be attached to your reply.", map[string]int64{".env-2": 1}},
		{"collision with no safe name left", sized(map[string]int64{long: 1}), map[string]any{"name": long, "content": "x"},
			"Not saved: no free name is left for " + long + "; choose another name.", nil},
		{"[SEC] traversal ../", nil, map[string]any{"name": "../escape.csv", "content": "x"}, invalidNameText, nil},
		{"[SEC] absolute path", nil, map[string]any{"name": "/etc/passwd", "content": "x"}, invalidNameText, nil},
		{"[SEC] subdirectory", nil, map[string]any{"name": "sub/x.csv", "content": "x"}, invalidNameText, nil},
		{"[SEC] backslash", nil, map[string]any{"name": `..\x.csv`, "content": "x"}, invalidNameText, nil},
		{"[SEC] dot dot", nil, map[string]any{"name": "..", "content": "x"}, invalidNameText, nil},
		{"[SEC] dot", nil, map[string]any{"name": ".", "content": "x"}, invalidNameText, nil},
		{"[SEC] control character", nil, map[string]any{"name": "a\nb.csv", "content": "x"}, invalidNameText, nil},
		{"empty name", nil, map[string]any{"name": "", "content": "x"}, invalidNameText, nil},
		{"name too long", nil, map[string]any{"name": strings.Repeat("n", rtsandbox.MaxSafeNameLen+1), "content": "x"}, invalidNameText, nil},
		{"name not a string", nil, map[string]any{"name": 7, "content": "x"}, invalidNameText, nil},
		{"content missing", nil, map[string]any{"name": "a.txt"}, "Invalid content: give the file's text as a string.", nil},
		{"content not a string", nil, map[string]any{"name": "a.txt", "content": []int{1}}, "Invalid content: give the file's text as a string.", nil},
		{"empty content", nil, map[string]any{"name": "a.txt", "content": ""}, "Nothing saved: content is empty.", nil},
		{"10 MiB exactly", nil, map[string]any{"name": "big.txt", "content": strings.Repeat("x", 10*mib)},
			"Saved big.txt (10485760 bytes); it will be attached to your reply.", map[string]int64{"big.txt": 10 * mib}},
		{"oversize: one byte over 10 MiB", nil, map[string]any{"name": "big.txt", "content": strings.Repeat("x", 10*mib+1)},
			"Not saved: a reply file holds at most 10 MiB (10485760 bytes); this one is 10485761 bytes.", nil},
		{"11th file", sized(ten), map[string]any{"name": "one-more.txt", "content": "x"},
			"Not saved: this reply already holds 10 files, the most it can carry.", nil},
		{"total budget: up to 50 MiB", sized(forty9), map[string]any{"name": "last.txt", "content": strings.Repeat("x", mib)},
			"Saved last.txt (1048576 bytes); it will be attached to your reply.", map[string]int64{"last.txt": mib}},
		{"total budget: one byte past 50 MiB", sized(forty9), map[string]any{"name": "last.txt", "content": strings.Repeat("x", mib+1)},
			"Not saved: the reply's files would pass 50 MiB in all (51380224 bytes used, 1048577 more asked).", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			box := newTestOutbox(t, nil)
			if tc.prepare != nil {
				tc.prepare(t, box.dir)
			}
			before := outboxEntries(t, box.dir)
			got, err := runWriteFile(t, box, tc.args)
			if err != nil {
				t.Fatalf("write_file: %v", err)
			}
			if got != tc.want {
				t.Errorf("write_file = %q; want %q", got, tc.want)
			}
			after := outboxEntries(t, box.dir)
			for name := range before {
				delete(after, name)
			}
			if diff := cmp.Diff(tc.added, after, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("outbox entries added (-want +got):\n%s", diff)
			}
			for name := range tc.added {
				if data, _ := os.ReadFile(filepath.Join(box.dir, name)); string(data) != tc.args["content"] {
					t.Errorf("%s holds %.40q; want the content", name, data)
				}
			}
		})
	}
}

// [SEC] A link planted in the outbox under the name write_file is given is
// never written through, dangling or not: the file is saved under the next
// name and the link's target is left as it was (or absent).
func TestSecWriteFilePlantedSymlink(t *testing.T) {
	for _, dangling := range []bool{false, true} {
		t.Run("dangling="+strconv.FormatBool(dangling), func(t *testing.T) {
			box := newTestOutbox(t, nil)
			target := filepath.Join(t.TempDir(), "owner-secret")
			if !dangling {
				if err := os.WriteFile(target, []byte("owner"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(target, filepath.Join(box.dir, "report.csv")); err != nil {
				t.Fatal(err)
			}
			got, err := runWriteFile(t, box, map[string]any{"name": "report.csv", "content": "a,b\n"})
			if want := "Saved report-2.csv (4 bytes); it will be attached to your reply."; err != nil || got != want {
				t.Errorf("write_file = %q, %v; want %q", got, err, want)
			}
			data, err := os.ReadFile(target)
			switch {
			case dangling && !os.IsNotExist(err):
				t.Errorf("the dangling link's target was created: %q, %v", data, err)
			case !dangling && string(data) != "owner":
				t.Errorf("the link's target changed: %q, %v", data, err)
			}
		})
	}
}

// [SEC] An outbox directory replaced by a link is not written through:
// the call fails (the turn's log has why) and nothing lands outside.
func TestSecWriteFileOutboxSymlink(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "outbox"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "outbox", "t1")); err != nil {
		t.Fatal(err)
	}
	box, err := createOutbox(ws, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := runWriteFile(t, box, map[string]any{"name": "x.txt", "content": "x"}); err == nil {
		t.Errorf("write_file through a linked outbox = %q; want an error", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("files written outside: %v", entries)
	}
}

// write_file is a base tool of every session turn, next to
// read_attachment; the sealed worker, which has no outbox, has none.
func TestWriteFileOnlyInSession(t *testing.T) {
	sealed := newSealedTools(wire.Turn{}, nil, nil)
	if sealed.has(writeFileSpec.Name) {
		t.Error("the sealed worker has write_file")
	}
}

// Issue 21 item 3: a turn's own files keep within the room the host
// measured for it (wire.SessionRoom), so they never take the reserve
// the channel's later turns need. A file past the room is the model's
// answer (noRoomText), nothing is written, and a refused file counts
// nothing; without a room nothing is bounded.
func TestWriteFileKeepsTheTurnRoom(t *testing.T) {
	tests := []struct {
		name  string
		room  *wire.SessionRoom
		sizes []int
		want  []string
	}{
		{"no room given: unbounded", nil, []int{mib, mib}, []string{"saved", "saved"}},
		{"bytes", &wire.SessionRoom{Bytes: 4 * 4096, Files: 10}, []int{4096, 4097, 1}, []string{"saved", noRoomText, "saved"}},
		{"entries", &wire.SessionRoom{Bytes: mib, Files: 1}, []int{1, 1}, []string{"saved", noRoomText}},
		{"none", &wire.SessionRoom{}, []int{1}, []string{noRoomText}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			box := newTestOutbox(t, nil)
			box.bound(tt.room)
			var got []string
			for i, n := range tt.sizes {
				text, err := runWriteFile(t, box, map[string]any{"name": "f" + strconv.Itoa(i), "content": strings.Repeat("x", n)})
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(text, "Saved ") {
					text = "saved"
				}
				got = append(got, text)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("answers (-want +got):\n%s", diff)
			}
			saved := 0
			for _, g := range got {
				if g == "saved" {
					saved++
				}
			}
			if n := len(outboxEntries(t, box.dir)); n != saved {
				t.Errorf("%d files in the outbox; want %d", n, saved)
			}
		})
	}
}
