package skilltree

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/skills"
)

// frontMatterCases are the front-matter rules of docs/session.md, "Skills"; they also seed
// FuzzFrontMatter.
var frontMatterCases = []struct {
	name    string
	in      string
	want    frontMatter
	wantErr string // a piece of the error text; "" for success
}{
	{name: "minimal", in: "---\nname: pdf\ndescription: Reads PDFs.\n---\nbody\n",
		want: frontMatter{Name: "pdf", Description: "Reads PDFs."}},
	{name: "with-tools", in: "---\nname: web\ndescription: d\ntools: [web_fetch, web_search]\n---\n",
		want: frontMatter{Name: "web", Description: "d", Tools: []string{"web_fetch", "web_search"}}},
	{name: "crlf-lines", in: "---\r\nname: a\r\ndescription: d\r\n---\r\nbody",
		want: frontMatter{Name: "a", Description: "d"}},
	{name: "closing-line-at-end-of-file", in: "---\nname: a\ndescription: d\n---",
		want: frontMatter{Name: "a", Description: "d"}},
	{name: "null-tools", in: "---\nname: a\ndescription: d\ntools:\n---\n",
		want: frontMatter{Name: "a", Description: "d"}},
	{name: "quoted-number-is-a-string", in: "---\nname: \"7\"\ndescription: d\n---\n",
		want: frontMatter{Name: "7", Description: "d"}},
	{name: "no-front-matter", in: "# title\n", wantErr: `must start with a front matter line "---"`},
	{name: "empty-file", in: "", wantErr: `must start with a front matter line "---"`},
	{name: "indented-opening-line", in: " ---\nname: a\n---\n", wantErr: `must start with a front matter line "---"`},
	{name: "no-closing-line", in: "---\nname: a\ndescription: d\n", wantErr: `no closing "---" line`},
	{name: "empty-front-matter", in: "---\n---\n", wantErr: "the front matter is empty"},
	{name: "unknown-key", in: "---\nname: a\ndescription: d\nlicense: MIT\n---\n", wantErr: "field license not found"},
	{name: "duplicate-key", in: "---\nname: a\nname: b\ndescription: d\n---\n", wantErr: "already defined"},
	{name: "not-a-mapping", in: "---\n- a\n---\n", wantErr: "front matter:"},
	{name: "two-documents", in: "---\nname: a\ndescription: d\n...\n--- x\n---\n", wantErr: "one YAML mapping"},
	{name: "name-missing", in: "---\ndescription: d\n---\n", wantErr: "name is missing"},
	{name: "name-a-number", in: "---\nname: 7\ndescription: d\n---\n", wantErr: "name must be a string"},
	{name: "name-empty", in: "---\nname: \"\"\ndescription: d\n---\n", wantErr: "name must not be empty"},
	{name: "description-missing", in: "---\nname: a\n---\n", wantErr: "description is missing"},
	{name: "description-empty", in: "---\nname: a\ndescription: ''\n---\n", wantErr: "description must not be empty"},
	{name: "description-a-list", in: "---\nname: a\ndescription: [x]\n---\n", wantErr: "description must be a string"},
	{name: "description-a-bool", in: "---\nname: a\ndescription: true\n---\n", wantErr: "description must be a string"},
	{name: "tools-a-string", in: "---\nname: a\ndescription: d\ntools: web_fetch\n---\n", wantErr: "tools must be a list"},
	{name: "tools-item-a-number", in: "---\nname: a\ndescription: d\ntools: [1]\n---\n", wantErr: "tools[0] must be a string"},
	{name: "tools-item-empty", in: "---\nname: a\ndescription: d\ntools: [x, \"\"]\n---\n", wantErr: "tools[1] must not be empty"},
	{name: "tools-item-repeated", in: "---\nname: a\ndescription: d\ntools: [x, x]\n---\n", wantErr: `tools[1] repeats "x"`},
	{name: "alias-for-name", in: "---\ndescription: &d d\nname: *d\n---\n", wantErr: "name must be a string"},
	{name: "front-matter-over-64KiB", in: "---\nname: a\ndescription: d\n#" + strings.Repeat("x", skills.MaxFrontMatter) + "\n---\n",
		wantErr: "larger than 65536 bytes"},
}

func TestParseFrontMatter(t *testing.T) {
	for _, tc := range frontMatterCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFrontMatter([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, rtsandbox.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("front matter (-want +got):\n%s", d)
			}
		})
	}
}

func TestFrontMatterExactlyAtTheBound(t *testing.T) {
	head := "name: a\ndescription: d\n#"
	head += strings.Repeat("x", skills.MaxFrontMatter-len(head)-1) + "\n"
	if len(head) != skills.MaxFrontMatter {
		t.Fatalf("head is %d bytes", len(head))
	}
	if _, err := parseFrontMatter([]byte("---\n" + head + "---\n")); err != nil {
		t.Fatalf("a front matter of exactly %d bytes: %v", skills.MaxFrontMatter, err)
	}
}

// FuzzFrontMatter: the parser never panics, every error is classified
// ErrInvalid, and what it accepts keeps the rules.
func FuzzFrontMatter(f *testing.F) {
	for _, tc := range frontMatterCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fm, err := parseFrontMatter(data)
		if err != nil {
			if !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		if fm.Name == "" || fm.Description == "" {
			t.Fatalf("accepted an empty name or description: %+v", fm)
		}
		seen := map[string]bool{}
		for _, tool := range fm.Tools {
			if tool == "" || seen[tool] {
				t.Fatalf("accepted tools %q", fm.Tools)
			}
			seen[tool] = true
		}
	})
}
