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
			err = checkClaims(tree, brokers[name])
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

// checkClaims requires every tool a skill of tree gates to be a tool of
// bc, as the worker's startup check does (§5.2 "tools are not
// registered"), so a misspelt name fails serve's start, not every start
// of a worker.
func checkClaims(tree *skilltree.Tree, bc broker.Config) error {
	var known []string
	for _, t := range bc.Tools {
		known = append(known, t.Spec.Name)
	}
	for _, m := range bc.MCP {
		for _, t := range m.Tools {
			known = append(known, skills.MCPToolClaim(m.Name, t.Name))
		}
	}
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
