package worker

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// maxConfigBody bounds the answers of the session worker's metadata
// routes: /mcp-tools, /worker/config, /worker/ready and /worker/result.
const maxConfigBody = 1 << 20

// errConfig marks a profile or discovery answer the worker cannot run
// with; at startup it is fatal.
var errConfig = errors.New("invalid worker config")

// mcpServerName is the session broker's rule for MCP server names (docs/protocol.md, "MCP calls").
var mcpServerName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,100}$`)

// compactorEngine is the rule for a host compactor's engine name (docs/protocol.md, "Compaction").
var compactorEngine = regexp.MustCompile(`^[a-zA-Z0-9@/._-]{1,100}$`)

// parseWorkerConfig reads the answer of GET /worker/config
// (wire.SessionWorkerConfig) as strictly as the sealed worker reads
// its turn: every field has its JSON type, modelApi is known ("" is
// openai), model is not empty (the reference's "set the model from the
// content; missing → fatal"), timeZone loads ("" is UTC), tools are valid
// specs and MCP servers have valid names and tools, skills and skillsDir
// pass parseSkillsConfig, contextWindow is an integer of
// 4,096–10,000,000 and reserveTokens one of 0 to half the window (absent
// or 0: the defaults, newTiers); compaction, when present, is {engine}
// with an engine name of docs/protocol.md, "Compaction"'s rule.
func parseWorkerConfig(data []byte) (wire.SessionWorkerConfig, error) {
	obj, ok := object(data) // the members, read once for the config and its skills
	var w workerConfigWire
	if !ok || wire.FillFrom(obj, &w) != nil { // every member is wire.Checked: only a non-object fails
		return wire.SessionWorkerConfig{}, errConfig
	}
	c := wire.SessionWorkerConfig{ModelAPI: rtsandbox.ModelAPIOpenAI, TimeZone: "UTC", Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}}
	var bad []string
	for _, m := range []struct {
		name string
		m    wire.Checked[wire.String]
		dst  *string
	}{{"modelApi", w.ModelAPI, &c.ModelAPI}, {"model", w.Model, &c.Model}, {"prompt", w.Prompt, &c.Prompt}, {"timeZone", w.TimeZone, &c.TimeZone}} {
		switch {
		case m.m.Bad:
			bad = append(bad, m.name)
		case m.m.Value != "": // "" keeps the default
			*m.dst = string(m.m.Value)
		}
	}
	c.Stream = bool(w.Stream.Value)
	if w.Tools.Present {
		c.Tools = w.Tools.Value
	}
	if w.MCP.Present {
		c.MCP = w.MCP.Value
	}
	bad = appendBad(bad, memberCheck{"stream", w.Stream.Bad}, memberCheck{"tools", w.Tools.Bad}, memberCheck{"mcp", w.MCP.Bad})
	if c.SkillsDir, c.Skills, ok = parseSkillsConfig(obj); !ok {
		bad = append(bad, "skills")
	}
	bad = appendBad(bad, memberCheck{"compaction", !w.compaction(&c)})
	if err := w.check(c, bad); err != nil {
		return wire.SessionWorkerConfig{}, err
	}
	return c, nil
}

// workerConfigWire is the answer of GET /worker/config as wire.FillFrom
// reads it (exact names, the last of repeated members, no nulls). Every
// member is wire.Checked, so that the error names every bad member, as
// the reference's did; skillsDir and skills are parseSkillsConfig's.
type workerConfigWire struct {
	ModelAPI      wire.Checked[wire.String]      `json:"modelApi,omitempty"`
	Model         wire.Checked[wire.String]      `json:"model,omitempty"`
	Prompt        wire.Checked[wire.String]      `json:"prompt,omitempty"`
	TimeZone      wire.Checked[wire.String]      `json:"timeZone,omitempty"`
	Stream        wire.Checked[wire.Bool]        `json:"stream,omitempty"`
	Tools         wire.Checked[hostToolsWire]    `json:"tools,omitempty"`
	MCP           wire.Checked[configMCPWire]    `json:"mcp,omitempty"`
	ContextWindow wire.Checked[wire.Int]         `json:"contextWindow,omitempty"`
	ReserveTokens wire.Checked[wire.Int]         `json:"reserveTokens,omitempty"`
	Compaction    wire.Checked[compactionIDWire] `json:"compaction,omitempty"`
}

// compaction reads contextWindow, reserveTokens and compaction into c: a
// window of 4,096–10,000,000, a reserve of 0 to half the window (or of
// the default), an engine name of docs/protocol.md, "Compaction"'s rule. ok is false when any is
// bad.
func (w *workerConfigWire) compaction(c *wire.SessionWorkerConfig) bool {
	ok := true
	if m := w.ContextWindow; m.Present {
		c.ContextWindow = int(m.Value)
		ok = !m.Bad && m.Value >= minContextWindow && m.Value <= maxContextWindow
	}
	if m := w.ReserveTokens; m.Present {
		c.ReserveTokens = int(m.Value)
		ok = ok && !m.Bad && m.Value >= 0 && int(m.Value) <= cmp.Or(c.ContextWindow, defaultContextWindow)/2
	}
	if m := w.Compaction; m.Present {
		c.Compaction = &wire.SessionCompactionID{Engine: string(m.Value.Engine)}
		ok = ok && !m.Bad && compactorEngine.MatchString(string(m.Value.Engine))
	}
	return ok
}

// check is the config's one check of its values, after the members'
// types (bad, in the reference's order): a known modelApi, a model, a
// time zone that loads. It names every bad member.
func (w *workerConfigWire) check(c wire.SessionWorkerConfig, bad []string) error {
	_, zoneErr := localTime(time.Time{}, c.TimeZone)
	bad = appendBad(bad, memberCheck{"modelApi", !rtsandbox.ValidModelAPI(c.ModelAPI)}, memberCheck{"model", c.Model == ""}, memberCheck{"timeZone", zoneErr != nil})
	if len(bad) > 0 {
		return fmt.Errorf("%w: %v", errConfig, bad)
	}
	return nil
}

// memberCheck is a member's name and whether it is bad.
type memberCheck struct {
	name string
	bad  bool
}

// appendBad appends the name of each check that is bad, in order.
func appendBad(list []string, checks ...memberCheck) []string {
	for _, c := range checks {
		if c.bad {
			list = append(list, c.name)
		}
	}
	return list
}

// configMCPWire is the config's MCP servers, named by the session
// broker's rule (mcpServerName).
type configMCPWire []wire.MCPServerTools

func (m *configMCPWire) UnmarshalJSON(b []byte) error {
	servers, ok := mcpServers(b, mcpServerName.MatchString)
	*m = servers
	return okOrInvalid(ok)
}

// compactionIDWire is the config's compaction: {engine}.
type compactionIDWire struct {
	Engine wire.String `json:"engine"`
}

func (c *compactionIDWire) UnmarshalJSON(b []byte) error {
	type plain compactionIDWire
	return wire.Fill(b, (*plain)(c))
}

// parseDiscovery reads the answer of GET /mcp-tools: {servers: [{name,
// tools: [string]}]}.
func parseDiscovery(data []byte) (wire.MCPDiscovery, error) {
	var w discoveryWire
	err := wire.Fill(data, &w)
	var me *wire.MemberError
	switch {
	case err == nil:
		return wire.MCPDiscovery{Servers: w.Servers}, nil
	case errors.Is(err, errDiscoveryServer):
		return wire.MCPDiscovery{}, fmt.Errorf("%w: mcp-tools server", errConfig)
	case errors.As(err, &me) && me.Member == "servers":
		return wire.MCPDiscovery{}, fmt.Errorf("%w: mcp-tools servers", errConfig)
	}
	return wire.MCPDiscovery{}, fmt.Errorf("%w: mcp-tools", errConfig)
}

// errDiscoveryServer is a server of a discovery that is not {name,
// tools}.
var errDiscoveryServer = errors.New("mcp-tools server")

// discoveryWire is the answer of GET /mcp-tools.
type discoveryWire struct {
	Servers discoveryServersWire `json:"servers"`
}

// discoveryServersWire is its servers: an array of {name, tools}.
type discoveryServersWire []wire.MCPDiscoveryServer

func (d *discoveryServersWire) UnmarshalJSON(b []byte) error {
	items, ok := array(b)
	if !ok {
		return errConfig
	}
	*d = make(discoveryServersWire, 0, len(items))
	for _, raw := range items {
		var s discoveryServerWire
		if wire.Fill(raw, &s) != nil {
			return errDiscoveryServer
		}
		*d = append(*d, wire.MCPDiscoveryServer{Name: string(s.Name), Tools: s.Tools})
	}
	return nil
}

// discoveryServerWire is one server: a name and the array of its tools'
// names, read by encoding/json as it always was (a null name is "").
type discoveryServerWire struct {
	Name  wire.String   `json:"name"`
	Tools toolNamesWire `json:"tools"`
}

// toolNamesWire is an array decoded into []string by encoding/json.
type toolNamesWire []string

func (t *toolNamesWire) UnmarshalJSON(b []byte) error {
	if firstByte(b) != '[' {
		return errDiscoveryServer
	}
	return json.Unmarshal(b, (*[]string)(t))
}

// discoveredOnly keeps of the profile's MCP servers and tools those the
// broker's discovery lists, in the profile's order: the broker refuses a
// call of any other, so the model should not be offered it.
func discoveredOnly(servers []wire.MCPServerTools, d wire.MCPDiscovery) []wire.MCPServerTools {
	out := []wire.MCPServerTools{}
	for _, s := range servers {
		i := slices.IndexFunc(d.Servers, func(ds wire.MCPDiscoveryServer) bool { return ds.Name == s.Server })
		if i < 0 {
			continue
		}
		kept := wire.MCPServerTools{Server: s.Server}
		for _, t := range s.Tools {
			if slices.Contains(d.Servers[i].Tools, t.Name) {
				kept.Tools = append(kept.Tools, t)
			}
		}
		if len(kept.Tools) > 0 {
			out = append(out, kept)
		}
	}
	return out
}
