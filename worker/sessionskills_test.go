package worker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
	"github.com/rtsandbox/rtsandbox/internal/skilltest"
	"github.com/rtsandbox/rtsandbox/skills"
	"github.com/rtsandbox/rtsandbox/wire"
)

// skillsConfigCases are /worker/config bodies and their skills as the
// worker reads them; they also seed FuzzSkillsConfig.
var skillsConfigCases = []struct {
	name string
	body string
	dir  string
	want []wire.SessionSkill
	ok   bool
}{
	{name: "none", body: `{}`, ok: true},
	{name: "index", body: `{"skillsDir":"/run/sandbox/skills","skills":[{"name":"web","description":"Web.","tools":["lookup","docs/search"],"extra":1},{"name":"pdf","description":"PDFs."}]}`,
		dir: "/run/sandbox/skills", ok: true,
		want: []wire.SessionSkill{{Name: "web", Description: "Web.", Tools: []string{"lookup", "docs/search"}}, {Name: "pdf", Description: "PDFs."}}},
	{name: "empty-tools", body: `{"skillsDir":"/s","skills":[{"name":"a","description":"d","tools":[]}]}`, dir: "/s", ok: true,
		want: []wire.SessionSkill{{Name: "a", Description: "d"}}},
	{name: "skills-without-dir", body: `{"skills":[{"name":"a","description":"d"}]}`},
	{name: "dir-without-skills", body: `{"skillsDir":"/s"}`},
	{name: "no-skills", body: `{"skillsDir":"/s","skills":[]}`},
	{name: "dir-relative", body: `{"skillsDir":"skills","skills":[{"name":"a","description":"d"}]}`},
	{name: "dir-not-clean", body: `{"skillsDir":"/run/../etc","skills":[{"name":"a","description":"d"}]}`},
	{name: "dir-not-a-string", body: `{"skillsDir":7,"skills":[{"name":"a","description":"d"}]}`},
	{name: "skills-an-object", body: `{"skillsDir":"/s","skills":{"name":"a","description":"d"}}`},
	{name: "skill-not-an-object", body: `{"skillsDir":"/s","skills":["a"]}`},
	{name: "name-missing", body: `{"skillsDir":"/s","skills":[{"description":"d"}]}`},
	{name: "SEC-name-dot-dot", body: `{"skillsDir":"/s","skills":[{"name":"..","description":"d"}]}`},
	{name: "SEC-name-a-path", body: `{"skillsDir":"/s","skills":[{"name":"../etc","description":"d"}]}`},
	{name: "description-empty", body: `{"skillsDir":"/s","skills":[{"name":"a","description":""}]}`},
	{name: "description-null", body: `{"skillsDir":"/s","skills":[{"name":"a","description":null}]}`},
	{name: "tools-a-string", body: `{"skillsDir":"/s","skills":[{"name":"a","description":"d","tools":"lookup"}]}`},
	{name: "tool-a-number", body: `{"skillsDir":"/s","skills":[{"name":"a","description":"d","tools":[1]}]}`},
	{name: "tool-claimed-twice", body: `{"skillsDir":"/s","skills":[{"name":"a","description":"d","tools":["x"]},{"name":"b","description":"d","tools":["x"]}]}`},
	{name: "name-twice", body: `{"skillsDir":"/s","skills":[{"name":"a","description":"d"},{"name":"a","description":"e"}]}`},
}

func TestParseSkillsConfig(t *testing.T) {
	for _, tc := range skillsConfigCases {
		t.Run(tc.name, func(t *testing.T) {
			obj, _ := object([]byte(tc.body))
			dir, list, ok := parseSkillsConfig(obj)
			if ok != tc.ok {
				t.Fatalf("ok = %v; want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, list); diff != "" || dir != tc.dir {
				t.Errorf("dir %q, want %q; skills (-want +got):\n%s", dir, tc.dir, diff)
			}
			// The whole config refuses what the skills parser refuses.
			obj["model"] = json.RawMessage(`"m"`)
			body, _ := json.Marshal(obj)
			if _, err := parseWorkerConfig(body); (err == nil) != tc.ok {
				t.Errorf("parseWorkerConfig error %v; want ok %v", err, tc.ok)
			}
		})
	}
}

// FuzzSkillsConfig is the worker's parse of the skills index in
// /worker/config: it never panics, and what it accepts keeps the index
// rules (skills.Check) with an absolute clean directory.
func FuzzSkillsConfig(f *testing.F) {
	for _, tc := range skillsConfigCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, ok := object(data)
		if !ok {
			return
		}
		dir, list, ok := parseSkillsConfig(obj)
		if !ok || len(list) == 0 {
			return
		}
		if _, err := skills.Check(list); err != nil || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			t.Fatalf("accepted %q %+v (%v)", dir, list, err)
		}
	})
}

// skillsDir is an operator tree as the host copies it: web (gating the
// host tool lookup and the MCP tool docs/search) with a notes file, a
// file over 256 KiB and, planted in the copy, a link to a secret outside.
func skillsDir(t *testing.T) (dir string, skillMD string) {
	t.Helper()
	dir = t.TempDir()
	outside := t.TempDir()
	skillMD = "---\nname: web\ndescription: Web research.\ntools: [lookup, docs/search]\n---\nLook things up politely.\n"
	skilltest.WriteFiles(t, dir, map[string]string{
		"web/SKILL.md": skillMD, "web/notes.md": "more notes", "web/big.md": strings.Repeat("x", skills.MaxFileSize+1),
	})
	skilltest.WriteFile(t, outside, "secret.txt", "HOST_SECRET")
	skilltest.Symlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(dir, "web", "leak.md"))
	return dir, skillMD
}

// skillsWorkerConfig is toolsConfig with the skill web of dir.
func skillsWorkerConfig(dir string) string {
	return `{"modelApi":"anthropic","model":"claude-test","stream":false,"prompt":"Be brief.","timeZone":"UTC",
 "tools":[{"name":"lookup","description":"Look up.","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}],
 "mcp":[{"server":"docs","tools":[{"name":"search","description":"Search docs.","parameters":{"type":"object"}}]}],
 "skillsDir":"` + dir + `","skills":[{"name":"web","description":"Web research.","tools":["lookup","docs/search"]}]}`
}

// lastToolResult is the text of the last tool message of r.
func lastToolResult(r fakemodel.Request) string {
	for i := len(r.Body.Messages) - 1; i >= 0; i-- {
		if m := r.Body.Messages[i]; m.Role == "tool" {
			return m.Text()
		}
	}
	return ""
}

// The reference's test "Worker: … `read_skill` escape attempts (`..`, symlink out of the
// tree, more than 256 KiB); skill gating", and docs/session.md, "Skills" end to end in the
// worker: the skills block is in the system
// prompt the model receives; a claimed tool is refused with the exact
// text until read_skill read its skill's SKILL.md (reading another file
// does not open it); escape attempts through read_skill are refused and
// leak nothing; and the read set outlives the turn.
func TestSessionSkillsGateAndRead(t *testing.T) {
	dir, skillMD := skillsDir(t)
	read := func(args map[string]string) fakemodel.Step {
		return fakemodel.CallTools(fakemodel.Call("read_skill", args))
	}
	lookup := fakemodel.CallTools(fakemodel.Call("host_lookup", map[string]string{"q": "x"}))
	model := fakemodel.New(
		lookup, // 1
		read(map[string]string{"skill": "web", "path": strings.Repeat("../", 16) + "etc/passwd"}), // 2
		read(map[string]string{"skill": "web", "path": "/etc/passwd"}),                            // 3
		read(map[string]string{"skill": "web", "path": "leak.md"}),                                // 4
		read(map[string]string{"skill": "web", "path": "big.md"}),                                 // 5
		read(map[string]string{"skill": "../web"}),                                                // 6
		read(map[string]string{"skill": "web", "path": "notes.md"}),                               // 7
		lookup,                                  // 8
		read(map[string]string{"skill": "web"}), // 9
		lookup,                                  // 10
		fakemodel.Reply("done"),
		lookup, // second turn
		fakemodel.Reply("again"),
	)
	defer model.Close()
	b := startSessionBroker(t, model)
	b.config = skillsWorkerConfig(dir)
	b.discovery = `{"servers":[{"name":"docs","tools":["search"]}]}`
	b.tools["lookup"] = func(json.RawMessage) string { return `{"ok":true,"text":"found it"}` }
	w := startWorker(t, b, t.TempDir())

	if r := b.execute(sessionTurn("t1", "look it up")); !r.OK || r.Text != "done" {
		t.Fatalf("first turn %+v\n%s", r, w.log.String())
	}
	if r := b.execute(sessionTurn("t2", "and again")); !r.OK || r.Text != "again" {
		t.Fatalf("second turn %+v\n%s", r, w.log.String())
	}
	reqs := model.Requests()
	if len(reqs) != 13 {
		t.Fatalf("%d model requests; want 13", len(reqs))
	}
	ix, err := skills.New(dir, []skills.Skill{{Name: "web", Description: "Web research.", Tools: []string{"lookup", "docs/search"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sys := reqs[0].System(); !strings.HasPrefix(sys, "Be brief.\n\n"+ix.PromptBlock()) {
		t.Errorf("system prompt %q; want the operator prompt, then the skills block", sys)
	}
	blocked := "Read the web skill with read_skill first; it sets how lookup is used here."
	want := []string{
		blocked,                  // 1: the gate
		refusedText, refusedText, // 2, 3: "..", an absolute path
		refusedText, refusedText, // 4, 5: a link out of the tree, over 256 KiB
		refusedText,  // 6: a skill name that is a path
		"more notes", // 7: another file of the skill
		blocked,      // 8: still gated
		skillMD,      // 9: SKILL.md
		"found it",   // 10: open
		"found it",   // second turn: still open
	}
	var got []string
	for _, i := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12} {
		got = append(got, lastToolResult(reqs[i]))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tool results (-want +got):\n%s", diff)
	}
	for i, body := range b.gotModelBodies() {
		if strings.Contains(body, "HOST_SECRET") || strings.Contains(body, "root:x:0") {
			t.Errorf("model request %d carries what lies outside the skills tree", i)
		}
	}
	var names []string
	for _, tool := range reqs[0].Body.Tools {
		names = append(names, tool.Function.Name)
	}
	if diff := cmp.Diff([]string{"invalid_tool", "read_attachment", "write_file", "host_lookup", "mcp_0_search", "read_skill"}, names); diff != "" {
		t.Errorf("tools offered (-want +got):\n%s", diff)
	}
}

// docs/session.md, "Process": a tool claimed by a skill that the worker does not have
// (here an MCP tool the broker does not discover) is fatal at startup,
// as are an index whose copy is missing and an index that breaks a rule.
func TestSessionSkillsStartupFatal(t *testing.T) {
	dir, _ := skillsDir(t)
	tests := []struct {
		name      string
		config    string
		discovery string
		want      string
	}{
		{"claimed-tool-not-registered", skillsWorkerConfig(dir), `{"servers":[]}`, "tools are not registered: docs/search"},
		{"copy-missing", skillsWorkerConfig(filepath.Join(dir, "none")), `{"servers":[{"name":"docs","tools":["search"]}]}`, "no such file or directory"},
		{"skill-folder-missing", strings.Replace(skillsWorkerConfig(dir), `"name":"web"`, `"name":"pdf"`, 1), `{"servers":[{"name":"docs","tools":["search"]}]}`, "no such file or directory"},
		{"index-breaks-a-rule", strings.Replace(skillsWorkerConfig(dir), `"name":"web"`, `"name":".."`, 1), `{"servers":[{"name":"docs","tools":["search"]}]}`, "invalid worker config: [skills]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := startSessionBroker(t, nil)
			b.config, b.discovery = tc.config, tc.discovery
			log := &syncLog{}
			code := RunSession(context.Background(), SessionOptions{Socket: b.sock, Workspace: t.TempDir(), Stdout: log})
			if code != 1 || log.count(t, logWorkerFailed) != 1 || !strings.Contains(log.String(), tc.want) {
				t.Errorf("exit %d; want 1 with one failure line naming %q\n%s", code, tc.want, log.String())
			}
		})
	}
}
