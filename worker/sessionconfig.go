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

// mcpServerName is the session broker's rule for MCP server names (§2.6).
var mcpServerName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,100}$`)

// compactorEngine is the rule for a host compactor's engine name (§2.11).
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
// with an engine name of §2.11's rule.
func parseWorkerConfig(data []byte) (wire.SessionWorkerConfig, error) {
	obj, ok := object(data)
	if !ok {
		return wire.SessionWorkerConfig{}, errConfig
	}
	c := wire.SessionWorkerConfig{ModelAPI: rtsandbox.ModelAPIOpenAI, TimeZone: "UTC", Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}}
	var bad []string
	optString := func(key string, dst *string) {
		if raw, present := obj[key]; present {
			s, ok := str(raw)
			if !ok {
				bad = append(bad, key)
			} else if s != "" {
				*dst = s
			}
		}
	}
	optString("modelApi", &c.ModelAPI)
	optString("model", &c.Model)
	optString("prompt", &c.Prompt)
	optString("timeZone", &c.TimeZone)
	if raw, present := obj["stream"]; present {
		if c.Stream, ok = boolean(raw); !ok {
			bad = append(bad, "stream")
		}
	}
	if raw, present := obj["tools"]; present {
		if c.Tools, ok = toolSpecs(raw, rtsandbox.ValidToolName); !ok {
			bad = append(bad, "tools")
		}
	}
	if raw, present := obj["mcp"]; present {
		if c.MCP, ok = mcpServers(raw, mcpServerName.MatchString); !ok {
			bad = append(bad, "mcp")
		}
	}
	if c.SkillsDir, c.Skills, ok = parseSkillsConfig(obj); !ok {
		bad = append(bad, "skills")
	}
	if !compactionFields(obj, &c) {
		bad = append(bad, "compaction")
	}
	if !rtsandbox.ValidModelAPI(c.ModelAPI) {
		bad = append(bad, "modelApi")
	}
	if c.Model == "" {
		bad = append(bad, "model")
	}
	if _, err := localTime(time.Time{}, c.TimeZone); err != nil {
		bad = append(bad, "timeZone")
	}
	if len(bad) > 0 {
		return wire.SessionWorkerConfig{}, fmt.Errorf("%w: %v", errConfig, bad)
	}
	return c, nil
}

// compactionFields reads contextWindow, reserveTokens and compaction.
func compactionFields(obj map[string]json.RawMessage, c *wire.SessionWorkerConfig) bool {
	ok := true
	if raw, present := obj["contextWindow"]; present {
		n, okN := safeInt(raw)
		ok = okN && n >= minContextWindow && n <= maxContextWindow
		c.ContextWindow = n
	}
	if raw, present := obj["reserveTokens"]; present {
		n, okN := safeInt(raw)
		ok = ok && okN && n <= cmp.Or(c.ContextWindow, defaultContextWindow)/2
		c.ReserveTokens = n
	}
	if raw, present := obj["compaction"]; present {
		cfg, okObj := object(raw)
		engine, okEngine := str(cfg["engine"])
		ok = ok && okObj && okEngine && compactorEngine.MatchString(engine)
		c.Compaction = &wire.SessionCompactionID{Engine: engine}
	}
	return ok
}

// parseDiscovery reads the answer of GET /mcp-tools: {servers: [{name,
// tools: [string]}]}.
func parseDiscovery(data []byte) (wire.MCPDiscovery, error) {
	var d wire.MCPDiscovery
	obj, ok := object(data)
	if !ok {
		return d, fmt.Errorf("%w: mcp-tools", errConfig)
	}
	servers, ok := array(obj["servers"])
	if !ok {
		return d, fmt.Errorf("%w: mcp-tools servers", errConfig)
	}
	d.Servers = make([]wire.MCPDiscoveryServer, 0, len(servers))
	for _, raw := range servers {
		s, ok := object(raw)
		name, okName := str(s["name"])
		var tools []string
		okTools := json.Unmarshal(s["tools"], &tools) == nil && firstByte(s["tools"]) == '['
		if !ok || !okName || !okTools {
			return wire.MCPDiscovery{}, fmt.Errorf("%w: mcp-tools server", errConfig)
		}
		d.Servers = append(d.Servers, wire.MCPDiscoveryServer{Name: name, Tools: tools})
	}
	return d, nil
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
