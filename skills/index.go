package skills

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
)

// The bounds of what Load and Read take in.
const (
	// SkillFile is the file every skill folder holds.
	SkillFile = "SKILL.md"
	// MaxFileSize bounds SKILL.md and every file read_skill returns.
	MaxFileSize = 256 << 10
	// MaxFrontMatter bounds the front matter of SKILL.md.
	MaxFrontMatter = 64 << 10
	// MaxSkills bounds the skills of one directory.
	MaxSkills = 256
	// MaxReadChars is where read_skill cuts a text, in UTF-16 units.
	MaxReadChars = 40000
	// TruncatedMarker ends a text read_skill cut.
	TruncatedMarker = "[truncated at 40000 characters]"
)

// Skill is one indexed skill.
type Skill struct {
	Name        string
	Description string
	// Tools lists the tools this skill gates, in file order.
	Tools []string
}

// Index is the loaded skills of one directory. It is immutable and safe
// for concurrent use.
type Index struct {
	dir    string // realpath of the skills directory
	skills []Skill
	owner  map[string]string // tool → the skill that gates it
}

// Load indexes dir under the rules of the package doc.
func Load(dir string) (*Index, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("skills %s: %w: %w", dir, rtsandbox.ErrInvalid, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, fmt.Errorf("skills %s: %w: %w", dir, rtsandbox.ErrInvalid, err)
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return nil, fmt.Errorf("skills %s: %w: %w", dir, rtsandbox.ErrInvalid, err)
	}
	ix := &Index{dir: real, owner: map[string]string{}}
	for _, e := range entries {
		s, ok, err := loadSkill(real, e)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if len(ix.skills) == MaxSkills {
			return nil, fmt.Errorf("skills %s: %w: more than %d skills", dir, rtsandbox.ErrInvalid, MaxSkills)
		}
		ix.skills = append(ix.skills, s)
	}
	slices.SortFunc(ix.skills, func(a, b Skill) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range ix.skills {
		for _, tool := range s.Tools {
			if other, ok := ix.owner[tool]; ok && other != s.Name {
				return nil, fmt.Errorf("%s: %w: tool %q is already gated by skill %q",
					filepath.Join(real, s.Name, SkillFile), rtsandbox.ErrInvalid, tool, other)
			}
			ix.owner[tool] = s.Name
		}
	}
	return ix, nil
}

// loadSkill reads one directory entry; ok is false for an entry that is no
// skill (a plain file, a folder without SKILL.md).
func loadSkill(dir string, e fs.DirEntry) (s Skill, ok bool, err error) {
	root := filepath.Join(dir, e.Name())
	fi, err := os.Lstat(root)
	switch {
	case err != nil:
		return Skill{}, false, fmt.Errorf("%s: %w: %w", root, rtsandbox.ErrInvalid, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return Skill{}, false, fmt.Errorf("%s: %w: a skill folder must not be a symlink", root, rtsandbox.ErrRefused)
	case !fi.IsDir():
		return Skill{}, false, nil
	}
	if _, err := rootUnder(dir, e.Name()); err != nil {
		return Skill{}, false, err
	}
	file := filepath.Join(root, SkillFile)
	data, err := readBounded(file)
	if errors.Is(err, fs.ErrNotExist) {
		return Skill{}, false, nil
	}
	if err != nil {
		return Skill{}, false, err
	}
	fm, err := parseFrontMatter(data)
	if err != nil {
		return Skill{}, false, fmt.Errorf("%s: %w", file, err)
	}
	if fm.Name != e.Name() {
		return Skill{}, false, fmt.Errorf("%s: %w: name %q must equal the directory name %q",
			file, rtsandbox.ErrInvalid, fm.Name, e.Name())
	}
	return Skill(fm), true, nil
}

// rootUnder returns the realpath of the skill root dir/name and checks it
// lies strictly under dir (itself a realpath).
func rootUnder(dir, name string) (string, error) {
	root := filepath.Join(dir, name)
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %w", root, rtsandbox.ErrInvalid, err)
	}
	if !strictlyUnder(dir, real) {
		return "", fmt.Errorf("%s: %w: the skill folder resolves outside the skills directory", root, rtsandbox.ErrRefused)
	}
	return real, nil
}

// strictlyUnder reports whether p lies below dir (both clean absolute
// paths), never equal to it.
func strictlyUnder(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// readBounded reads the regular file p, not following a final symlink, and
// refuses one of more than MaxFileSize bytes. A missing file wraps
// fs.ErrNotExist.
func readBounded(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s: %w: a symlink is not followed", p, rtsandbox.ErrRefused)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p, rtsandbox.ErrInvalid, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p, rtsandbox.ErrInvalid, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: not a regular file", p, rtsandbox.ErrInvalid)
	}
	// The size is checked on what is read too: the file may grow after
	// the stat.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p, rtsandbox.ErrInvalid, err)
	}
	if fi.Size() > MaxFileSize || len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", p, rtsandbox.ErrRefused, MaxFileSize)
	}
	return data, nil
}

// Skills returns a copy of the skills, sorted by name.
func (ix *Index) Skills() []Skill {
	out := make([]Skill, len(ix.skills))
	for i, s := range ix.skills {
		s.Tools = slices.Clone(s.Tools)
		out[i] = s
	}
	return out
}

// known reports whether name is an indexed skill.
func (ix *Index) known(name string) bool {
	_, ok := slices.BinarySearchFunc(ix.skills, name, func(s Skill, n string) int { return strings.Compare(s.Name, n) })
	return ok
}
