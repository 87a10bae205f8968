package skills

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/subpath"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The bounds of an index and of what Read takes in.
const (
	// SkillFile is the file every skill folder holds.
	SkillFile = "SKILL.md"
	// MaxFileSize bounds SKILL.md and every file read_skill returns.
	MaxFileSize = 256 << 10
	// MaxFrontMatter bounds the front matter of SKILL.md, and so a
	// description.
	MaxFrontMatter = 64 << 10
	// MaxSkills bounds the skills of one directory.
	MaxSkills = 256
	// MaxIndexBytes bounds the bytes of an index's names, descriptions
	// and tool names together: the index rides in /worker/config (read
	// up to 1 MiB) and its block in every request's system prompt.
	MaxIndexBytes = 64 << 10
	// MaxReadChars is where read_skill cuts a text, in UTF-16 units.
	MaxReadChars = 40000
	// TruncatedMarker ends a text read_skill cut.
	TruncatedMarker = "[truncated at 40000 characters]"
)

// Skill is one indexed skill; Tools lists the tools it gates, in file
// order.
type Skill = wire.SessionSkill

// Index is the skills of one directory. It is immutable and safe for
// concurrent use.
type Index struct {
	dir    string // realpath of the skills directory
	skills []Skill
	owner  map[string]string // tool → the skill that gates it
}

// Check reports the first rule of the package doc that list breaks, and
// the name of the skill that breaks it ("" for the list as a whole).
// Errors wrap rtsandbox.ErrInvalid.
func Check(list []Skill) (skill string, err error) {
	if len(list) > MaxSkills {
		return "", fmt.Errorf("%w: more than %d skills", rtsandbox.ErrInvalid, MaxSkills)
	}
	names := map[string]bool{}
	owner := map[string]string{}
	size := 0
	for _, s := range list {
		if err := checkSkill(s, names, owner); err != nil {
			return s.Name, err
		}
		size += len(s.Name) + len(s.Description)
		for _, tool := range s.Tools {
			size += len(tool)
		}
		if size > MaxIndexBytes {
			return s.Name, fmt.Errorf("%w: the names, descriptions and tools of the skills hold more than %d bytes", rtsandbox.ErrInvalid, MaxIndexBytes)
		}
	}
	return "", nil
}

// checkSkill applies Check's rules to s, given the names and tool owners
// of the skills before it, which it extends.
func checkSkill(s Skill, names map[string]bool, owner map[string]string) error {
	switch {
	case !wire.ValidSafeName(s.Name):
		return fmt.Errorf("%w: name %q is not a safe folder name", rtsandbox.ErrInvalid, s.Name)
	case names[s.Name]:
		return fmt.Errorf("%w: name %q is used twice", rtsandbox.ErrInvalid, s.Name)
	case s.Description == "":
		return fmt.Errorf("%w: description must not be empty", rtsandbox.ErrInvalid)
	case len(s.Description) > MaxFrontMatter:
		return fmt.Errorf("%w: description is larger than %d bytes", rtsandbox.ErrInvalid, MaxFrontMatter)
	}
	names[s.Name] = true
	for i, tool := range s.Tools {
		switch other, gated := owner[tool]; {
		case !ValidToolClaim(tool):
			return fmt.Errorf("%w: tools[%d] %q must name a host tool (web_fetch) or an MCP tool (<server>/<tool>)",
				rtsandbox.ErrInvalid, i, tool)
		case gated && other == s.Name:
			return fmt.Errorf("%w: tools[%d] repeats %q", rtsandbox.ErrInvalid, i, tool)
		case gated:
			return fmt.Errorf("%w: tool %q is already gated by skill %q", rtsandbox.ErrInvalid, tool, other)
		}
		owner[tool] = s.Name
	}
	return nil
}

// ValidToolClaim reports whether tool can name a tool in a skill's tools:
// a host tool's name (rtsandbox.ValidToolName) or <server>/<tool> with a
// valid MCP server name and MCP tool name.
func ValidToolClaim(tool string) bool {
	server, name, mcp := strings.Cut(tool, "/")
	if !mcp {
		return rtsandbox.ValidToolName(tool)
	}
	return rtsandbox.ValidToolName(server) && rtsandbox.ValidMCPToolName(name)
}

// MCPToolClaim is how a skill names tool of the MCP server server.
func MCPToolClaim(server, tool string) string { return server + "/" + tool }

// New checks list and binds it to dir, the directory that holds the skill
// folders, under the rules of the package doc.
func New(dir string, list []Skill) (*Index, error) {
	if skill, err := Check(list); err != nil {
		if skill != "" {
			return nil, fmt.Errorf("skills %s: skill %q: %w", dir, skill, err)
		}
		return nil, fmt.Errorf("skills %s: %w", dir, err)
	}
	real, err := realDir(dir)
	if err != nil {
		return nil, err
	}
	ix := &Index{dir: real, skills: make([]Skill, 0, len(list)), owner: map[string]string{}}
	for _, s := range list {
		root, err := rootUnder(real, s.Name)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Lstat(filepath.Join(root, SkillFile)); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: %w: no regular %s", root, rtsandbox.ErrInvalid, SkillFile)
		}
		s.Tools = slices.Clone(s.Tools)
		ix.skills = append(ix.skills, s)
		for _, tool := range s.Tools {
			ix.owner[tool] = s.Name
		}
	}
	slices.SortFunc(ix.skills, func(a, b Skill) int { return strings.Compare(a.Name, b.Name) })
	return ix, nil
}

// realDir is the absolute realpath of the skills directory dir.
func realDir(dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return "", fmt.Errorf("skills %s: %w: %w", dir, rtsandbox.ErrInvalid, err)
	}
	return real, nil
}

// rootUnder returns the realpath of the skill root dir/name and checks it
// lies strictly under dir (itself a realpath).
func rootUnder(dir, name string) (string, error) {
	root := filepath.Join(dir, name)
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %w", root, rtsandbox.ErrInvalid, err)
	}
	if !subpath.Below(dir, real) {
		return "", fmt.Errorf("%s: %w: the skill folder resolves outside the skills directory", root, rtsandbox.ErrRefused)
	}
	return real, nil
}

// ReadBounded reads the regular file p, not following a final symlink and
// not blocking on a FIFO, and refuses one of more than MaxFileSize bytes
// (rtsandbox.ErrRefused) or that is no regular file (rtsandbox.ErrInvalid).
// A missing file wraps fs.ErrNotExist.
func ReadBounded(p string) ([]byte, error) {
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

// Claims returns every tool the index gates, sorted.
func (ix *Index) Claims() []string {
	out := make([]string, 0, len(ix.owner))
	for tool := range ix.owner {
		out = append(out, tool)
	}
	slices.Sort(out)
	return out
}

// known reports whether name is an indexed skill.
func (ix *Index) known(name string) bool {
	_, ok := slices.BinarySearchFunc(ix.skills, name, func(s Skill, n string) int { return strings.Compare(s.Name, n) })
	return ok
}
