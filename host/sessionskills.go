package host

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/skills"
	"github.com/rtsandbox/rtsandbox/skills/skilltree"
)

// sessionSkills reads the skills directory of every session profile in use
// that names one (profiles.<name>.skills), once, when serve starts: the
// tree is validated and copied into memory (skilltree.Load), and every
// tool a skill gates must be one the profile's worker gets from brokers
// (a host tool by its name, an MCP tool as <server>/<tool>). An error
// names the key, the file and the rule. A directory that holds no skill
// gives no tree. The copies stay as read until serve restarts, like the
// rest of the config.
func sessionSkills(cfg *config.Config, brokers map[string]broker.Config) (map[string]*skilltree.Tree, error) {
	out := map[string]*skilltree.Tree{}
	for _, name := range sessionProfiles(cfg) {
		p, _ := cfg.Profile(name)
		if p.Skills == "" {
			continue
		}
		tree, err := skilltree.Load(p.Skills)
		if err == nil {
			err = checkClaims(tree, brokerTools(brokers[name]))
		}
		if err != nil {
			return nil, fmt.Errorf("profiles.%s.skills: %w", name, err)
		}
		if len(tree.Skills()) > 0 { // a directory without skills is none
			out[name] = tree
		}
	}
	return out, nil
}

// brokerTools are the tools bc declares to the worker, as skills name
// them: a host tool by its name, an MCP tool as <server>/<tool>.
func brokerTools(bc broker.Config) []string {
	var out []string
	for _, t := range bc.Tools {
		out = append(out, t.Spec.Name)
	}
	for _, m := range bc.MCP {
		for _, t := range m.Tools {
			out = append(out, skills.MCPToolClaim(m.Name, t.Name))
		}
	}
	return out
}

// profileTools are the tools of the session profile p as the config
// lists them, named as brokerTools names them (the doctor's view: MCP
// tools written bare are listed by name too).
func profileTools(cfg *config.Config, p config.Profile) []string {
	out := slices.Clone(p.Tools)
	for _, m := range cfg.MCP {
		if slices.Contains(p.MCP, m.Name) {
			for _, t := range m.Tools {
				out = append(out, skills.MCPToolClaim(m.Name, t.Name))
			}
		}
	}
	return out
}

// checkClaims requires every tool a skill of tree gates to be one of
// known, as the worker's startup check does (docs/session.md, "Process" "tools are not
// registered"), so a misspelt name fails serve's start, not every start
// of a worker.
func checkClaims(tree *skilltree.Tree, known []string) error {
	for _, s := range tree.Skills() {
		for i, tool := range s.Tools {
			if !slices.Contains(known, tool) {
				list := "none"
				if len(known) > 0 {
					list = strings.Join(known, ", ")
				}
				return fmt.Errorf("%s: %w: tools[%d] %q is not a tool of this profile (known: %s)",
					filepath.Join(tree.Dir(), s.Name, skills.SkillFile), rtsandbox.ErrInvalid, i, tool, list)
			}
		}
	}
	return nil
}

// skillsChecks are the doctor's checks of the skills directories of the
// session profiles in use: the rules serve applies when it starts, with
// the profile's tools as the config lists them.
func skillsChecks(cfg *config.Config) []Check {
	const name = "skills"
	var out []Check
	for _, profile := range sessionProfiles(cfg) {
		p, _ := cfg.Profile(profile)
		if p.Skills == "" {
			continue
		}
		tree, err := skilltree.Load(p.Skills)
		if err == nil {
			err = checkClaims(tree, profileTools(cfg, p))
		}
		if err != nil {
			out = append(out, fail(name, "fix the file and the rule named (docs/session-mode.md#skills)", "profiles.%s.skills: %v", profile, err))
			continue
		}
		out = append(out, ok(name, "profiles.%s.skills: %d skill(s) in %s", profile, len(tree.Skills()), tree.Dir()))
	}
	return out
}
