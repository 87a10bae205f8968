package worker

// The field-by-field readers of the session worker's config and MCP
// discovery that typed structs replaced, kept as the oracles of
// FuzzWorkerConfigAgreesWithFieldByField.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/skills"
	"github.com/rtsandbox/rtsandbox/wire"
)

// FuzzWorkerConfigAgreesWithFieldByField holds parseWorkerConfig and
// parseDiscovery to the readers they replaced: the same config or
// discovery, or the same error text (which names every bad member).
func FuzzWorkerConfigAgreesWithFieldByField(f *testing.F) {
	for _, tc := range configMembersCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"modelApi":"anthropic","model":"m","tools":[{"name":"t","description":"","parameters":{}}],"mcp":[{"server":"s","tools":[]}]}`))
	f.Add([]byte(`{"servers":[{"name":"a","tools":["b",null]}]}`))
	f.Add([]byte(`{"model":"m","skillsDir":"/run/sandbox/skills","skills":[{"name":"web","description":"d","tools":["t","s/x"]}]}`))
	f.Add([]byte(`{"model":"m","contextWindow":1000000,"reserveTokens":16384,"compaction":{"engine":"host-compactor"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseWorkerConfig(data)
		want, oldErr := oldParseWorkerConfig(data)
		if fmt.Sprint(err) != fmt.Sprint(oldErr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("config %q: typed %+v, %v; field by field %+v, %v", data, got, err, want, oldErr)
		}
		d, err := parseDiscovery(data)
		oldD, oldErr := oldParseDiscovery(data)
		if fmt.Sprint(err) != fmt.Sprint(oldErr) || !reflect.DeepEqual(d, oldD) {
			t.Fatalf("discovery %q: typed %+v, %v; field by field %+v, %v", data, d, err, oldD, oldErr)
		}
	})
}

// TestWorkerConfigMembersExact pins how the worker config and discovery
// are read: exact names, the last of repeated members, no nulls, and an
// error that names every bad member in the reference's order.
func TestWorkerConfigMembersExact(t *testing.T) {
	for _, tc := range configMembersCases {
		t.Run(tc.name, func(t *testing.T) {
			parse := func(b []byte) error { _, err := parseWorkerConfig(b); return err }
			if tc.discovery {
				parse = func(b []byte) error { _, err := parseDiscovery(b); return err }
			}
			if err := parse([]byte(tc.body)); fmt.Sprint(err) != tc.err {
				t.Fatalf("parse(%s) = %v; want %s", tc.body, err, tc.err)
			}
		})
	}
}

var configMembersCases = []struct {
	name, body string
	discovery  bool
	err        string
}{
	{"model-folded", `{"Model":"m"}`, false, "invalid worker config: [model]"},
	{"model-null", `{"model":null}`, false, "invalid worker config: [model model]"},
	{"model-repeated-last-wins", `{"model":1,"model":"m"}`, false, "<nil>"},
	{"every-bad-member", `{"modelApi":1,"model":2,"prompt":3,"timeZone":4,"stream":"x","tools":{},"mcp":null,"skillsDir":"rel","contextWindow":1}`, false,
		"invalid worker config: [modelApi model prompt timeZone stream tools mcp skills compaction model]"},
	{"values-bad", `{"modelApi":"gemini","model":"","timeZone":"Mars/Base"}`, false, "invalid worker config: [modelApi model timeZone]"},
	{"empty-strings-default", `{"modelApi":"","model":"m","prompt":"","timeZone":""}`, false, "<nil>"},
	{"stream-null", `{"model":"m","stream":null}`, false, "invalid worker config: [stream]"},
	{"skills-dir-alone", `{"model":"m","skillsDir":"/s"}`, false, "invalid worker config: [skills]"},
	{"skills-null", `{"model":"m","skillsDir":"/s","skills":null}`, false, "invalid worker config: [skills]"},
	{"skills-empty", `{"model":"m","skillsDir":"/s","skills":[]}`, false, "invalid worker config: [skills]"},
	{"skill-tools-empty", `{"model":"m","skillsDir":"/s","skills":[{"name":"web","description":"d","tools":[]}]}`, false, "<nil>"},
	{"skill-tools-null-item", `{"model":"m","skillsDir":"/s","skills":[{"name":"web","description":"d","tools":[null]}]}`, false, "invalid worker config: [skills]"},
	{"skill-name-folded", `{"model":"m","skillsDir":"/s","skills":[{"Name":"web","description":"d"}]}`, false, "invalid worker config: [skills]"},
	{"skills-dir-unclean", `{"model":"m","skillsDir":"/s/","skills":[{"name":"web","description":"d"}]}`, false, "invalid worker config: [skills]"},
	{"window-float", `{"model":"m","contextWindow":100000.5}`, false, "invalid worker config: [compaction]"},
	{"window-exp", `{"model":"m","contextWindow":1e5}`, false, "<nil>"},
	{"reserve-negative", `{"model":"m","reserveTokens":-1}`, false, "invalid worker config: [compaction]"},
	{"reserve-minus-zero", `{"model":"m","reserveTokens":-0}`, false, "<nil>"},
	{"reserve-over-half-default", `{"model":"m","reserveTokens":200000}`, false, "invalid worker config: [compaction]"},
	{"compaction-null", `{"model":"m","compaction":null}`, false, "invalid worker config: [compaction]"},
	{"compaction-engine-folded", `{"model":"m","compaction":{"Engine":"pi"}}`, false, "invalid worker config: [compaction]"},
	{"compaction-engine-bad", `{"model":"m","compaction":{"engine":"a b"}}`, false, "invalid worker config: [compaction]"},
	{"mcp-server-slash", `{"model":"m","mcp":[{"server":"a/b","tools":[]}]}`, false, "invalid worker config: [mcp]"},
	{"config-not-object", `[]`, false, "invalid worker config"},
	{"config-leading-vt", "\v{\"model\":\"m\"}", false, "invalid worker config"},
	{"discovery", `{"servers":[{"name":"a","tools":["b"]}]}`, true, "<nil>"},
	{"discovery-tools-null-item", `{"servers":[{"name":"a","tools":[null]}]}`, true, "<nil>"},
	{"discovery-not-object", `7`, true, "invalid worker config: mcp-tools"},
	{"discovery-servers-folded", `{"Servers":[]}`, true, "invalid worker config: mcp-tools servers"},
	{"discovery-servers-null", `{"servers":null}`, true, "invalid worker config: mcp-tools servers"},
	{"discovery-server-null", `{"servers":[null]}`, true, "invalid worker config: mcp-tools server"},
	{"discovery-server-name-folded", `{"servers":[{"NAME":"a","tools":[]}]}`, true, "invalid worker config: mcp-tools server"},
	{"discovery-tools-null", `{"servers":[{"name":"a","tools":null}]}`, true, "invalid worker config: mcp-tools server"},
	{"discovery-repeated-last-wins", `{"servers":7,"servers":[]}`, true, "<nil>"},
}

func oldParseWorkerConfig(data []byte) (wire.SessionWorkerConfig, error) {
	obj, ok := oldObject(data)
	if !ok {
		return wire.SessionWorkerConfig{}, errConfig
	}
	c := wire.SessionWorkerConfig{ModelAPI: rtsandbox.ModelAPIOpenAI, TimeZone: "UTC", Tools: []rtsandbox.ToolSpec{}, MCP: []wire.MCPServerTools{}}
	var bad []string
	optString := func(key string, dst *string) {
		if raw, present := obj[key]; present {
			s, ok := oldStr(raw)
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
		if c.Stream, ok = oldBoolean(raw); !ok {
			bad = append(bad, "stream")
		}
	}
	if raw, present := obj["tools"]; present {
		if c.Tools, ok = oldToolSpecs(raw, rtsandbox.ValidToolName); !ok {
			bad = append(bad, "tools")
		}
	}
	if raw, present := obj["mcp"]; present {
		if c.MCP, ok = oldMcpServers(raw, mcpServerName.MatchString); !ok {
			bad = append(bad, "mcp")
		}
	}
	if c.SkillsDir, c.Skills, ok = oldParseSkillsConfig(obj); !ok {
		bad = append(bad, "skills")
	}
	if !oldCompactionFields(obj, &c) {
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
func oldCompactionFields(obj map[string]json.RawMessage, c *wire.SessionWorkerConfig) bool {
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
		cfg, okObj := oldObject(raw)
		engine, okEngine := oldStr(cfg["engine"])
		ok = ok && okObj && okEngine && compactorEngine.MatchString(engine)
		c.Compaction = &wire.SessionCompactionID{Engine: engine}
	}
	return ok
}

// parseDiscovery reads the answer of GET /mcp-tools: {servers: [{name,
// tools: [string]}]}.
func oldParseDiscovery(data []byte) (wire.MCPDiscovery, error) {
	var d wire.MCPDiscovery
	obj, ok := oldObject(data)
	if !ok {
		return d, fmt.Errorf("%w: mcp-tools", errConfig)
	}
	servers, ok := oldArray(obj["servers"])
	if !ok {
		return d, fmt.Errorf("%w: mcp-tools servers", errConfig)
	}
	d.Servers = make([]wire.MCPDiscoveryServer, 0, len(servers))
	for _, raw := range servers {
		s, ok := oldObject(raw)
		name, okName := oldStr(s["name"])
		var tools []string
		okTools := json.Unmarshal(s["tools"], &tools) == nil && oldFirstByte(s["tools"]) == '['
		if !ok || !okName || !okTools {
			return wire.MCPDiscovery{}, fmt.Errorf("%w: mcp-tools server", errConfig)
		}
		d.Servers = append(d.Servers, wire.MCPDiscoveryServer{Name: name, Tools: tools})
	}
	return d, nil
}

// parseSkillsConfig reads the skills fields of a /worker/config object:
// skillsDir an absolute clean path and skills an array of {name,
// description, tools?} objects (strings, tools an array of strings) that
// passes skills.Check; both or neither. ok is false for anything else.
func oldParseSkillsConfig(obj map[string]json.RawMessage) (dir string, list []wire.SessionSkill, ok bool) {
	rawDir, hasDir := obj["skillsDir"]
	rawList, hasList := obj["skills"]
	if !hasDir && !hasList {
		return "", nil, true
	}
	dir, okDir := oldStr(rawDir)
	items, okList := oldArray(rawList)
	if !okDir || !okList || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || len(items) == 0 || len(items) > skills.MaxSkills {
		return "", nil, false
	}
	list = make([]wire.SessionSkill, 0, len(items))
	for _, item := range items {
		s, ok := oldParseSkill(item)
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
func oldParseSkill(raw json.RawMessage) (wire.SessionSkill, bool) {
	var s wire.SessionSkill
	obj, ok := oldObject(raw)
	if !ok {
		return s, false
	}
	name, okName := oldStr(obj["name"])
	desc, okDesc := oldStr(obj["description"])
	if !okName || !okDesc {
		return s, false
	}
	s = wire.SessionSkill{Name: name, Description: desc}
	rawTools, present := obj["tools"]
	if !present {
		return s, true
	}
	tools, ok := oldArray(rawTools)
	if !ok {
		return s, false
	}
	for _, t := range tools {
		tool, ok := oldStr(t)
		if !ok {
			return s, false
		}
		s.Tools = append(s.Tools, tool)
	}
	return s, true
}
