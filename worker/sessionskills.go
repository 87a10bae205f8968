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

// This file is the session worker's skills (session spec §5.5): the index
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
// skill claims a tool the worker does not have (§5.2 step 5).
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
func parseSkillsConfig(obj map[string]json.RawMessage) (dir string, list []wire.SessionSkill, ok bool) {
	rawDir, hasDir := obj["skillsDir"]
	rawList, hasList := obj["skills"]
	if !hasDir && !hasList {
		return "", nil, true
	}
	dir, okDir := str(rawDir)
	items, okList := array(rawList)
	if !okDir || !okList || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || len(items) == 0 || len(items) > skills.MaxSkills {
		return "", nil, false
	}
	list = make([]wire.SessionSkill, 0, len(items))
	for _, item := range items {
		s, ok := parseSkill(item)
		if !ok {
			return "", nil, false
		}
		list = append(list, s)
	}
	if _, err := skills.Check(list); err != nil {
		return "", nil, false
	}
	return dir, list, true
}

// parseSkill reads one entry of skills.
func parseSkill(raw json.RawMessage) (wire.SessionSkill, bool) {
	var s wire.SessionSkill
	obj, ok := object(raw)
	if !ok {
		return s, false
	}
	name, okName := str(obj["name"])
	desc, okDesc := str(obj["description"])
	if !okName || !okDesc {
		return s, false
	}
	s = wire.SessionSkill{Name: name, Description: desc}
	rawTools, present := obj["tools"]
	if !present {
		return s, true
	}
	tools, ok := array(rawTools)
	if !ok {
		return s, false
	}
	for _, t := range tools {
		tool, ok := str(t)
		if !ok {
			return s, false
		}
		s.Tools = append(s.Tools, tool)
	}
	return s, true
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
