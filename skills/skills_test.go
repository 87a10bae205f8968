package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// skillMD is a valid SKILL.md for name.
func skillMD(name, desc string, tools ...string) string {
	s := fmt.Sprintf("---\nname: %q\ndescription: %q\n", name, desc)
	if len(tools) > 0 {
		s += fmt.Sprintf("tools: [%s]\n", strings.Join(tools, ", "))
	}
	return s + "---\n# " + name + "\n"
}

// writeFile writes body at dir/rel, making the parents.
func writeFile(t *testing.T, dir, rel, body string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, dir string) *Index {
	t.Helper()
	ix, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		want    []Skill
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
		want: []Skill{{Name: "pdf", Description: "Read PDFs."}, {Name: "web", Description: "Fetch pages.", Tools: []string{"web_fetch"}}},
	}, {
		name:  "empty-directory",
		setup: func(*testing.T, string) {},
		want:  []Skill{},
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
			writeFile(t, dir, "big/SKILL.md", skillMD("big", "d")+strings.Repeat("x", MaxFileSize))
		},
		wantErr: rtsandbox.ErrRefused, errText: "larger than 262144 bytes",
	}, {
		name: "SKILL.md-exactly-256KiB",
		setup: func(t *testing.T, dir string) {
			s := skillMD("big", "d")
			writeFile(t, dir, "big/SKILL.md", s+strings.Repeat("x", MaxFileSize-len(s)))
		},
		want: []Skill{{Name: "big", Description: "d"}},
	}, {
		name: "more-than-256-skills",
		setup: func(t *testing.T, dir string) {
			for i := range MaxSkills + 1 {
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
			symlink(t, filepath.Join(out, "x.md"), filepath.Join(dir, "evil", SkillFile))
		},
		wantErr: rtsandbox.ErrRefused, errText: "a symlink is not followed",
	}, {
		name: "SKILL.md-a-directory",
		setup: func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "odd", SkillFile), 0o700); err != nil {
				t.Fatal(err)
			}
		},
		wantErr: rtsandbox.ErrInvalid, errText: "not a regular file",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			ix, err := Load(dir)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v with %q", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, ix.Skills()); d != "" {
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
	ix := mustLoad(t, link)
	if got, err := ix.Read("pdf", ""); err != nil || !strings.Contains(got, "# pdf") {
		t.Fatalf("Read = %q, %v", got, err)
	}
}

// TestRead: §6.10 "[SEC] `read_skill` escape attempts (`..`, symlink out of
// the tree, more than 256 KiB)" and the other read_skill rules of §5.5.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	writeFile(t, outside, "secret.txt", "the host's secret")
	writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "Read PDFs."))
	writeFile(t, dir, "pdf/ref/usage.md", "usage notes")
	writeFile(t, dir, "web/SKILL.md", skillMD("web", "d"))
	writeFile(t, dir, "web/private.md", "web's own notes")
	writeFile(t, dir, "pdf/big.md", strings.Repeat("x", MaxFileSize+1))
	writeFile(t, dir, "pdf/edge.md", strings.Repeat("x", MaxFileSize))
	writeFile(t, dir, "pdf/long.md", strings.Repeat("é", MaxReadChars+5))
	writeFile(t, dir, "pdf/exact.md", strings.Repeat("😀", MaxReadChars/2))
	writeFile(t, dir, "stray.md", "a file of the skills dir, no skill's")
	ix := mustLoad(t, dir)
	// Planted after Load: what a guest-influenced tree could look like.
	symlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(dir, "pdf", "leak.md"))
	symlink(t, outside, filepath.Join(dir, "pdf", "out"))
	symlink(t, "../web/private.md", filepath.Join(dir, "pdf", "sibling.md"))
	symlink(t, "usage.md", filepath.Join(dir, "pdf", "ref", "alias.md"))
	if err := os.Mkdir(filepath.Join(dir, "pdf", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, skill, path string
		want              string
		wantErr           error
		errText           string
	}{
		{name: "default-SKILL.md", skill: "pdf", want: skillMD("pdf", "Read PDFs.")},
		{name: "explicit-SKILL.md", skill: "pdf", path: "SKILL.md", want: skillMD("pdf", "Read PDFs.")},
		{name: "nested-file", skill: "pdf", path: "ref/usage.md", want: "usage notes"},
		{name: "symlink-inside-the-skill", skill: "pdf", path: "ref/alias.md", want: "usage notes"},
		{name: "dot-dot-that-stays-inside", skill: "pdf", path: "ref/../ref/usage.md", want: "usage notes"},
		{name: "exactly-256KiB-read-then-cut", skill: "pdf", path: "edge.md",
			want: strings.Repeat("x", MaxReadChars) + "\n\n" + TruncatedMarker},
		{name: "cut-at-40000-UTF-16-units", skill: "pdf", path: "long.md",
			want: strings.Repeat("é", MaxReadChars) + "\n\n" + TruncatedMarker},
		{name: "surrogate-pairs-exactly-40000-units-not-cut", skill: "pdf", path: "exact.md",
			want: strings.Repeat("😀", MaxReadChars/2)},
		{name: "unknown-skill", skill: "nope", wantErr: rtsandbox.ErrInvalid, errText: `unknown skill "nope"`},
		{name: "SEC-skill-name-dot-dot", skill: "..", wantErr: rtsandbox.ErrInvalid, errText: "unknown skill"},
		{name: "SEC-skill-name-with-slash", skill: "pdf/ref", wantErr: rtsandbox.ErrInvalid, errText: "unknown skill"},
		{name: "missing-file", skill: "pdf", path: "none.md", wantErr: fs.ErrNotExist},
		{name: "a-directory", skill: "pdf", path: "sub", wantErr: rtsandbox.ErrInvalid, errText: "not a regular file"},
		{name: "the-skill-root-itself", skill: "pdf", path: ".", wantErr: rtsandbox.ErrRefused, errText: "resolves outside the skill folder"},
		{name: "SEC-dot-dot-out-of-the-tree", skill: "pdf", path: "../../" + filepath.Base(outside) + "/secret.txt",
			wantErr: rtsandbox.ErrRefused, errText: "resolves outside the skill folder"},
		{name: "SEC-dot-dot-to-the-skills-dir", skill: "pdf", path: "../stray.md", wantErr: rtsandbox.ErrRefused},
		{name: "SEC-dot-dot-to-another-skill", skill: "pdf", path: "../web/private.md", wantErr: rtsandbox.ErrRefused},
		{name: "SEC-absolute-path", skill: "pdf", path: filepath.Join(outside, "secret.txt"),
			wantErr: rtsandbox.ErrInvalid, errText: "must be relative"},
		{name: "SEC-symlink-out-of-the-tree", skill: "pdf", path: "leak.md", wantErr: rtsandbox.ErrRefused},
		{name: "SEC-symlinked-folder-out-of-the-tree", skill: "pdf", path: "out/secret.txt", wantErr: rtsandbox.ErrRefused},
		{name: "SEC-symlink-to-another-skill", skill: "pdf", path: "sibling.md", wantErr: rtsandbox.ErrRefused},
		{name: "SEC-file-over-256KiB", skill: "pdf", path: "big.md", wantErr: rtsandbox.ErrRefused, errText: "larger than 262144 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ix.Read(tc.skill, tc.path)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v with %q", err, tc.wantErr, tc.errText)
				}
				if strings.Contains(got, "secret") {
					t.Fatalf("leaked %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Read = %.80q… (%d bytes), want %.80q… (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
		})
	}
}

// TestReadSwappedForSymlinkAfterLoad: §6.10 "[SEC] read_skill escape
// attempts (symlink out of the tree)": a skill folder or a SKILL.md
// replaced by a symlink out of the tree after Load is refused, since the
// realpaths are checked on every read.
func TestReadSwappedForSymlinkAfterLoad(t *testing.T) {
	for _, tc := range []struct{ name, swap, target, errText string }{
		{name: "SEC-skill-folder", swap: "pdf", target: "", errText: "resolves outside the skills directory"},
		{name: "SEC-SKILL.md", swap: "pdf/SKILL.md", target: SkillFile, errText: "resolves outside the skill folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			outside := t.TempDir()
			writeFile(t, outside, SkillFile, "the host's secret")
			writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d"))
			ix := mustLoad(t, dir)
			p := filepath.Join(dir, tc.swap)
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			symlink(t, filepath.Join(outside, tc.target), p)
			got, err := ix.Read("pdf", "")
			if !errors.Is(err, rtsandbox.ErrRefused) || !strings.Contains(err.Error(), tc.errText) {
				t.Fatalf("Read = %q, %v; want ErrRefused with %q", got, err, tc.errText)
			}
		})
	}
}

func TestGate(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web/SKILL.md", skillMD("web", "d", "web_fetch", "web_search"))
	writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d", "pdf_render"))
	ix := mustLoad(t, dir)
	g := ix.Gate()
	type verdict struct {
		Reason  string
		Blocked bool
	}
	check := func(step string, want map[string]verdict) {
		t.Helper()
		got := map[string]verdict{}
		for tool := range want {
			r, b := g.Blocked(tool)
			got[tool] = verdict{r, b}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", step, d)
		}
	}
	blocked := func(skill, tool string) verdict {
		return verdict{"Read the " + skill + " skill with read_skill first; it sets how " + tool + " is used here.", true}
	}
	check("nothing read", map[string]verdict{
		"web_fetch":  blocked("web", "web_fetch"),
		"web_search": blocked("web", "web_search"),
		"pdf_render": blocked("pdf", "pdf_render"),
		"bash":       {},
	})
	g.MarkRead("web")
	check("web read", map[string]verdict{
		"web_fetch":  {},
		"web_search": {},
		"pdf_render": blocked("pdf", "pdf_render"),
		"bash":       {},
	})
	if r, b := ix.Gate().Blocked("web_fetch"); !b || r == "" {
		t.Errorf("a new gate starts with nothing read; Blocked = %q, %v", r, b)
	}
	g.MarkRead("pdf")
	check("both read", map[string]verdict{"web_fetch": {}, "pdf_render": {}})
}

func TestPromptBlock(t *testing.T) {
	dir := t.TempDir()
	if got := mustLoad(t, dir).PromptBlock(); got != "" {
		t.Fatalf("no skills: PromptBlock = %q, want \"\"", got)
	}
	writeFile(t, dir, "web/SKILL.md", skillMD("web", "Fetch <pages> & \"quote\" 'them'", "web_fetch"))
	writeFile(t, dir, "a&b/SKILL.md", skillMD("a&b", "First."))
	want := promptIntro + "\n\n<available_skills>\n" +
		"<skill><name>a&amp;b</name><description>First.</description></skill>\n" +
		"<skill><name>web</name><description>Fetch &lt;pages&gt; &amp; &#34;quote&#34; &#39;them&#39;</description></skill>\n" +
		"</available_skills>"
	if d := cmp.Diff(want, mustLoad(t, dir).PromptBlock()); d != "" {
		t.Errorf("PromptBlock (-want +got):\n%s", d)
	}
	for _, piece := range []string{"read_skill", "Before answering or calling any other tool"} {
		if !strings.Contains(promptIntro, piece) {
			t.Errorf("the instruction lacks %q", piece)
		}
	}
}
