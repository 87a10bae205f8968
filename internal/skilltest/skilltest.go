// Package skilltest writes operator skill folders for the tests of the
// packages that read them (skills, skills/skilltree, session, host and
// the worker). Tests only.
package skilltest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SkillMD is a valid SKILL.md of the skill name: its front matter with
// description and the tools it gates, then a heading.
func SkillMD(name, desc string, tools ...string) string {
	s := fmt.Sprintf("---\nname: %q\ndescription: %q\n", name, desc)
	if len(tools) > 0 {
		s += fmt.Sprintf("tools: [%s]\n", strings.Join(tools, ", "))
	}
	return s + "---\n# " + name + "\n"
}

// WriteFile writes body at dir/rel (rel slash-separated), making the
// parents (0700); the file is 0600.
func WriteFile(tb testing.TB, dir, rel, body string) {
	tb.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// WriteFiles writes each file of files (slash path → body) under dir.
func WriteFiles(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for rel, body := range files {
		WriteFile(tb, dir, rel, body)
	}
}

// Symlink makes link point at target.
func Symlink(tb testing.TB, target, link string) {
	tb.Helper()
	if err := os.Symlink(target, link); err != nil {
		tb.Fatal(err)
	}
}
