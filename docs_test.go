package rtsandbox_test

// The docs check: the documentation is self-contained. Every relative
// markdown link of README.md, docs/, examples/ and deploy/ names a file
// of the repository and, when it has one, a heading of that file; and no
// file of the repository points at documents that live outside it (a
// clone has no sibling directory of design notes). docs/architecture.md,
// docs/protocol.md and docs/limits.md hold what a reader needs instead.

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// docRoots are the files and trees whose markdown links are checked.
var docRoots = []string{"README.md", "docs", "examples", "deploy"}

// outsidePointers are what a file of the repository must not contain:
// paths to the design notes beside the checkout and section citations of
// their specs. The patterns are built from pieces so that this file does
// not match them.
var outsidePointers = []*regexp.Regexp{
	regexp.MustCompile(regexp.QuoteMeta("../" + "shared")),
	regexp.MustCompile(regexp.QuoteMeta("shared" + "/spec")),
	regexp.MustCompile(regexp.QuoteMeta("ARCHITECTURE" + ".md")),
	regexp.MustCompile(regexp.QuoteMeta("fetch-research" + "-delegate")),
	regexp.MustCompile(`\bspec/[a-z-]+\.md`),
	// A spec citation: "session spec", "Spec sealed" or "spec session.md"
	// and a section number after a section sign.
	regexp.MustCompile(`(?i)\bspec\b[^\n` + "\u00a7" + `]{0,24}` + "\u00a7"),
}

// sectionSign is a section sign: a spec citation unless an RFC is named
// right before it ("RFC 4648 §4").
var sectionSign = regexp.MustCompile(`(RFC \d+ )?` + "\u00a7")

func TestDocLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	if !slices.Contains(files, "README.md") || len(files) < 10 {
		t.Fatalf("found %d markdown files (%v); the test must run from the module root", len(files), files)
	}
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range brokenLinks(f, src, anchors) {
			t.Errorf("%s", bad)
		}
	}
}

// TestNothingPointsOutside: no file of the repository (source, docs,
// scripts, examples, .ci; .git and build output aside) cites the specs or the
// architecture notes beside the checkout, or any spec section: a section
// sign is allowed only after an RFC's number.
func TestNothingPointsOutside(t *testing.T) {
	n := 0
	walkRepo(t, func(p string, src []byte) {
		n++
		for _, bad := range outsideCitations(p, src) {
			t.Errorf("%s", bad)
		}
	})
	if n < 100 {
		t.Fatalf("read %d files; the test must run from the module root", n)
	}
}

// walkRepo calls f with every text file of the repository (.ci and the
// other dot files included): .git and bin/ (build output) aside.
func walkRepo(t *testing.T, f func(p string, src []byte)) {
	t.Helper()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (d.Name() == ".git" || d.Name() == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(src, 0) < 0 { // not binary
			f(filepath.ToSlash(p), src)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docCitation is how code comments and docs cite a section in prose:
// docs/protocol.md, "SSE".
var docCitation = regexp.MustCompile(`\bdocs/([a-z0-9-]+\.md), "([^"\n]+)"`)

// TestDocCitationsResolve: every citation docs/X.md, "Heading" in the
// repository names a file of docs/ and a heading of it, whole or its
// start up to a word boundary ("The door" for "The door: nothing leaves
// with a credential"), so a renamed heading cannot leave citations behind.
func TestDocCitationsResolve(t *testing.T) {
	headings := map[string][]string{}
	n := 0
	walkRepo(t, func(p string, src []byte) {
		if !bytes.Contains(src, []byte("docs/")) {
			return // docCitation needs it; most files have none
		}
		for i, line := range strings.Split(string(src), "\n") {
			if !strings.Contains(line, "docs/") {
				continue
			}
			for _, m := range docCitation.FindAllStringSubmatch(line, -1) {
				n++
				file := path.Join("docs", m[1])
				hs, ok := headings[file]
				if !ok {
					b, err := os.ReadFile(file)
					if err != nil {
						t.Errorf("%s:%d: cites %s: no such file", p, i+1, file)
						continue
					}
					hs = headingTexts(b)
					headings[file] = hs
				}
				if !citesHeading(hs, m[2]) {
					t.Errorf("%s:%d: cites %s, %q: no such heading", p, i+1, file, m[2])
				}
			}
		}
	})
	if n < 50 {
		t.Fatalf("found %d citations; the test must run from the module root", n)
	}
}

// citesHeading reports whether cited is one of headings or the start of
// one, followed by a character that is not a letter or digit.
func citesHeading(headings []string, cited string) bool {
	for _, h := range headings {
		if h == cited {
			return true
		}
		if rest, ok := strings.CutPrefix(h, cited); ok {
			if r := []rune(rest)[0]; !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				return true
			}
		}
	}
	return false
}

// headingTexts lists the text of each heading of markdown src, fenced
// code aside.
func headingTexts(src []byte) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(src), ""), -1) {
		out = append(out, m[1])
	}
	return out
}

// citationHints are literals one of which every match of outsidePointers
// and sectionSign contains. A file with none of them has no citation and
// is not split into lines: the walk reads every file of the repository,
// and matching each of its lines with seven expressions took half a
// minute of CPU under the race detector.
var citationHints = [][]byte{
	[]byte("shared"), []byte("ARCHITECTURE"), []byte("fetch-research"), []byte("spec/"), []byte("\u00a7"),
}

// outsideCitations lists the lines of file p that point outside the
// repository.
func outsideCitations(p string, src []byte) []string {
	if !slices.ContainsFunc(citationHints, func(h []byte) bool { return bytes.Contains(src, h) }) {
		return nil
	}
	var out []string
	for i, line := range strings.Split(string(src), "\n") {
		for _, re := range outsidePointers {
			if m := re.FindString(line); m != "" {
				out = append(out, fmt.Sprintf("%s:%d: %q points outside the repository; cite docs/ instead", p, i+1, m))
			}
		}
		for _, m := range sectionSign.FindAllStringSubmatch(line, -1) {
			if m[1] == "" {
				out = append(out, fmt.Sprintf("%s:%d: a section sign cites a spec outside the repository; link a heading of docs/ instead", p, i+1))
			}
		}
	}
	return out
}

// markdownFiles lists the markdown files under docRoots that exist.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, root := range docRoots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(p, ".md") {
				files = append(files, filepath.ToSlash(p))
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return files
}

var (
	fence      = regexp.MustCompile("(?ms)^ {0,3}(```|~~~).*?^ {0,3}(```|~~~)[^\n]*$")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	mdLink     = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	heading    = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// brokenLinks lists the relative links of markdown file f (contents src)
// whose file or heading anchor is missing. anchors caches each target's
// anchors.
func brokenLinks(f string, src []byte, anchors map[string]map[string]bool) []string {
	var out []string
	text := codeSpan.ReplaceAllString(fence.ReplaceAllString(string(src), ""), "")
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if u, err := url.Parse(target); err != nil || u.Scheme != "" {
			continue // absolute: http, https, mailto
		}
		file, frag, _ := strings.Cut(target, "#")
		dest := f
		if file != "" {
			dest = path.Join(path.Dir(f), file)
			if _, err := os.Stat(dest); err != nil {
				out = append(out, fmt.Sprintf("%s: link %q: no file %s", f, target, dest))
				continue
			}
		}
		if frag == "" {
			continue
		}
		if !strings.HasSuffix(dest, ".md") {
			out = append(out, fmt.Sprintf("%s: link %q: an anchor into a file that is not markdown", f, target))
			continue
		}
		set, ok := anchors[dest]
		if !ok {
			b, err := os.ReadFile(dest)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: link %q: %v", f, target, err))
				continue
			}
			set = headingAnchors(b)
			anchors[dest] = set
		}
		if !set[frag] {
			out = append(out, fmt.Sprintf("%s: link %q: %s has no heading with anchor #%s", f, target, dest, frag))
		}
	}
	return out
}

// headingAnchors is the set of anchors GitHub renders for the headings of
// markdown src (fenced code aside), numbering repeats as GitHub does,
// plus explicit <a id> and <a name> anchors.
func headingAnchors(src []byte) map[string]bool {
	text := fence.ReplaceAllString(string(src), "")
	set := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			set[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			set[s] = true
		}
		seen[s]++
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(text, -1) {
		set[m[1]] = true
	}
	return set
}

var inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor of a heading's text: the rendered text (a
// link's text, code without its backticks), lowercased, with everything
// but letters, digits, spaces, hyphens and underscores removed, and each
// space made a hyphen.
func slug(h string) string {
	h = inlineLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"The broker", "the-broker"},
		{"`rtsandbox doctor --config FILE [--online]`", "rtsandbox-doctor---config-file---online"},
		{"Request decoding (issue 21: parsing costs what the bytes cost)", "request-decoding-issue-21-parsing-costs-what-the-bytes-cost"},
		{"Does jsontree earn its place?", "does-jsontree-earn-its-place"},
		{"`session.compactor`: the host compactor", "sessioncompactor-the-host-compactor"},
		{"Files: attachments in, reply files out", "files-attachments-in-reply-files-out"},
		{"The door: nothing leaves with a credential", "the-door-nothing-leaves-with-a-credential"},
		{"read_attachment and image_generate references", "read_attachment-and-image_generate-references"},
		{"Session turns: warm, first, and a sealed turn beside them (issue 12)", "session-turns-warm-first-and-a-sealed-turn-beside-them-issue-12"},
		{"[The link](other.md) text", "the-link-text"},
		{"Größe – Übersicht", "größe--übersicht"},
		{"POST /worker/next", "post-workernext"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q; want %q", tc.heading, got, tc.want)
		}
	}
}

func TestCitesHeading(t *testing.T) {
	headings := []string{"The door: nothing leaves with a credential", "Compaction in the worker", "SSE"}
	for cited, want := range map[string]bool{
		"SSE":                      true,
		"The door":                 true,
		"Compaction in the worker": true,
		"Compaction":               true,
		"Compact":                  false,
		"The doors":                false,
		"Budgets":                  false,
	} {
		if got := citesHeading(headings, cited); got != want {
			t.Errorf("citesHeading(%q) = %v; want %v", cited, got, want)
		}
	}
}

func TestHeadingAnchorsNumberRepeats(t *testing.T) {
	src := "# Title\n## Routes\n```\n# not a heading\n```\n## Routes\n### Routes\n<a id=\"kept\"></a>\n"
	got := headingAnchors([]byte(src))
	want := map[string]bool{"title": true, "routes": true, "routes-1": true, "routes-2": true, "kept": true}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("headingAnchors (-want +got):\n%s", d)
	}
}

// TestDocChecksBite: a link to a missing file, a missing heading, an
// anchor into the same file that is not there, and each outside pointer
// are found; good links and code are not.
func TestDocChecksBite(t *testing.T) {
	dir := t.TempDir()
	must := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	must("b.md", "# Real heading\n")
	must("a.md", strings.Join([]string{
		"# A",
		"[ok](b.md) [ok](b.md#real-heading) [ok](#a) [web](https://example.com/x#y)",
		"[gone](c.md) [gone](b.md#no-such-heading) [gone](#nowhere)",
		"`[code](d.md)`",
		"```", "[fenced](e.md)", "```",
	}, "\n"))
	src, err := os.ReadFile(filepath.Join(dir, "a.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := brokenLinks(filepath.ToSlash(filepath.Join(dir, "a.md")), src, map[string]map[string]bool{})
	var targets []string
	for _, g := range got {
		_, rest, _ := strings.Cut(g, "link \"")
		q, _, _ := strings.Cut(rest, "\"")
		targets = append(targets, q)
	}
	if d := cmp.Diff([]string{"c.md", "b.md#no-such-heading", "#nowhere"}, targets); d != "" {
		t.Errorf("broken links (-want +got):\n%s\n%v", d, got)
	}

	for _, tc := range []struct {
		file, line string
		bad        bool
	}{
		{"x.go", "// see ../" + "shared/ARCHITECTURE" + ".md", true},
		{"x.go", "// the contract in shared" + "/spec/", true},
		{"x.go", "// see ARCHITECTURE" + ".md", true},
		{"x.go", "// beside it in ../" + "shared", true},
		{"x.go", "// (session spec " + "\u00a72.8)", true},
		{"x.go", "// Spec sealed " + "\u00a76.6 \"Store\"", true},
		{"x.go", "// spec session.md " + "\u00a75.5", true},
		{"x.go", "// docs/protocol.md, \"SSE\"", false},
		{"x.md", "a rule of " + "\u00a74.2", true},
		{"x.go", "// the bounds of " + "\u00a74.3", true},
		{"x.go", "// (spec fetch-research" + "-delegate.md)", true},
		{"x.go", "// refer to the sealed-mode spec (spec/" + "sealed.md).", true},
		{"x.go", "// padded base64 (RFC 4648 " + "\u00a74)", false},
		{"x.md", "base64 (RFC 4648 " + "\u00a74)", false},
		{"x.md", "see [protocol](protocol.md#sse)", false},
	} {
		if got := len(outsideCitations(tc.file, []byte(tc.line))) > 0; got != tc.bad {
			t.Errorf("outsideCitations(%s, %q) found %v; want %v", tc.file, tc.line, got, tc.bad)
		}
	}
}
