package skills

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/skilltest"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The helpers of package skilltest, by their short names.
var (
	skillMD   = skilltest.SkillMD
	writeFile = skilltest.WriteFile
	symlink   = skilltest.Symlink
)

// mustNew writes a SKILL.md for each skill under dir and indexes them.
func mustNew(t *testing.T, dir string, list ...Skill) *Index {
	t.Helper()
	for _, s := range list {
		if _, err := os.Lstat(filepath.Join(dir, s.Name, SkillFile)); err != nil {
			writeFile(t, dir, s.Name+"/"+SkillFile, skillMD(s.Name, s.Description, s.Tools...))
		}
	}
	ix, err := New(dir, list)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// checkCase is one index and what Check says of it.
type checkCase struct {
	name    string
	list    []Skill
	skill   string // the skill Check names
	errText string // a piece of the error text; "" for success
}

// checkCases are the index rules of Check; they also seed FuzzCheck.
var checkCases = []checkCase{
	{name: "empty", list: nil},
	{name: "two-skills-with-tools", list: []Skill{
		{Name: "web", Description: "d", Tools: []string{"web_fetch", "docs/search-v2"}},
		{Name: "a&b", Description: "First."},
	}},
	{name: "name-empty", list: []Skill{{Name: "", Description: "d"}}, errText: `name "" is not a safe folder name`},
	{name: "SEC-name-dot-dot", list: []Skill{{Name: "..", Description: "d"}}, skill: "..", errText: "not a safe folder name"},
	{name: "SEC-name-with-slash", list: []Skill{{Name: "a/b", Description: "d"}}, skill: "a/b", errText: "not a safe folder name"},
	{name: "SEC-name-with-backslash", list: []Skill{{Name: `a\b`, Description: "d"}}, skill: `a\b`, errText: "not a safe folder name"},
	{name: "name-with-control", list: []Skill{{Name: "a\nb", Description: "d"}}, skill: "a\nb", errText: "not a safe folder name"},
	{name: "name-twice", list: []Skill{{Name: "a", Description: "d"}, {Name: "a", Description: "e"}}, skill: "a", errText: `name "a" is used twice`},
	{name: "description-empty", list: []Skill{{Name: "a"}}, skill: "a", errText: "description must not be empty"},
	{name: "description-over-64KiB", list: []Skill{{Name: "a", Description: strings.Repeat("x", MaxFrontMatter+1)}}, skill: "a",
		errText: "description is larger than 65536 bytes"},
	{name: "tool-empty", list: []Skill{{Name: "a", Description: "d", Tools: []string{""}}}, skill: "a", errText: `tools[0] "" must name a host tool`},
	{name: "tool-not-a-tool-name", list: []Skill{{Name: "a", Description: "d", Tools: []string{"x", "Web Fetch"}}}, skill: "a",
		errText: `tools[1] "Web Fetch" must name a host tool (web_fetch) or an MCP tool (<server>/<tool>)`},
	{name: "mcp-tool-without-server", list: []Skill{{Name: "a", Description: "d", Tools: []string{"/search"}}}, skill: "a", errText: "must name a host tool"},
	{name: "mcp-tool-two-slashes", list: []Skill{{Name: "a", Description: "d", Tools: []string{"docs/a/b"}}}, skill: "a", errText: "must name a host tool"},
	{name: "tool-repeated", list: []Skill{{Name: "a", Description: "d", Tools: []string{"x", "x"}}}, skill: "a", errText: `tools[1] repeats "x"`},
	{name: "tool-gated-by-two-skills", list: []Skill{
		{Name: "a", Description: "d", Tools: []string{"web_fetch"}},
		{Name: "b", Description: "d", Tools: []string{"web_fetch"}},
	}, skill: "b", errText: `tool "web_fetch" is already gated by skill "a"`},
}

func TestCheck(t *testing.T) {
	many := make([]Skill, MaxSkills+1)
	for i := range many {
		many[i] = Skill{Name: fmt.Sprintf("s%03d", i), Description: "d"}
	}
	big := func(n int) []Skill { // n bytes of names and descriptions in all
		half := MaxFrontMatter / 2
		return []Skill{{Name: "a", Description: strings.Repeat("x", half)}, {Name: "b", Description: strings.Repeat("y", n-2-half)}}
	}
	cases := append(slices.Clone(checkCases),
		checkCase{name: "exactly-256-skills", list: many[:MaxSkills]},
		checkCase{name: "more-than-256-skills", list: many, errText: "more than 256 skills"},
		checkCase{name: "index-of-exactly-64KiB", list: big(MaxIndexBytes)},
		checkCase{name: "index-over-64KiB", list: big(MaxIndexBytes + 1), skill: "b", errText: "hold more than 65536 bytes"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			skill, err := Check(tc.list)
			if tc.errText == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, rtsandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.errText) || skill != tc.skill {
				t.Fatalf("Check = %q, %v; want %q and ErrInvalid with %q", skill, err, tc.skill, tc.errText)
			}
		})
	}
}

// FuzzCheck: Check never panics, classifies every error, and what it
// accepts keeps the rules New and Gate rely on.
func FuzzCheck(f *testing.F) {
	for _, tc := range checkCases {
		for _, s := range tc.list {
			f.Add(s.Name, s.Description, strings.Join(s.Tools, ","))
		}
	}
	f.Fuzz(func(t *testing.T, name, desc, tools string) {
		s := Skill{Name: name, Description: desc}
		if tools != "" {
			s.Tools = strings.Split(tools, ",")
		}
		if _, err := Check([]Skill{s}); err != nil {
			if !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if !wire.ValidSafeName(name) || desc == "" {
			t.Fatalf("accepted %+v", s)
		}
		for _, tool := range s.Tools {
			if !ValidToolClaim(tool) {
				t.Fatalf("accepted tool %q", tool)
			}
		}
	})
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		list    []Skill
		wantErr error
		errText string
	}{{
		name:  "sorted-by-name",
		setup: func(*testing.T, string) {},
		list:  []Skill{{Name: "web", Description: "d"}, {Name: "pdf", Description: "d"}},
	}, {
		name:    "breaks-a-rule",
		setup:   func(*testing.T, string) {},
		list:    []Skill{{Name: "a", Description: ""}},
		wantErr: rtsandbox.ErrInvalid, errText: `skill "a": invalid: description must not be empty`,
	}, {
		name:    "folder-missing",
		setup:   func(t *testing.T, dir string) { writeFile(t, dir, "pdf/SKILL.md", skillMD("pdf", "d")) },
		list:    []Skill{{Name: "pdf", Description: "d"}, {Name: "web", Description: "d"}},
		wantErr: fs.ErrNotExist,
	}, {
		name: "SKILL.md-missing",
		setup: func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "pdf"), 0o700); err != nil {
				t.Fatal(err)
			}
		},
		list:    []Skill{{Name: "pdf", Description: "d"}},
		wantErr: rtsandbox.ErrInvalid, errText: "no regular SKILL.md",
	}, {
		name: "SEC-SKILL.md-a-symlink",
		setup: func(t *testing.T, dir string) {
			writeFile(t, dir, "pdf/real.md", skillMD("pdf", "d"))
			symlink(t, "real.md", filepath.Join(dir, "pdf", SkillFile))
		},
		list:    []Skill{{Name: "pdf", Description: "d"}},
		wantErr: rtsandbox.ErrInvalid, errText: "no regular SKILL.md",
	}, {
		name: "SEC-skill-folder-resolves-outside",
		setup: func(t *testing.T, dir string) {
			out := t.TempDir()
			writeFile(t, out, SkillFile, skillMD("pdf", "d"))
			symlink(t, out, filepath.Join(dir, "pdf"))
		},
		list:    []Skill{{Name: "pdf", Description: "d"}},
		wantErr: rtsandbox.ErrRefused, errText: "resolves outside the skills directory",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			if tc.wantErr == nil {
				for _, s := range tc.list {
					writeFile(t, dir, s.Name+"/"+SkillFile, skillMD(s.Name, s.Description))
				}
			}
			ix, err := New(dir, tc.list)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v with %q", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := slices.SortedFunc(slices.Values(tc.list), func(a, b Skill) int { return strings.Compare(a.Name, b.Name) })
			if d := cmp.Diff(want, ix.Skills()); d != "" {
				t.Errorf("skills (-want +got):\n%s", d)
			}
		})
	}
}

func TestNewMissingDirectory(t *testing.T) {
	_, err := New(filepath.Join(t.TempDir(), "none"), nil)
	if !errors.Is(err, rtsandbox.ErrInvalid) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want ErrInvalid and ErrNotExist", err)
	}
}

// TestNewThroughSymlinkedDir: the skills directory itself may be a
// symlink; the rules apply to its realpath.
func TestNewThroughSymlinkedDir(t *testing.T) {
	real := t.TempDir()
	writeFile(t, real, "pdf/SKILL.md", skillMD("pdf", "d"))
	link := filepath.Join(t.TempDir(), "skills")
	symlink(t, real, link)
	ix := mustNew(t, link, Skill{Name: "pdf", Description: "d"})
	if got, err := ix.Read("pdf", ""); err != nil || !strings.Contains(got, "# pdf") {
		t.Fatalf("Read = %q, %v", got, err)
	}
}

// TestRead: the reference's test "[SEC] `read_skill` escape attempts (`..`, symlink out of
// the tree, more than 256 KiB)" and the other read_skill rules of docs/session.md, "Skills".
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
	ix := mustNew(t, dir, Skill{Name: "pdf", Description: "Read PDFs."}, Skill{Name: "web", Description: "d"})
	// Planted after New: what a guest-influenced tree could look like.
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

// TestReadSwappedForSymlinkAfterNew: the reference's test "[SEC] read_skill escape
// attempts (symlink out of the tree)": a skill folder or a SKILL.md
// replaced by a symlink out of the tree after New is refused, since the
// realpaths are checked on every read.
func TestReadSwappedForSymlinkAfterNew(t *testing.T) {
	for _, tc := range []struct{ name, swap, target, errText string }{
		{name: "SEC-skill-folder", swap: "pdf", target: "", errText: "resolves outside the skills directory"},
		{name: "SEC-SKILL.md", swap: "pdf/SKILL.md", target: SkillFile, errText: "resolves outside the skill folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			outside := t.TempDir()
			writeFile(t, outside, SkillFile, "the host's secret")
			ix := mustNew(t, dir, Skill{Name: "pdf", Description: "d"})
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
	ix := mustNew(t, dir, Skill{Name: "web", Description: "d", Tools: []string{"web_fetch", "web_search"}},
		Skill{Name: "pdf", Description: "d", Tools: []string{"pdf_render"}})
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
	if got := mustNew(t, dir).PromptBlock(); got != "" {
		t.Fatalf("no skills: PromptBlock = %q, want \"\"", got)
	}
	ix := mustNew(t, dir, Skill{Name: "web", Description: "Fetch <pages> & \"quote\" 'them'", Tools: []string{"web_fetch"}},
		Skill{Name: "a&b", Description: "First."})
	want := promptIntro + "\n\n<available_skills>\n" +
		"<skill><name>a&amp;b</name><description>First.</description></skill>\n" +
		"<skill><name>web</name><description>Fetch &lt;pages&gt; &amp; &#34;quote&#34; &#39;them&#39;</description></skill>\n" +
		"</available_skills>"
	if d := cmp.Diff(want, ix.PromptBlock()); d != "" {
		t.Errorf("PromptBlock (-want +got):\n%s", d)
	}
	for _, piece := range []string{"read_skill", "Before answering or calling any other tool"} {
		if !strings.Contains(promptIntro, piece) {
			t.Errorf("the instruction lacks %q", piece)
		}
	}
}
