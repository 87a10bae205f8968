package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// Profile modes (profiles.<name>.mode).
const (
	// ModeSealed runs every turn in a fresh container (the sealed
	// runtime), with the model block and every configured tool.
	ModeSealed = rtsandbox.ModeSealed
	// ModeSession keeps one long-lived container per channel (the session
	// runtime), with the profile's model, MCP servers and tools only.
	ModeSession = rtsandbox.ModeSession
)

const (
	// DefaultProfile is the built-in profile of every channel that
	// channels_profile does not name, unless default_profile names
	// another: mode sealed, exactly as before profiles existed. A file may
	// redefine it.
	DefaultProfile = "default"
	// DefaultModel names the model block among the models a session
	// profile may pick; models: may not define it.
	DefaultModel = "default"
)

// Profile is what a channel gets: the runtime (Mode) and, in session mode,
// the model, the MCP servers and the host tools its worker may use.
type Profile struct {
	Mode string // ModeSealed or ModeSession
	// Model names the profile's model: DefaultModel (the model block) or
	// a key of Config.Models. Session mode only; "" for sealed.
	Model string
	// MCP names servers of the mcp list, in the file's order; session
	// mode only.
	MCP []string
	// Tools names host tools (tools[].name, or web_fetch and research
	// when the web section turns them on); session mode only.
	Tools []string
	// Skills is the operator's skills directory (docs/session.md, "Skills"):
	// absolute and clean, "" for none; session mode only. Parse checks
	// only the path; serve reads and validates the tree when it starts
	// (package skilltree), as it does the party directory.
	Skills string
	// Runtime is the OCI runtime of the profile's containers as written
	// (profiles.<name>.runtime, session mode only); "" means
	// sandbox.runtime. Config.RuntimeOf resolves it.
	Runtime string
}

// builtinDefault is DefaultProfile when the file does not define it.
var builtinDefault = Profile{Mode: ModeSealed}

// profileNameRE is the session container's profile label rule
// (docs/session.md, "The container"), so every profile name can label its container.
var profileNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,100}$`)

// modelNameRE names an entry of models:.
var modelNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,47}$`)

// Profile returns the profile called name and whether it exists. A Config
// built by hand without profiles has the built-in DefaultProfile.
func (c *Config) Profile(name string) (Profile, bool) {
	if p, ok := c.Profiles[name]; ok {
		return p, true
	}
	if name == DefaultProfile {
		return builtinDefault, true
	}
	return Profile{}, false
}

// ProfileFor returns the name and profile of channel: its channels_profile
// entry, else default_profile, else the built-in DefaultProfile. Parse
// refuses a mapping to a profile that does not exist, so the profile is
// always found for a parsed Config; a hand-built Config naming a missing
// one gets the built-in sealed default, never session mode by accident.
func (c *Config) ProfileFor(channel rtsandbox.ChannelKey) (string, Profile) {
	name := c.ChannelProfiles[channel]
	if name == "" {
		name = c.DefaultProfile
	}
	if name == "" {
		name = DefaultProfile
	}
	if p, ok := c.Profile(name); ok {
		return name, p
	}
	return DefaultProfile, builtinDefault
}

// UsesSessions reports whether any channel gets a session-mode profile:
// default_profile or a channels_profile entry names one. A session profile
// no channel uses needs no session runtime.
func (c *Config) UsesSessions() bool {
	if _, p := c.ProfileFor(""); p.Mode == ModeSession { // "" is in no mapping
		return true
	}
	for ch := range c.ChannelProfiles {
		if _, p := c.ProfileFor(ch); p.Mode == ModeSession {
			return true
		}
	}
	return false
}

// SealedRuntime is the OCI runtime of sealed turns: sandbox.runtime, runc
// when unset.
func (c *Config) SealedRuntime() string { return container.EngineRuntime(c.Sandbox.Runtime) }

// RuntimeOf is the OCI runtime of a profile's containers: the session
// profile's own runtime, else sandbox.runtime, else runc. A sealed profile
// gets SealedRuntime.
func (c *Config) RuntimeOf(p Profile) string {
	if p.Mode == ModeSession && p.Runtime != "" {
		return p.Runtime
	}
	return c.SealedRuntime()
}

// MinRunscPIDs is the least PID limit of a container under runsc. gVisor's
// own threads (its kernel's, sized by the host's CPUs) count against the
// container's limit from outside: on a 2-core host the worker's sandbox
// did not start with 40, and did with 48 (docs/operations.md, "gVisor
// (runsc)").
const MinRunscPIDs = 64

// runscPIDs refuses a PID limit too small for gVisor to start under, for
// the containers that run under runsc: sealed turns (sandbox.limits.pids)
// and session profiles in use (session.limits.pids).
func (p *parser) runscPIDs(c *Config) {
	const rule = "must be at least %d while %s is runsc (gVisor's own threads count against the limit)"
	if c.SealedRuntime() == container.RuntimeRunsc && c.Sandbox.Limits.PIDs < MinRunscPIDs {
		p.fail(nil, "sandbox.limits.pids", rule, MinRunscPIDs, "sandbox.runtime")
	}
	if c.Session.Limits.PIDs >= MinRunscPIDs {
		return
	}
	used := append([]rtsandbox.ChannelKey{""}, slices.Collect(maps.Keys(c.ChannelProfiles))...) // "": the default profile
	slices.Sort(used)
	for _, ch := range used {
		if name, pr := c.ProfileFor(ch); pr.Mode == ModeSession && c.RuntimeOf(pr) == container.RuntimeRunsc {
			p.fail(nil, "session.limits.pids", rule, MinRunscPIDs, "the runtime of profile "+strconv.Quote(name))
			return
		}
	}
}

// Runtimes returns the OCI runtimes the config's turns run under, sorted
// and each once: SealedRuntime (sealed turns, which any channel may get)
// and RuntimeOf every profile a channel uses. The doctor checks the ones
// the engine must have registered.
func (c *Config) Runtimes() []string {
	used := []string{c.SealedRuntime()}
	add := func(ch rtsandbox.ChannelKey) {
		_, p := c.ProfileFor(ch)
		used = append(used, c.RuntimeOf(p))
	}
	add("") // "" is in no mapping: the default profile
	for ch := range c.ChannelProfiles {
		add(ch)
	}
	slices.Sort(used)
	return slices.Compact(used)
}

// ModelOf returns the model a session profile names: the model block for
// DefaultModel (or ""), else the models: entry.
func (c *Config) ModelOf(p Profile) (Model, bool) {
	if p.Model == "" || p.Model == DefaultModel {
		return c.Model, true
	}
	m, ok := c.Models[p.Model]
	return m, ok
}

// ForProfile returns the config a session profile's broker is built from:
// a copy of c whose model is the profile's, whose tools and MCP servers
// are only those the profile lists, and whose web tools are on only when
// listed. A sealed profile gets c itself (every tool, the model block).
// ok is false for an unknown profile.
func (c *Config) ForProfile(name string) (_ *Config, ok bool) {
	p, ok := c.Profile(name)
	if !ok {
		return nil, false
	}
	if p.Mode != ModeSession {
		return c, true
	}
	m, ok := c.ModelOf(p)
	if !ok {
		return nil, false
	}
	pc := *c
	pc.Model = m
	pc.Tools = keep(c.Tools, p.Tools, func(t Tool) string { return t.Name })
	pc.MCP = keep(c.MCP, p.MCP, func(s MCPServer) string { return s.Name })
	pc.Web.Fetch.Enabled = c.Web.Fetch.Enabled && slices.Contains(p.Tools, WebFetchTool)
	pc.Web.Research.Enabled = c.Web.Research.Enabled && slices.Contains(p.Tools, ResearchTool)
	return &pc, true
}

// keep returns the items of all whose name is listed, in all's order.
func keep[T any](all []T, names []string, name func(T) string) []T {
	var out []T
	for _, x := range all {
		if slices.Contains(names, name(x)) {
			out = append(out, x)
		}
	}
	return out
}

// entry is one pair of a mapping whose keys are names chosen by the
// operator (profiles, models, channels_profile), not schema keys.
type entry struct {
	key, val *yaml.Node
	path     string
}

// entries returns the pairs of the mapping n in file order. Non-string
// keys, duplicate keys and alias values are refused, as object does.
func (p *parser) entries(n *yaml.Node, path string) []entry {
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping")
		return nil
	}
	var out []entry
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isString(k) {
			p.fail(k, path, "keys must be strings")
			continue
		}
		kp := keyPath(path, k.Value)
		switch {
		case seen[k.Value]:
			p.fail(k, kp, "duplicate key")
		case v.Kind == yaml.AliasNode:
			p.fail(v, kp, "YAML aliases are not supported")
		default:
			out = append(out, entry{key: k, val: v, path: kp})
		}
		seen[k.Value] = true
	}
	return out
}

// models parses "models": named model blocks beside the model block.
func (p *parser) models(n *yaml.Node) map[string]Model {
	if n == nil {
		return nil
	}
	out := map[string]Model{}
	for _, e := range p.entries(n, "models") {
		switch name := e.key.Value; {
		case name == DefaultModel:
			p.fail(e.key, e.path, "%q is reserved for the model block", name)
		case !modelNameRE.MatchString(name):
			p.fail(e.key, e.path, "must be a model name matching %s", modelNameRE)
		default:
			out[name] = p.model(e.val, e.path)
		}
	}
	return out
}

// profiles parses "profiles" against the models, tools and MCP servers
// already parsed into c. The built-in DefaultProfile is added unless the
// file defines it.
func (p *parser) profiles(n *yaml.Node, c *Config) map[string]Profile {
	out := map[string]Profile{DefaultProfile: builtinDefault}
	if n == nil {
		return out
	}
	for _, e := range p.entries(n, "profiles") {
		if !profileNameRE.MatchString(e.key.Value) {
			p.fail(e.key, e.path, "must be a profile name matching %s", profileNameRE)
			continue
		}
		// Kept even when broken, so a mapping to it is not refused too.
		out[e.key.Value] = p.profile(e.val, e.path, c)
	}
	return out
}

func (p *parser) profile(n *yaml.Node, path string, c *Config) Profile {
	o, ok := p.object(n, path, "mode", "model", "mcp", "tools", "skills", "runtime")
	if !ok {
		return Profile{}
	}
	mode, ok := p.text(o, "mode", true, modeRule)
	if !ok {
		return Profile{}
	}
	if mode == ModeSealed {
		for _, key := range []string{"model", "mcp", "tools", "skills"} {
			if v := o.get(key); v != nil {
				p.fail(v, o.at(key), "is only used with mode: session (a sealed turn has the model block and every tool)")
			}
		}
		if v := o.get("runtime"); v != nil {
			p.fail(v, o.at("runtime"), "is only used with mode: session (sealed turns run under sandbox.runtime)")
		}
		return Profile{Mode: ModeSealed}
	}
	pr := Profile{Mode: ModeSession, Model: DefaultModel}
	if v, ok := p.text(o, "runtime", false, runtimeRule); ok {
		pr.Runtime = v
	}
	if v, ok := p.text(o, "model", false, func(s string) string { return modelRefRule(s, c) }); ok {
		pr.Model = v
	}
	pr.MCP = p.names(o, "mcp", mcpNames(c), "a server of the mcp list")
	pr.Tools = p.names(o, "tools", toolNames(c), "a host tool (tools[].name, or web_fetch or research while the web section turns it on)")
	if v, ok := p.text(o, "skills", false, stateDirRule); ok {
		pr.Skills = filepath.Clean(v)
	}
	return pr
}

// names parses a list of unique names at key, each one of known.
func (p *parser) names(o object, key string, known []string, what string) []string {
	var out []string
	for i, n := range p.list(o, key) {
		path := index(o.at(key), i)
		switch {
		case !isString(n):
			p.fail(n, path, "must be a string")
		case !slices.Contains(known, n.Value):
			p.fail(n, path, "must name %s; %q is not one (known: %s)", what, n.Value, list(known))
		case slices.Contains(out, n.Value):
			p.fail(n, path, "duplicate name %q", n.Value)
		default:
			out = append(out, n.Value)
		}
	}
	return out
}

func mcpNames(c *Config) []string {
	var out []string
	for _, s := range c.MCP {
		out = append(out, s.Name)
	}
	return out
}

func toolNames(c *Config) []string {
	var out []string
	for _, t := range c.Tools {
		out = append(out, t.Name)
	}
	if c.Web.Fetch.Enabled {
		out = append(out, WebFetchTool)
	}
	if c.Web.Research.Enabled {
		out = append(out, ResearchTool)
	}
	return out
}

// list writes names for a rule text; "none" when empty.
func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func modeRule(s string) string {
	if s != ModeSealed && s != ModeSession {
		return fmt.Sprintf("must be %q or %q", ModeSealed, ModeSession)
	}
	return ""
}

// modelRefRule wants DefaultModel or a key of models.
func modelRefRule(s string, c *Config) string {
	if s == DefaultModel {
		return ""
	}
	if _, ok := c.Models[s]; ok {
		return ""
	}
	known := []string{DefaultModel}
	for name := range c.Models {
		known = append(known, name)
	}
	slices.Sort(known[1:])
	return fmt.Sprintf("must name %q (the model block) or an entry of models (known: %s)", DefaultModel, list(known))
}

// channelProfiles parses "channels_profile": channel key → profile name.
func (p *parser) channelProfiles(n *yaml.Node, profiles map[string]Profile) map[rtsandbox.ChannelKey]string {
	if n == nil {
		return nil
	}
	out := map[rtsandbox.ChannelKey]string{}
	for _, e := range p.entries(n, "channels_profile") {
		k := rtsandbox.ChannelKey(e.key.Value)
		if !k.Valid() {
			p.fail(e.key, e.path, "must be "+rtsandbox.ChannelKeyRule+", such as discord:112233445566778899")
			continue
		}
		if name, ok := p.profileRef(e.val, e.path, profiles); ok {
			out[k] = name
		}
	}
	return out
}

// profileRef reads a profile name that must exist.
func (p *parser) profileRef(n *yaml.Node, path string, profiles map[string]Profile) (string, bool) {
	if !isString(n) {
		p.fail(n, path, "must be a string")
		return "", false
	}
	if _, ok := profiles[n.Value]; !ok {
		var known []string
		for name := range profiles {
			known = append(known, name)
		}
		slices.Sort(known)
		p.fail(n, path, "must name a profile; %q is not one (known: %s)", n.Value, list(known))
		return "", false
	}
	return n.Value, true
}
