package skilltree

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/skills"
)

// frontMatter is the decoded head of a SKILL.md. Its fields match
// skills.Skill.
type frontMatter struct {
	Name        string
	Description string
	Tools       []string
}

// rawFrontMatter is what the strict decoder fills: nodes, so a number or a
// mapping is refused where a string is due instead of being converted.
type rawFrontMatter struct {
	Name        yaml.Node `yaml:"name"`
	Description yaml.Node `yaml:"description"`
	Tools       yaml.Node `yaml:"tools"`
}

// parseFrontMatter cuts the front matter out of a SKILL.md and decodes it
// strictly. Errors wrap rtsandbox.ErrInvalid and name the rule.
func parseFrontMatter(data []byte) (frontMatter, error) {
	head, err := cutFrontMatter(data)
	if err != nil {
		return frontMatter{}, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(head))
	dec.KnownFields(true)
	var raw rawFrontMatter
	switch err := dec.Decode(&raw); {
	case errors.Is(err, io.EOF):
		return frontMatter{}, invalid("the front matter is empty")
	case err != nil:
		return frontMatter{}, invalid("front matter: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return frontMatter{}, invalid("the front matter must be one YAML mapping")
	}
	var fm frontMatter
	if fm.Name, err = str(&raw.Name, "name"); err != nil {
		return frontMatter{}, err
	}
	if fm.Description, err = str(&raw.Description, "description"); err != nil {
		return frontMatter{}, err
	}
	if fm.Tools, err = tools(&raw.Tools); err != nil {
		return frontMatter{}, err
	}
	return fm, nil
}

// cutFrontMatter returns the bytes between a first line "---" and the next
// "---" line.
func cutFrontMatter(data []byte) ([]byte, error) {
	first, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok || string(trimLine(first)) != "---" {
		return nil, invalid(`the file must start with a front matter line "---"`)
	}
	tooLarge := invalid("the front matter is larger than %d bytes", skills.MaxFrontMatter)
	for off := 0; ; {
		line, _, more := bytes.Cut(rest[off:], []byte("\n"))
		if string(trimLine(line)) == "---" {
			return rest[:off], nil
		}
		if !more {
			break
		}
		if off += len(line) + 1; off > skills.MaxFrontMatter {
			return nil, tooLarge
		}
	}
	return nil, invalid(`the front matter has no closing "---" line`)
}

// str checks that n is a non-empty string scalar.
func str(n *yaml.Node, key string) (string, error) {
	if n.Kind == 0 {
		return "", invalid("%s is missing", key)
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", invalid("%s must be a string (line %d)", key, n.Line)
	}
	if n.Value == "" {
		return "", invalid("%s must not be empty (line %d)", key, n.Line)
	}
	return n.Value, nil
}

// tools checks the optional tools key: a list of non-empty strings without
// repeats.
func tools(n *yaml.Node) ([]string, error) {
	if n.Kind == 0 || n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, invalid("tools must be a list of tool names (line %d)", n.Line)
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		name, err := str(item, fmt.Sprintf("tools[%d]", i))
		if err != nil {
			return nil, err
		}
		for _, seen := range out {
			if seen == name {
				return nil, invalid("tools[%d] repeats %q (line %d)", i, name, item.Line)
			}
		}
		out = append(out, name)
	}
	return out, nil
}

// invalid is a rule broken by a SKILL.md.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{rtsandbox.ErrInvalid}, args...)...)
}

// trimLine drops a line's trailing "\r".
func trimLine(b []byte) []byte { return bytes.TrimSuffix(b, []byte("\r")) }
