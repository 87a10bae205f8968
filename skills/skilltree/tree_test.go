package skilltree

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/skilltest"
	"github.com/rtsandbox/rtsandbox/skills"
)

// The helpers of package skilltest, by their short names.
var (
	skillMD   = skilltest.SkillMD
	writeFile = skilltest.WriteFile
	symlink   = skilltest.Symlink
)

func mustLoad(t *testing.T, dir string) *Tree {
	t.Helper()
	tree, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		want    []skills.Skill
		wantErr error  // the kind
		errText string // a piece of the text
	}{{
		name: "sorted-by-name-plain-files-and-empty-folders-skipped",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "web/SKILL.md", skillMD("web", "Fetch pages.", "web_fetch"))
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "Read PDFs."))
			writeFile(t, dir, "README.md", "not a skill")
			writeFile(t, dir, "notes/other.md", "no SKILL.md here")
		},
		want: []skills.Skill{{Name: "pdf", Description: "Read PDFs."}, {Name: "web", Description: "Fetch pages.", Tools: []string{"web_fetch"}}},
	}, {
		name:  "empty-directory",
		setup: func(*testing.T, string) {},
		want:  []skills.Skill{},
	}, {
		name:    "name-differs-from-directory",
		setup:   func(t *testing.T, dir string) { writeFile(t, dir, "pdf/SKILL.md", skillMD("docs", "d")) },
		wantErr: rtsandbox.ErrInvalid, errText: `pdf/SKILL.md: invalid: name "docs" must equal the directory name "pdf"`,
	}, {
		name:    "bad-front-matter-names-the-file",
		setup:   func(t *testing.T, dir string) { writeFile(t, dir, "pdf/SKILL.md", "---\nname: pdf\n---\n") },
		wantErr: rtsandbox.ErrInvalid, errText: "pdf/SKILL.md: invalid: description is missing",
	}, {
		name: "tool-gated-by-two-skills",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "a/SKILL.md", skillMD("a", "d", "web_fetch"))
			writeFile(t, dir, "b/SKILL.md", skillMD("b", "d", "web_fetch"))
		},
		wantErr: rtsandbox.ErrInvalid, errText: `tool "web_fetch" is already gated by skill "a"`,
	}, {
		name: "SKILL.md-over-256KiB",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "big/SKILL.md", skillMD("big", "d")+strings.Repeat("x", skills.MaxFileSize))
		},
		wantErr: rtsandbox.ErrRefused, errText: "larger than 262144 bytes",
	}, {
		name: "SKILL.md-exactly-256KiB",
		setup: func(t *testing.T, dir string) {
			s := skillMD("big", "d")
			writeFile(t, dir, "big/SKILL.md", s+strings.Repeat("x", skills.MaxFileSize-len(s)))
		},
		want: []skills.Skill{{Name: "big", Description: "d"}},
	}, {
		name: "more-than-256-skills",
		setup: func(t *testing.T, dir string) {
			for i := range skills.MaxSkills + 1 {
				n := fmt.Sprintf("s%03d", i)
				writeFile(t, dir, n+"/SKILL.md", skillMD(n, "d"))
			}
		},
		wantErr: rtsandbox.ErrInvalid, errText: "more than 256 skills",
	}, {
		name: "SEC-skill-folder-symlink-refused",
		setup: func(t *testing.T, dir string) {
			out := t.TempDir()
			writeFile(t, out, "SKILL.md", skillMD("evil", "d"))
			symlink(t, out, filepath.Join(dir, "evil"))
		},
		wantErr: rtsandbox.ErrRefused, errText: "a skill folder must not be a symlink",
	}, {
		name: "SEC-symlink-to-a-sibling-folder-refused",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			symlink(t, "pdf", filepath.Join(dir, "pdf2"))
		},
		wantErr: rtsandbox.ErrRefused, errText: "must not be a symlink",
	}, {
		name: "SEC-SKILL.md-symlink-refused",
		setup: func(t *testing.T, dir string) {
			out := t.TempDir()
			writeFile(t, out, "x.md", skillMD("evil", "d"))
			writeFile(t, dir, "evil/notes.md", "")
			symlink(t, filepath.Join(out, "x.md"), filepath.Join(dir, "evil", skills.SkillFile))
		},
		wantErr: rtsandbox.ErrRefused, errText: "a symlink is not followed",
	}, {
		name: "SKILL.md-a-directory",
		setup: func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "odd", skills.SkillFile), 0o700); err != nil {
				t.Fatal(err)
			}
		},
		wantErr: rtsandbox.ErrInvalid, errText: "not a regular file",
	}, {
		// The copy's rules: only folders and regular files, bounded.
		name: "SEC-symlink-out-of-the-tree-in-a-skill-folder-refused",
		setup: func(t *testing.T, dir string) {
			out := t.TempDir()
			writeFile(t, out, "secret.txt", "the host's secret")
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			symlink(t, filepath.Join(out, "secret.txt"), filepath.Join(dir, "pdf", "leak.md"))
		},
		wantErr: rtsandbox.ErrRefused, errText: "pdf/leak.md: refused: a symlink is not followed",
	}, {
		name: "SEC-symlinked-folder-deep-in-a-skill-refused",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			writeFile(t, dir, "pdf/ref/usage.md", "u")
			symlink(t, "/etc", filepath.Join(dir, "pdf", "ref", "etc"))
		},
		wantErr: rtsandbox.ErrRefused, errText: "pdf/ref/etc: refused: a symlink is not followed",
	}, {
		name: "SEC-symlink-that-stays-inside-refused-too",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			writeFile(t, dir, "pdf/usage.md", "u")
			symlink(t, "usage.md", filepath.Join(dir, "pdf", "alias.md"))
		},
		wantErr: rtsandbox.ErrRefused, errText: "a symlink is not followed",
	}, {
		name: "SEC-FIFO-in-a-skill-folder-refused-without-blocking",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			if err := syscall.Mkfifo(filepath.Join(dir, "pdf", "pipe"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		wantErr: rtsandbox.ErrRefused, errText: "pdf/pipe: refused: not a regular file or a folder",
	}, {
		name: "another-file-over-256KiB",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			writeFile(t, dir, "pdf/big.bin", strings.Repeat("x", skills.MaxFileSize+1))
		},
		wantErr: rtsandbox.ErrRefused, errText: "pdf/big.bin: refused: larger than 262144 bytes",
	}, {
		name: "unsafe-file-name",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			writeFile(t, dir, "pdf/a\x01b.md", "x")
		},
		wantErr: rtsandbox.ErrInvalid, errText: "the name is not a safe file name",
	}, {
		name: "more-than-16-levels",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			writeFile(t, dir, "pdf/"+strings.Repeat("d/", MaxTreeDepth-1)+"deep.md", "x")
		},
		wantErr: rtsandbox.ErrInvalid, errText: "more than 16 levels below the skills directory",
	}, {
		name: "exactly-16-levels",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			writeFile(t, dir, "pdf/"+strings.Repeat("d/", MaxTreeDepth-2)+"deep.md", "x")
		},
		want: []skills.Skill{{Name: "pdf", Description: "d"}},
	}, {
		name: "more-than-2048-entries",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			for i := range MaxTreeEntries - 1 { // with pdf/ and SKILL.md, one too many
				writeFile(t, dir, fmt.Sprintf("pdf/f%04d", i), "")
			}
		},
		wantErr: rtsandbox.ErrInvalid, errText: "more than 2048 files and folders",
	}, {
		name: "more-than-16MiB",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			for i := range MaxTreeBytes / skills.MaxFileSize {
				writeFile(t, dir, fmt.Sprintf("pdf/f%02d", i), strings.Repeat("x", skills.MaxFileSize))
			}
		},
		wantErr: rtsandbox.ErrInvalid, errText: "the skill folders hold more than 16777216 bytes",
	}, {
		name: "tool-claim-not-a-tool-name",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "web/SKILL.md", skillMD("web", "d", "\"Web Fetch\""))
		},
		wantErr: rtsandbox.ErrInvalid, errText: `web/SKILL.md: invalid: tools[0] "Web Fetch" must name a host tool`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			tree, err := Load(dir)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v with %q", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, tree.Skills()); d != "" {
				t.Errorf("skills (-want +got):\n%s", d)
			}
		})
	}
}

func TestLoadMissingDirectory(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "none"))
	if !errors.Is(err, rtsandbox.ErrInvalid) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want ErrInvalid and ErrNotExist", err)
	}
}

// TestLoadThroughSymlinkedDir: the skills directory itself may be a
// symlink; the rules apply to its realpath.
func TestLoadThroughSymlinkedDir(t *testing.T) {
	real := t.TempDir()
	writeFile(t, real, "pdf/SKILL.md", skillMD("pdf", "d"))
	link := filepath.Join(t.TempDir(), "skills")
	symlink(t, real, link)
	tree := mustLoad(t, link)
	if want, _ := filepath.EvalSymlinks(real); tree.Dir() != want {
		t.Errorf("Dir = %q, want the realpath %q", tree.Dir(), want)
	}
	if d := cmp.Diff([]skills.Skill{{Name: "pdf", Description: "d"}}, tree.Skills()); d != "" {
		t.Errorf("skills (-want +got):\n%s", d)
	}
}

// TestLoadCopy: the copy holds the skill folders whole, a folder before
// what it holds, and nothing else of the directory.
func TestLoadCopy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
	writeFile(t, dir, "pdf/ref/usage.md", "usage")
	if err := os.Mkdir(filepath.Join(dir, "pdf", "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "web/SKILL.md", skillMD("web", "w", "web_fetch"))
	writeFile(t, dir, "README.md", "not a skill")
	writeFile(t, dir, "notes/other.md", "no SKILL.md here")
	if err := syscall.Mkfifo(filepath.Join(dir, "notes", "pipe"), 0o600); err != nil {
		t.Fatal(err) // outside any skill folder: never read
	}
	got := mustLoad(t, dir).Entries()
	want := []Entry{
		{Path: "pdf", Dir: true},
		{Path: "pdf/SKILL.md", Data: []byte(skillMD("pdf", "d"))},
		{Path: "pdf/empty", Dir: true},
		{Path: "pdf/ref", Dir: true},
		{Path: "pdf/ref/usage.md", Data: []byte("usage")},
		{Path: "web", Dir: true},
		{Path: "web/SKILL.md", Data: []byte(skillMD("web", "w", "web_fetch"))},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("entries (-want +got):\n%s", d)
	}
}

// TestDigest: any change to the copy changes the digest; what is not
// copied does not.
func TestDigest(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
	writeFile(t, dir, "pdf/a.md", "ab")
	base := mustLoad(t, dir).Digest()
	if again := mustLoad(t, dir).Digest(); again != base || len(base) != 32 {
		t.Fatalf("digest %q then %q; want one stable 32-digit digest", base, again)
	}
	changes := []struct {
		name   string
		change func(t *testing.T)
		same   bool
	}{
		{"a-byte-of-SKILL.md", func(t *testing.T) { writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "e")) }, false},
		{"a-byte-of-another-file", func(t *testing.T) { writeFile(t, dir, "pdf/a.md", "ac") }, false},
		{"bytes-moved-between-files", func(t *testing.T) {
			writeFile(t, dir, "pdf/a.md", "a")
			writeFile(t, dir, "pdf/b.md", "c")
		}, false},
		{"an-empty-folder", func(t *testing.T) {
			if err := os.Mkdir(filepath.Join(dir, "pdf", "x"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a-file-outside-the-skills", func(t *testing.T) { writeFile(t, dir, "README.md", "x") }, true},
	}
	seen := map[string]string{base: "base"}
	for _, c := range changes {
		c.change(t)
		got := mustLoad(t, dir).Digest()
		if prev, ok := seen[got]; ok != c.same {
			t.Errorf("after %s: digest %q (seen at %q: %v); want new: %v", c.name, got, prev, ok, !c.same)
		}
		seen[got] = c.name
	}
}

// TestExampleSkills: the sample skill folder of examples/skills keeps
// every rule, and docs/session-mode.md shows its SKILL.md as it is.
func TestExampleSkills(t *testing.T) {
	tree := mustLoad(t, "../../examples/skills")
	skill, err := os.ReadFile("../../examples/skills/web-research/SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	if doc, err := os.ReadFile("../../docs/session-mode.md"); err != nil || !strings.Contains(string(doc), "```markdown\n"+string(skill)+"```") {
		t.Errorf("docs/session-mode.md does not show examples/skills/web-research/SKILL.md as it is (%v)", err)
	}
	want := []skills.Skill{{Name: "web-research", Description: "Researching a question on the web and citing the pages read.",
		Tools: []string{"web_fetch", "docs/search"}}}
	if d := cmp.Diff(want, tree.Skills()); d != "" {
		t.Errorf("example skills (-want +got):\n%s", d)
	}
}
