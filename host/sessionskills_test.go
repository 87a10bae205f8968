package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/skilltest"
	"github.com/rtsandbox/rtsandbox/skills"
)

// writeSkill writes dir/name/SKILL.md with frontMatter.
func writeSkill(t *testing.T, dir, name, frontMatter string) {
	t.Helper()
	skilltest.WriteFile(t, dir, name+"/"+skills.SkillFile, "---\n"+frontMatter+"---\nbody\n")
}

// skillsConfig is a config whose session profile studio (the default)
// names dir as its skills directory, beside an unused one naming a
// directory that does not exist.
func skillsConfig(t *testing.T, dir string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n" +
		"profiles: {studio: {mode: session, skills: " + dir + "}, unused: {mode: session, skills: /nonexistent/skills}}\n" +
		"default_profile: studio\n"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// studioBroker is studio's broker config: host tool lookup and MCP
// server docs with tool search-v2.
func studioBroker() map[string]broker.Config {
	return map[string]broker.Config{"studio": {
		Tools: []broker.Tool{{Spec: rtsandbox.ToolSpec{Name: "lookup"}}},
		MCP:   []broker.MCPServer{{Name: "docs", Tools: []rtsandbox.ToolSpec{{Name: "search-v2"}}}},
	}}
}

// Serve reads each profile's skills once at start: a valid tree is
// indexed, an unused profile's directory is never read, and a directory
// without any skill gives no tree.
func TestSessionSkills(t *testing.T) {
	dir := t.TempDir()
	writeSkill(t, dir, "web", "name: web\ndescription: Web research.\ntools: [lookup, docs/search-v2]\n")
	got, err := sessionSkills(skillsConfig(t, dir), studioBroker())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["studio"] == nil {
		t.Fatalf("trees %v; want studio's only", got)
	}
	want := []skills.Skill{{Name: "web", Description: "Web research.", Tools: []string{"lookup", "docs/search-v2"}}}
	if diff := cmp.Diff(want, got["studio"].Skills()); diff != "" {
		t.Errorf("index (-want +got):\n%s", diff)
	}
	empty := t.TempDir()
	writeSkill(t, empty, "notes", "not read: the folder has a SKILL.md of another name\n")
	if err := os.Rename(filepath.Join(empty, "notes", skills.SkillFile), filepath.Join(empty, "notes", "README.md")); err != nil {
		t.Fatal(err)
	}
	if got, err := sessionSkills(skillsConfig(t, empty), studioBroker()); err != nil || len(got) != 0 {
		t.Errorf("a directory without skills: %v, %v; want no tree", got, err)
	}
}

// A broken skills directory fails serve's start with an error naming the
// key, the file and the rule.
func TestSessionSkillsRefusals(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string)
		want    []string // pieces of the error text, in order
		wantErr error
	}{{
		name:    "name-differs-from-folder",
		setup:   func(t *testing.T, dir string) { writeSkill(t, dir, "web", "name: www\ndescription: d\n") },
		want:    []string{"profiles.studio.skills: ", "/web/SKILL.md: ", `name "www" must equal the directory name "web"`},
		wantErr: rtsandbox.ErrInvalid,
	}, {
		name: "SEC-symlink-in-a-skill-folder",
		setup: func(t *testing.T, dir string) {
			writeSkill(t, dir, "web", "name: web\ndescription: d\n")
			if err := os.Symlink("/etc/passwd", filepath.Join(dir, "web", "leak.md")); err != nil {
				t.Fatal(err)
			}
		},
		want:    []string{"profiles.studio.skills: ", "/web/leak.md: ", "a symlink is not followed"},
		wantErr: rtsandbox.ErrRefused,
	}, {
		name: "gated-tool-not-in-the-profile",
		setup: func(t *testing.T, dir string) {
			writeSkill(t, dir, "web", "name: web\ndescription: d\ntools: [lookup, web_fetch]\n")
		},
		want:    []string{"profiles.studio.skills: ", "/web/SKILL.md: ", `tools[1] "web_fetch" is not a tool of this profile (known: lookup, docs/search-v2)`},
		wantErr: rtsandbox.ErrInvalid,
	}, {
		name: "mcp-tool-named-without-its-server",
		setup: func(t *testing.T, dir string) {
			writeSkill(t, dir, "web", "name: web\ndescription: d\ntools: [search-v2]\n")
		},
		want:    []string{"profiles.studio.skills: ", "/web/SKILL.md: ", `tools[0] "search-v2" must name a host tool`},
		wantErr: rtsandbox.ErrInvalid,
	}, {
		name: "directory-missing",
		setup: func(t *testing.T, dir string) {
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
		},
		want:    []string{"profiles.studio.skills: skills ", "no such file or directory"},
		wantErr: rtsandbox.ErrInvalid,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "skills")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			_, err := sessionSkills(skillsConfig(t, dir), studioBroker())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v; want %v", err, tc.wantErr)
			}
			rest := err.Error()
			for _, piece := range tc.want {
				i := strings.Index(rest, piece)
				if i < 0 {
					t.Fatalf("error %q lacks %q (in order)", err, piece)
				}
				rest = rest[i+len(piece):]
			}
		})
	}
}

// The doctor checks each skills directory of a session profile in use by
// serve's rules, with the profile's tools as the config lists them.
func TestSkillsChecks(t *testing.T) {
	dir := t.TempDir()
	writeSkill(t, dir, "web", "name: web\ndescription: d\ntools: [clock, docs/search]\n")
	cfg, err := config.Parse([]byte("state_dir: /var/lib/rt\nmodel: {url: 'https://x/v1', name: m, api_key_env: K}\n" +
		"tools: [{name: clock, builtin: clock}]\nmcp: [{name: docs, url: 'https://mcp/', tools: [search]}]\n" +
		"profiles: {studio: {mode: session, tools: [clock], mcp: [docs], skills: " + dir + "}, " +
		"bare: {mode: session, skills: " + dir + "}}\n" +
		"default_profile: studio\nchannels_profile: {'http:b': bare}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range skillsChecks(cfg) {
		got = append(got, c.String())
	}
	real, _ := filepath.EvalSymlinks(dir)
	want := []string{
		"fail  skills             profiles.bare.skills: " + real + `/web/SKILL.md: invalid: tools[0] "clock" is not a tool of this profile (known: none)` +
			"\n      fix: fix the file and the rule named (docs/session-mode.md#skills)",
		"ok    skills             profiles.studio.skills: 1 skill(s) in " + real,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
}
