package session

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/skilltest"
	"github.com/rtsandbox/rtsandbox/skills/skilltree"
	"github.com/rtsandbox/rtsandbox/wire"
)

// loadTree writes files (slash path → content) into a fresh operator
// directory and loads it.
func loadTree(t *testing.T, files map[string]string) *skilltree.Tree {
	t.Helper()
	dir := t.TempDir()
	skilltest.WriteFiles(t, dir, files)
	tree, err := skilltree.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// pdfSkill is a SKILL.md of the skill pdf with description desc.
func pdfSkill(desc string) string {
	return "---\nname: pdf\ndescription: " + desc + "\n---\nbody\n"
}

// copied is what lies under dir as the worker would see it: slash path
// → content ("<dir>" for a folder), with each entry's mode and owner.
type copied struct {
	Body       string
	Mode       fs.FileMode
	UID, GID   uint32
	NotRegular bool
}

func readCopy(t *testing.T, dir string) map[string]copied {
	t.Helper()
	out := map[string]copied{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := fi.Sys().(*syscall.Stat_t)
		c := copied{Mode: fi.Mode(), UID: st.Uid, GID: st.Gid, NotRegular: !fi.Mode().IsRegular() && !fi.IsDir()}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			c.Body = string(data)
		} else if fi.IsDir() {
			c.Body = "<dir>"
		}
		out[filepath.ToSlash(rel)] = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runEntries are the names in run/ other than the broker socket.
func runEntries(t *testing.T, run string) []string {
	t.Helper()
	list, err := os.ReadDir(run)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list {
		if e.Name() != wire.SessionSocketName {
			out = append(out, e.Name())
		}
	}
	return out
}

// testSettings are settings whose worker user is workerUser(), handed
// over as the runtime does when the tests run as root.
func testSettings() *settings {
	uid, gid := workerUser()
	return &settings{Options: Options{UID: uid, GID: gid}, hostRoot: os.Geteuid() == 0}
}

// The copy in run/skills: folders 0700 and files 0600, readable by the
// worker user (handed to it when the host runs as root), replaced whole
// by a changed tree, with no staging folder left; a profile without
// skills removes it.
func TestInstallSkills(t *testing.T) {
	s := testSettings()
	run := t.TempDir()
	skillsDir := filepath.Join(run, wire.SessionSkillsName)
	uid, gid := uint32(s.UID), uint32(s.GID)
	dir := func() copied { return copied{Body: "<dir>", Mode: fs.ModeDir | 0o700, UID: uid, GID: gid} }
	file := func(body string) copied { return copied{Body: body, Mode: 0o600, UID: uid, GID: gid} }

	a := loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("A"), "pdf/ref/usage.md": "usage A", "pdf/old.md": "gone in B"})
	if err := s.installSkills(run, a); err != nil {
		t.Fatal(err)
	}
	want := map[string]copied{"pdf": dir(), "pdf/SKILL.md": file(pdfSkill("A")), "pdf/old.md": file("gone in B"),
		"pdf/ref": dir(), "pdf/ref/usage.md": file("usage A")}
	if d := cmp.Diff(want, readCopy(t, skillsDir)); d != "" {
		t.Errorf("first copy (-want +got):\n%s", d)
	}

	// A crash mid-install left a staging folder: it is never used.
	if err := os.MkdirAll(filepath.Join(run, skillsStaging, "junk"), 0o700); err != nil {
		t.Fatal(err)
	}
	b := loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("B"), "pdf/ref/usage.md": "usage B"})
	if err := s.installSkills(run, b); err != nil {
		t.Fatal(err)
	}
	want = map[string]copied{"pdf": dir(), "pdf/SKILL.md": file(pdfSkill("B")), "pdf/ref": dir(), "pdf/ref/usage.md": file("usage B")}
	if d := cmp.Diff(want, readCopy(t, skillsDir)); d != "" {
		t.Errorf("replaced copy (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{wire.SessionSkillsName}, runEntries(t, run)); d != "" {
		t.Errorf("run/ after a replace (-want +got):\n%s", d)
	}

	if err := s.installSkills(run, nil); err != nil {
		t.Fatal(err)
	}
	if got := runEntries(t, run); len(got) != 0 {
		t.Errorf("run/ holds %v after a profile without skills", got)
	}
}

// The swap without RENAME_EXCHANGE (a file system that lacks it) leaves
// the new copy in place and nothing else.
func TestSwapSkillsByRenames(t *testing.T) {
	s := testSettings()
	run := t.TempDir()
	if err := s.installSkills(run, loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("A")})); err != nil {
		t.Fatal(err)
	}
	fd, err := openDir(run)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := s.stageSkills(fd, loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("B")})); err != nil {
		t.Fatal(err)
	}
	if err := swapByRenames(fd, run); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{wire.SessionSkillsName}, runEntries(t, run)); d != "" {
		t.Errorf("run/ after the swap (-want +got):\n%s", d)
	}
	if data, _ := os.ReadFile(filepath.Join(run, wire.SessionSkillsName, "pdf", "SKILL.md")); string(data) != pdfSkill("B") {
		t.Errorf("run/skills/pdf/SKILL.md = %q; want the new copy", data)
	}
}

// TestSecInstallSkillsAtomic: a worker reading run/skills while the host
// replaces it sees one whole copy or the other, never a half-written
// file (RENAME_EXCHANGE; on a file system without it the folder may be
// missing for a moment, never half written).
func TestSecInstallSkillsAtomic(t *testing.T) {
	s := testSettings()
	run := t.TempDir()
	big := func(c string) string { return strings.Repeat(c, 200<<10) }
	trees := []*skilltree.Tree{
		loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("A"), "pdf/big.md": big("a")}),
		loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("B"), "pdf/big.md": big("b")}),
	}
	if err := s.installSkills(run, trees[0]); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, missing atomic.Int64
	var bad error
	var wg sync.WaitGroup
	wg.Go(func() {
		p := filepath.Join(run, wire.SessionSkillsName, "pdf", "big.md")
		for !stop.Load() {
			data, err := os.ReadFile(p)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				missing.Add(1)
			case err != nil:
				bad = err
				return
			case string(data) != big("a") && string(data) != big("b"):
				bad = errors.New("read a half-written file")
				return
			default:
				reads.Add(1)
			}
		}
	})
	for i := range 20 {
		if err := s.installSkills(run, trees[(i+1)%2]); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad != nil {
		t.Fatal(bad)
	}
	t.Logf("%d whole reads, %d while missing", reads.Load(), missing.Load())
}

// skillsFixture is a fixture whose profile studio has tree.
func skillsFixture(t *testing.T, tree *skilltree.Tree) *fixture {
	t.Helper()
	return newFixture(t, func(o *Options) { o.Profiles = map[string]Profile{"studio": {Skills: tree}, "other": {}} })
}

// The profile's skills are in run/skills before the container is
// created, and the container's spec carries their digest.
func TestSkillsCopiedBeforeCreate(t *testing.T) {
	tree := loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("A")})
	f := skillsFixture(t, tree)
	run := filepath.Join(f.party, "discord_s", runName)
	var atCreate string
	f.w.onEnsure = func() {
		data, _ := os.ReadFile(filepath.Join(run, wire.SessionSkillsName, "pdf", "SKILL.md"))
		atCreate = string(data)
	}
	if _, err := f.turnIn(context.Background(), "discord:s", "a"); err != nil {
		t.Fatal(err)
	}
	if atCreate != pdfSkill("A") {
		t.Errorf("run/skills/pdf/SKILL.md at create = %q; want the profile's", atCreate)
	}
	if got := f.w.created[0].Skills; got != tree.Digest() {
		t.Errorf("spec skills digest %q; want %q", got, tree.Digest())
	}
}

// The reference's test "Profile change or image change → remove and recreate", for the
// skill set: a serve restarted with a changed SKILL.md removes the
// running container before it replaces the copy, then creates a new one;
// with the same tree it keeps the container and leaves the copy alone.
func TestChangedSkillRecreates(t *testing.T) {
	a := loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("A")})
	b := loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("B")})
	f := skillsFixture(t, a)
	if _, err := f.turnIn(context.Background(), "discord:r", "a"); err != nil {
		t.Fatal(err)
	}
	name := f.rt.name("discord:r")
	run := filepath.Join(f.party, "discord_r", runName)
	skillFile := filepath.Join(run, wire.SessionSkillsName, "pdf", "SKILL.md")
	restart := func(tree *skilltree.Tree) *Runtime {
		t.Helper()
		if err := f.rt.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		o := f.opts
		o.Profiles = map[string]Profile{"studio": {Skills: tree}}
		rt, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close(context.Background()) }) // its container's watch ends
		f.rt = rt
		f.w.takeCalls()
		return rt
	}

	inode := func() uint64 {
		fi, err := os.Lstat(filepath.Join(run, wire.SessionSkillsName))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := inode()
	restart(a)
	if _, err := f.turnIn(context.Background(), "discord:r", "b"); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"status", "ensure"}, f.w.takeCalls()); d != "" {
		t.Errorf("same tree: driver calls (-want +got):\n%s", d)
	}
	if inode() != before {
		t.Error("same tree: the copy was replaced under the running container")
	}

	restart(b)
	var atRemove string
	f.w.onRemove = func() { data, _ := os.ReadFile(skillFile); atRemove = string(data) }
	if _, err := f.turnIn(context.Background(), "discord:r", "c"); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"status", "remove:" + name, "ensure", "create"}, f.w.takeCalls()); d != "" {
		t.Errorf("changed tree: driver calls (-want +got):\n%s", d)
	}
	if atRemove != pdfSkill("A") {
		t.Errorf("run/skills at the old container's removal = %q; want the old copy still", atRemove)
	}
	if data, _ := os.ReadFile(skillFile); string(data) != pdfSkill("B") {
		t.Errorf("run/skills after the recreate = %q; want the new copy", data)
	}
	if got := f.w.created[len(f.w.created)-1].Skills; got != b.Digest() {
		t.Errorf("recreated with skills digest %q; want %q", got, b.Digest())
	}
	f.w.onRemove = nil
}

// A channel whose profile has skills no more loses its copy with the
// container that read it.
func TestSkillsRemovedWithoutSkills(t *testing.T) {
	profile := "studio"
	var mu sync.Mutex
	f := newFixture(t, func(o *Options) {
		o.Profiles = map[string]Profile{"studio": {Skills: loadTree(t, map[string]string{"pdf/SKILL.md": pdfSkill("A")})}, "other": {}}
		o.ProfileFor = func(rtsandbox.ChannelKey) string { mu.Lock(); defer mu.Unlock(); return profile }
	})
	if _, err := f.turnIn(context.Background(), "discord:n", "a"); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(f.party, "discord_n", runName)
	if got := runEntries(t, run); len(got) != 1 {
		t.Fatalf("run/ holds %v; want skills", got)
	}
	mu.Lock()
	profile = "other"
	mu.Unlock()
	if _, err := f.turnIn(context.Background(), "discord:n", "b"); err != nil {
		t.Fatal(err)
	}
	if got := runEntries(t, run); len(got) != 0 {
		t.Errorf("run/ holds %v under a profile without skills", got)
	}
}
