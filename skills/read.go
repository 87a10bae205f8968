package skills

import (
	"fmt"
	"path/filepath"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/internal/subpath"
)

// Read is read_skill: the text of path (SKILL.md when empty) in skill's
// folder, under the rules of the package doc. A refused escape wraps
// rtsandbox.ErrRefused; an unknown skill, a bad or missing path
// rtsandbox.ErrInvalid (a missing file also fs.ErrNotExist).
func (ix *Index) Read(skill, path string) (string, error) {
	if !ix.known(skill) {
		return "", fmt.Errorf("read_skill: %w: unknown skill %q", rtsandbox.ErrInvalid, skill)
	}
	if path == "" {
		path = SkillFile
	}
	if filepath.IsAbs(path) {
		return "", fmt.Errorf("read_skill %s: %w: path %q must be relative to the skill folder", skill, rtsandbox.ErrInvalid, path)
	}
	root, err := rootUnder(ix.dir, skill)
	if err != nil {
		return "", fmt.Errorf("read_skill %s: %w", skill, err)
	}
	file, err := filepath.EvalSymlinks(filepath.Join(root, path))
	if err != nil {
		return "", fmt.Errorf("read_skill %s: %w: %s: %w", skill, rtsandbox.ErrInvalid, path, err)
	}
	if !subpath.Below(root, file) {
		return "", fmt.Errorf("read_skill %s: %w: %s resolves outside the skill folder", skill, rtsandbox.ErrRefused, path)
	}
	data, err := ReadBounded(file)
	if err != nil {
		return "", fmt.Errorf("read_skill %s: %w", skill, err)
	}
	return truncate(string(data)), nil
}

// truncate cuts text at MaxReadChars UTF-16 units and marks the cut.
func truncate(text string) string {
	cut := rtsandbox.PrefixUTF16(text, MaxReadChars)
	if cut == text {
		return text
	}
	return cut + "\n\n" + TruncatedMarker
}
