package console_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/syncbuf"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/console"
)

// Reply files are listed after the text, one line each with name and
// size; with FilesDir they are written there as new files (0600), under
// "<n>-name" when the name is taken, never over an existing file or
// through a link planted under the name.
func TestChatShowsAndSavesReplyFiles(t *testing.T) {
	files := []rtsandbox.File{{Name: "report.csv", Data: []byte("a,b\n")}, {Name: "x.png", Data: []byte{1, 2, 3}}}
	tests := []struct {
		name    string
		chunk   string
		save    bool
		prepare func(t *testing.T, dir string)
		want    string
		wantDir map[string]string // name → content
	}{
		{
			name: "listed-only", chunk: "Done.",
			want: "agent> Done.\nfile> report.csv (4 bytes)\nfile> x.png (3 bytes)\n",
		},
		{
			name: "files-without-text", chunk: "",
			want: "file> report.csv (4 bytes)\nfile> x.png (3 bytes)\n",
		},
		{
			name: "saved", chunk: "Done.", save: true,
			want:    "agent> Done.\nfile> report.csv (4 bytes), saved as report.csv\nfile> x.png (3 bytes), saved as x.png\n",
			wantDir: map[string]string{"report.csv": "a,b\n", "x.png": "\x01\x02\x03"},
		},
		{
			name: "name-taken-saved-aside", chunk: "Done.", save: true,
			prepare: func(t *testing.T, dir string) { write(t, filepath.Join(dir, "report.csv"), "old") },
			want:    "agent> Done.\nfile> report.csv (4 bytes), saved as 2-report.csv\nfile> x.png (3 bytes), saved as x.png\n",
			wantDir: map[string]string{"report.csv": "old", "2-report.csv": "a,b\n", "x.png": "\x01\x02\x03"},
		},
		{
			// [SEC] A link planted under the name is not followed.
			name: "sec-planted-link-not-followed", chunk: "Done.", save: true,
			prepare: func(t *testing.T, dir string) {
				outside := filepath.Join(t.TempDir(), "outside")
				write(t, outside, "host data")
				if err := os.Symlink(outside, filepath.Join(dir, "x.png")); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if b, _ := os.ReadFile(outside); string(b) != "host data" {
						t.Errorf("the outside file became %q", b)
					}
				})
			},
			want:    "agent> Done.\nfile> report.csv (4 bytes), saved as report.csv\nfile> x.png (3 bytes), saved as 2-x.png\n",
			wantDir: map[string]string{"report.csv": "a,b\n", "2-x.png": "\x01\x02\x03", "x.png": "host data"},
		},
		{
			name: "missing-dir-not-saved", chunk: "Done.", save: true,
			prepare: func(t *testing.T, dir string) { os.Remove(dir) },
			want:    "agent> Done.\nfile> report.csv (4 bytes), not saved (see the log)\nfile> x.png (3 bytes), not saved (see the log)\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := &syncbuf.Buffer{}
			c := &console.Chat{Channel: "console:local", Out: out}
			dir := t.TempDir()
			if tt.save {
				c.FilesDir = dir
			}
			if tt.prepare != nil {
				tt.prepare(t, dir)
			}
			d := router.Delivery{Channel: "console:local", InReplyTo: "1", Kind: router.KindReply, Chunk: tt.chunk, Files: files}
			if err := c.Deliver(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tt.want {
				t.Errorf("output = %q; want %q", got, tt.want)
			}
			if tt.wantDir == nil {
				return
			}
			got := map[string]string{}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				got[e.Name()] = string(b)
				if info, _ := os.Lstat(filepath.Join(dir, e.Name())); info.Mode().IsRegular() && e.Name() != "report.csv" && info.Mode().Perm() != 0o600 {
					t.Errorf("%s has mode %v; want 0600", e.Name(), info.Mode().Perm())
				}
			}
			if diff := cmp.Diff(tt.wantDir, got); diff != "" {
				t.Errorf("files dir (-want +got):\n%s", diff)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
