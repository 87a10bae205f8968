package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/skills"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the session worker's skills (docs/session.md, "Skills"): the index
// /worker/config carries, bound at startup to the host's read-only copy
// of the tree; the block appended to the system prompt; read_skill; and
// the gate that holds back every tool a skill claims until that skill's
// SKILL.md has been read. The worker trusts the host's index (the host
// parsed the front matter; this worker has no YAML parser and the config
// comes over the trusted socket), but checks it as data (skills.Check),
// requires each skill's folder and SKILL.md in the copy, and applies
// read_skill's realpath and size rules on every read.

// readSkillName is read_skill's model-facing name.
const readSkillName = "read_skill"

// errToolsNotRegistered is the reference's fatal startup error when a
// skill claims a tool the worker does not have (docs/session.md, "Process").
var errToolsNotRegistered = errors.New("tools are not registered")

// sessionSkills are the worker's skills; nil when the profile has none.
// The gate lives as long as the process: a skill read once stays read.
type sessionSkills struct {
	index *skills.Index
	gate  *skills.Gate
}

// parseSkillsConfig reads the skills fields of a /worker/config object:
// skillsDir an absolute clean path and skills an array of {name,
// description, tools?} objects (strings, tools an array of strings) that
// passes skills.Check; both or neither. ok is false for anything else.
//
// obj is the config's members, read once by parseWorkerConfig; they are
// filled into skillsConfigWire by exact name.
func parseSkillsConfig(obj map[string]json.RawMessage) (dir string, list []wire.SessionSkill, ok bool) {
	var w skillsConfigWire
	_ = wire.FillFrom(obj, &w) // cannot fail: both members are wire.Checked
	if !w.Dir.Present && !w.Skills.Present {
		return "", nil, true
	}
	dir = string(w.Dir.Value)
	if !w.Dir.Present || w.Dir.Bad || !w.Skills.Present || w.Skills.Bad || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", nil, false
	}
	if _, err := skills.Check(w.Skills.Value); err != nil {
		return "", nil, false
	}
	return dir, w.Skills.Value, true
}

// skillsConfigWire is the skills members of a /worker/config object.
type skillsConfigWire struct {
	Dir    wire.Checked[wire.String]   `json:"skillsDir,omitempty"`
	Skills wire.Checked[skillListWire] `json:"skills,omitempty"`
}

// skillListWire is skills: 1 to skills.MaxSkills entries.
type skillListWire []wire.SessionSkill

func (l *skillListWire) UnmarshalJSON(b []byte) error {
	var items []skillWire
	if firstByte(b) != '[' || json.Unmarshal(b, &items) != nil || len(items) == 0 || len(items) > skills.MaxSkills {
		return errConfig
	}
	*l = make(skillListWire, len(items))
	for i, s := range items {
		(*l)[i] = wire.SessionSkill{Name: string(s.Name), Description: string(s.Description)}
		if len(s.Tools) > 0 { // an empty list is none
			(*l)[i].Tools = s.Tools
		}
	}
	return nil
}

// skillWire is one entry of skills: name and description strings, tools
// an array of strings when present.
type skillWire struct {
	Name        wire.String  `json:"name"`
	Description wire.String  `json:"description"`
	Tools       wire.Strings `json:"tools,omitempty"`
}

func (s *skillWire) UnmarshalJSON(b []byte) error {
	type plain skillWire
	return wire.Fill(b, (*plain)(s))
}

// loadSkills binds cfg's index to its copy and requires every tool a
// skill claims to be one of the worker's: a host tool by its name, an
// MCP tool the broker discovered as <server>/<tool>. nil when cfg has no
// skills.
func loadSkills(cfg wire.SessionWorkerConfig) (*sessionSkills, error) {
	if len(cfg.Skills) == 0 {
		return nil, nil
	}
	ix, err := skills.New(cfg.SkillsDir, cfg.Skills)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	var have []string
	for _, spec := range cfg.Tools {
		have = append(have, spec.Name)
	}
	for _, server := range cfg.MCP {
		for _, spec := range server.Tools {
			have = append(have, skills.MCPToolClaim(server.Server, spec.Name))
		}
	}
	var missing []string
	for _, tool := range ix.Claims() {
		if !slices.Contains(have, tool) {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", errToolsNotRegistered, strings.Join(missing, ", "))
	}
	return &sessionSkills{index: ix, gate: ix.Gate()}, nil
}

// prompt appends the skills block to the operator's prompt.
func (s *sessionSkills) prompt(operator string) string {
	if s == nil {
		return operator
	}
	block := s.index.PromptBlock()
	if operator == "" {
		return block
	}
	return operator + "\n\n" + block
}

// gated makes f, the tool a profile names claim, answer the gate's
// reason instead of running while a skill that claims it is unread.
func (s *sessionSkills) gated(claim string, f *function) *function {
	if s == nil {
		return f
	}
	if run := f.run; run != nil {
		f.run = func(ctx context.Context, in toolInput) (string, error) {
			if reason, blocked := s.gate.Blocked(claim); blocked {
				return reason, nil
			}
			return run(ctx, in)
		}
	}
	if owned := f.owned; owned != nil {
		f.owned = func(ctx context.Context, in toolInput) (string, string, error) {
			if reason, blocked := s.gate.Blocked(claim); blocked {
				return reason, "", nil
			}
			return owned(ctx, in)
		}
	}
	return f
}

// readSkillSpec is read_skill's declaration.
var readSkillSpec = rtsandbox.ToolSpec{
	Name: readSkillName,
	Description: "Read a skill listed in the system prompt: its SKILL.md, or another file of the skill's folder. " +
		"Read a skill's SKILL.md before using the tools it names.",
	Parameters: json.RawMessage(`{"type":"object","properties":{` +
		`"skill":{"type":"string","description":"The skill's name."},` +
		`"path":{"type":"string","description":"A file of the skill's folder, relative to it; SKILL.md when left out."}},` +
		`"required":["skill"],"additionalProperties":false}`),
}

// addReadSkill adds read_skill to t. A successful read of a skill's
// SKILL.md opens the gate of the tools the skill claims.
func (s *sessionSkills) addReadSkill(t *toolTable) {
	if s == nil {
		return
	}
	t.add(&function{spec: readSkillSpec, run: s.readSkill})
}

// errReadSkillInput marks read_skill arguments that are not {skill:
// string, path?: string}.
var errReadSkillInput = errors.New("read_skill wants a skill name and an optional path")

// readSkill runs read_skill.
func (s *sessionSkills) readSkill(_ context.Context, in toolInput) (string, error) {
	skill, ok := str(in.fields["skill"])
	var path string
	if raw, present := in.fields["path"]; ok && present {
		path, ok = str(raw)
	}
	if !ok {
		return "", errReadSkillInput
	}
	text, err := s.index.Read(skill, path)
	if err != nil {
		return "", err
	}
	if path == "" || filepath.Clean(path) == skills.SkillFile {
		s.gate.MarkRead(skill)
	}
	return text, nil
}
