package skilltree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/skills"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The bounds of a copied tree.
const (
	// MaxTreeBytes bounds the bytes of all files of a tree.
	MaxTreeBytes = 16 << 20
	// MaxTreeEntries bounds the files and folders of a tree.
	MaxTreeEntries = 2048
	// MaxTreeDepth bounds how deep a file lies below the skills
	// directory ("pdf/SKILL.md" is 2).
	MaxTreeDepth = 16
)

// Entry is one folder or file of a Tree.
type Entry struct {
	// Path is slash-separated and relative to the skills directory
	// ("pdf", "pdf/SKILL.md").
	Path string
	Dir  bool
	// Data is a file's content; shared with the Tree, never to be
	// modified.
	Data []byte
}

// Tree is a validated copy of a skills directory: its index and its
// skill folders. It is immutable and safe for concurrent use.
type Tree struct {
	dir     string // the realpath read
	skills  []skills.Skill
	entries []Entry // sorted by Path: a folder before what it holds
	digest  string
}

// Load reads, validates and copies the skills directory dir under the
// rules of the package doc.
func Load(dir string) (*Tree, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return nil, fmt.Errorf("skills %s: %w: %w", dir, rtsandbox.ErrInvalid, err)
	}
	top, err := os.ReadDir(real)
	if err != nil {
		return nil, fmt.Errorf("skills %s: %w: %w", dir, rtsandbox.ErrInvalid, err)
	}
	l := &loader{dir: real}
	t := &Tree{dir: real}
	for _, e := range top {
		s, ok, err := l.skill(e.Name())
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if len(t.skills) == skills.MaxSkills {
			return nil, fmt.Errorf("skills %s: %w: more than %d skills", dir, rtsandbox.ErrInvalid, skills.MaxSkills)
		}
		t.skills = append(t.skills, s)
	}
	slices.SortFunc(t.skills, func(a, b skills.Skill) int { return strings.Compare(a.Name, b.Name) })
	if name, err := skills.Check(t.skills); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(real, name, skills.SkillFile), err)
	}
	t.entries = l.entries
	slices.SortFunc(t.entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	t.digest = digest(t.entries)
	return t, nil
}

// loader is one Load's walk and its running totals.
type loader struct {
	dir     string
	entries []Entry
	bytes   int
}

// skill indexes and copies the top-level entry name; ok is false for one
// that is no skill (a plain file, a folder without SKILL.md).
func (l *loader) skill(name string) (s skills.Skill, ok bool, err error) {
	root := filepath.Join(l.dir, name)
	fi, err := os.Lstat(root)
	switch {
	case err != nil:
		return s, false, fmt.Errorf("%s: %w: %w", root, rtsandbox.ErrInvalid, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return s, false, fmt.Errorf("%s: %w: a skill folder must not be a symlink", root, rtsandbox.ErrRefused)
	case !fi.IsDir():
		return s, false, nil
	}
	file := filepath.Join(root, skills.SkillFile)
	if _, err := os.Lstat(file); errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	if err := l.add(name, fi); err != nil {
		return s, false, err
	}
	if err := l.walk(name, 1); err != nil {
		return s, false, err
	}
	i := slices.IndexFunc(l.entries, func(e Entry) bool { return e.Path == name+"/"+skills.SkillFile })
	if i < 0 || l.entries[i].Dir {
		return s, false, fmt.Errorf("%s: %w: not a regular file", file, rtsandbox.ErrInvalid)
	}
	fm, err := parseFrontMatter(l.entries[i].Data)
	if err != nil {
		return s, false, fmt.Errorf("%s: %w", file, err)
	}
	if fm.Name != name {
		return s, false, fmt.Errorf("%s: %w: name %q must equal the directory name %q", file, rtsandbox.ErrInvalid, fm.Name, name)
	}
	return skills.Skill(fm), true, nil
}

// walk copies the folder rel (slash-separated, depth levels down) and
// everything in it.
func (l *loader) walk(rel string, depth int) error {
	abs := filepath.Join(l.dir, filepath.FromSlash(rel))
	list, err := os.ReadDir(abs)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", abs, rtsandbox.ErrInvalid, err)
	}
	for _, e := range list {
		p := path.Join(rel, e.Name())
		fi, err := os.Lstat(filepath.Join(abs, e.Name()))
		if err != nil {
			return fmt.Errorf("%s: %w: %w", filepath.Join(abs, e.Name()), rtsandbox.ErrInvalid, err)
		}
		if depth+1 > MaxTreeDepth {
			return fmt.Errorf("%s: %w: more than %d levels below the skills directory", filepath.Join(abs, e.Name()), rtsandbox.ErrInvalid, MaxTreeDepth)
		}
		if err := l.add(p, fi); err != nil {
			return err
		}
		if fi.IsDir() {
			if err := l.walk(p, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// add copies the entry p, which fi describes (not followed), into the
// tree: a folder, or a regular file read bounded.
func (l *loader) add(p string, fi fs.FileInfo) error {
	abs := filepath.Join(l.dir, filepath.FromSlash(p))
	mode := fi.Mode()
	switch {
	case !wire.ValidSafeName(fi.Name()):
		return fmt.Errorf("%s: %w: the name is not a safe file name", abs, rtsandbox.ErrInvalid)
	case mode&fs.ModeSymlink != 0:
		return fmt.Errorf("%s: %w: a symlink is not followed", abs, rtsandbox.ErrRefused)
	case !mode.IsDir() && !mode.IsRegular():
		return fmt.Errorf("%s: %w: not a regular file or a folder (a FIFO, socket or device)", abs, rtsandbox.ErrRefused)
	case len(l.entries) == MaxTreeEntries:
		return fmt.Errorf("%s: %w: more than %d files and folders", abs, rtsandbox.ErrInvalid, MaxTreeEntries)
	}
	e := Entry{Path: p, Dir: mode.IsDir()}
	if !e.Dir {
		data, err := skills.ReadBounded(abs)
		if err != nil {
			return err
		}
		if l.bytes += len(data); l.bytes > MaxTreeBytes {
			return fmt.Errorf("%s: %w: the skill folders hold more than %d bytes", abs, rtsandbox.ErrInvalid, MaxTreeBytes)
		}
		e.Data = data
	}
	l.entries = append(l.entries, e)
	return nil
}

// digest is a hash of every entry's kind, path and bytes, in order.
func digest(entries []Entry) string {
	h := sha256.New()
	for _, e := range entries {
		kind := "d"
		if !e.Dir {
			kind = "f" + strconv.Itoa(len(e.Data))
		}
		h.Write([]byte(kind + "\x00" + e.Path + "\x00"))
		h.Write(e.Data)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Dir is the realpath of the directory the tree was read from.
func (t *Tree) Dir() string { return t.dir }

// Skills returns a copy of the index, sorted by name.
func (t *Tree) Skills() []skills.Skill {
	out := make([]skills.Skill, len(t.skills))
	for i, s := range t.skills {
		s.Tools = slices.Clone(s.Tools)
		out[i] = s
	}
	return out
}

// Entries returns the folders and files of the copy, a folder before
// what it holds. The Data slices are the tree's own: read them only.
func (t *Tree) Entries() []Entry { return slices.Clone(t.entries) }

// Digest is a hex hash of the copy: equal trees have equal digests.
func (t *Tree) Digest() string { return t.digest }
