package config

import (
	"cmp"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// config walks the top-level mapping. allow_http is read first because the
// URL rule depends on it wherever it appears in the file.
func (p *parser) config(root *yaml.Node) *Config {
	o, _ := p.object(root, "", "state_dir", "allow_http", "model", "tools", "mcp", "sandbox",
		"access", "initial_channels", "http", "discord", "web", "host", "metrics", "budgets",
		"models", "profiles", "channels_profile", "default_profile", "session", "engine", "kubernetes")
	c := &Config{}
	if s, ok := p.text(o, "state_dir", true, stateDirRule); ok {
		c.StateDir = filepath.Clean(s)
	}
	c.AllowHTTP = p.boolean(o, "allow_http")
	p.allowHTTP = c.AllowHTTP
	if p.required(o, "model") {
		c.Model = p.model(o.get("model"), "model")
	}
	c.Tools = p.tools(p.list(o, "tools"))
	c.MCP = p.servers(p.list(o, "mcp"))
	c.Sandbox = p.sandbox(o.get("sandbox"))
	p.engine(o, c)
	c.Access = p.accessRules(o.get("access"))
	c.InitialChannels = p.channelKeys(o, "initial_channels")
	c.HTTP = p.httpSurface(o.get("http"))
	c.Discord = p.discordSurface(o.get("discord"))
	c.Web = p.web(o.get("web"), c)
	p.webToolNames(c, root)
	c.Host = p.host(o.get("host"))
	c.Metrics = p.metrics(o.get("metrics"), c)
	p.profileKeys(o, c)
	c.Session = p.session(o.get("session"), c)
	p.runscPIDs(c)
	p.kubernetesModes(c)
	reserve, reserveKey := c.turnReserve()
	c.Budgets = p.budgets(o.get("budgets"), reserve, reserveKey)
	return c
}

// profileKeys parses models, profiles, channels_profile and
// default_profile; the profiles refer to the tools, MCP servers and web
// tools parsed before.
func (p *parser) profileKeys(o object, c *Config) {
	c.Models = p.models(o.get("models"))
	c.Profiles = p.profiles(o.get("profiles"), c)
	c.ChannelProfiles = p.channelProfiles(o.get("channels_profile"), c.Profiles)
	c.DefaultProfile = DefaultProfile
	if n := o.get("default_profile"); n != nil {
		if name, ok := p.profileRef(n, "default_profile", c.Profiles); ok {
			c.DefaultProfile = name
		}
	}
}

// turnReserve is the longest turn timeout of the modes in use, and its
// key: what a budgets.*.seconds limit must leave room for.
func (c *Config) turnReserve() (time.Duration, string) {
	if c.UsesSessions() && c.Session.TurnTimeout > c.Sandbox.TurnTimeout {
		return c.Session.TurnTimeout, "session.turn_timeout"
	}
	return c.Sandbox.TurnTimeout, "sandbox.turn_timeout"
}

// host reads the host process's own settings.
func (p *parser) host(n *yaml.Node) Host {
	h := Host{MemoryLimitMB: DefaultHostMemoryLimitMB}
	if n == nil {
		return h
	}
	o, ok := p.object(n, "host", "memory_limit_mb")
	if !ok {
		return h
	}
	h.MemoryLimitMB = p.integer(o, "memory_limit_mb", DefaultHostMemoryLimitMB, MinHostMemoryLimitMB, maxMemoryMB)
	return h
}

// model parses a model block: the top-level model or an entry of models.
func (p *parser) model(n *yaml.Node, path string) Model {
	if n == nil { // an alias, already refused
		return Model{}
	}
	o, ok := p.object(n, path, "url", "name", "api_key_env", "api", "max_output_tokens", "thinking", "stream", "context_window", "reserve_tokens")
	if !ok {
		return Model{}
	}
	var m Model
	m.URL = p.endpoint(o, "url", true)
	m.Name, _ = p.text(o, "name", true, notBlank)
	m.APIKeyEnv = p.envVar(o, "api_key_env", true)
	m.API, _ = p.text(o, "api", false, modelAPIRule)
	m.Stream = p.boolean(o, "stream")
	m.ContextWindow, m.ReserveTokens = p.window(o)
	if m.API == rtsandbox.ModelAPIAnthropic {
		m.MaxOutputTokens = p.integer(o, "max_output_tokens", 0, modelapi.MinMaxOutput, modelapi.MaxMaxOutput)
		level, _ := p.text(o, "thinking", false, thinkingRule)
		m.Thinking = modelapi.ThinkingLevel(level)
		if u := o.get("url"); u != nil && strings.Contains(m.URL.String(), "?") {
			p.fail(u, o.at("url"), "must have no query with api: anthropic (the broker appends the route and ?beta=true)")
		}
		return m
	}
	m.MaxOutputTokens = p.integer(o, "max_output_tokens", 0, 1, rtsandbox.MaxOutputTokensUL)
	if t := o.get("thinking"); t != nil {
		p.fail(t, o.at("thinking"), "is only used with api: anthropic")
	}
	return m
}

// window parses context_window and reserve_tokens with the ranges the
// session worker accepts (wire.SessionWorkerConfig): a reserve of
// at most half the window, the default window's when none is given. A
// reserve of 0 would be the worker's default, so the file says so by
// leaving it out.
func (p *parser) window(o object) (window, reserve int) {
	window = p.integer(o, "context_window", 0, wire.MinContextWindow, wire.MaxContextWindow)
	half := cmp.Or(window, wire.DefaultContextWindow) / 2
	reserve = p.integer(o, "reserve_tokens", 0, 1, math.MaxInt)
	if reserve > half {
		p.fail(o.get("reserve_tokens"), o.at("reserve_tokens"), "must be at most half of context_window (%d)", half)
		return window, 0
	}
	return window, reserve
}

func (p *parser) envVar(o object, key string, req bool) EnvVar {
	s, _ := p.text(o, key, req, envVarRule)
	return EnvVar(s)
}

// tools parses the host tools and checks that names are unique.
func (p *parser) tools(items []*yaml.Node) []Tool {
	var out []Tool
	seen := map[string]int{}
	for i, n := range items {
		path := index("tools", i)
		t := p.tool(n, path)
		p.unique(seen, t.Name, i, n, path, "tools")
		out = append(out, t)
	}
	return out
}

// unique reports a name already seen in the same list.
func (p *parser) unique(seen map[string]int, name string, i int, n *yaml.Node, path, list string) {
	if name == "" {
		return
	}
	if j, dup := seen[name]; dup {
		p.fail(n, path+".name", "duplicate name %q (also %s)", name, index(list, j))
		return
	}
	seen[name] = i
}

func (p *parser) tool(n *yaml.Node, path string) Tool {
	o, ok := p.object(n, path, "name", "description", "parameters", "url", "api_key_env", "builtin")
	if !ok {
		return Tool{}
	}
	var t Tool
	t.Name, _ = p.text(o, "name", true, toolNameRule)
	if o.get("builtin") != nil {
		p.builtinTool(o, &t)
	} else {
		p.webhookTool(o, &t)
	}
	return t
}

// builtinTool fills a built-in. Description and parameters stay empty unless
// given: the built-in supplies its own. The name must be the built-in's own
// so the model-facing name says which implementation runs.
func (p *parser) builtinTool(o object, t *Tool) {
	t.Builtin, _ = p.text(o, "builtin", false, builtinRule)
	if t.Builtin != "" && t.Name != "" && t.Name != t.Builtin {
		p.fail(o.get("name"), o.at("name"), "must be %q for builtin: %s", t.Builtin, t.Builtin)
	}
	if n := o.get("url"); n != nil {
		p.fail(n, o.at("url"), "builtin and url are mutually exclusive")
	}
	if n := o.get("api_key_env"); n != nil {
		p.fail(n, o.at("api_key_env"), "is not used by builtin tools")
	}
	t.Description, _ = p.text(o, "description", false)
	t.Parameters = p.params(o, "parameters", false)
}

func (p *parser) webhookTool(o object, t *Tool) {
	if t.Name == BuiltinClock {
		p.fail(o.get("name"), o.at("name"), "%q is reserved for the built-in tool (set builtin: %s)", t.Name, t.Name)
	}
	if o.get("url") == nil {
		p.fail(o.node, o.at("url"), "is required (or set builtin)")
	}
	t.URL = p.endpoint(o, "url", false)
	t.APIKeyEnv = p.envVar(o, "api_key_env", false)
	t.Description, _ = p.text(o, "description", true)
	t.Parameters = p.params(o, "parameters", true)
}

// servers parses the MCP servers and checks that names are unique.
func (p *parser) servers(items []*yaml.Node) []MCPServer {
	var out []MCPServer
	seen := map[string]int{}
	for i, n := range items {
		path := index("mcp", i)
		s := p.server(n, path)
		p.unique(seen, s.Name, i, n, path, "mcp")
		out = append(out, s)
	}
	return out
}

func (p *parser) server(n *yaml.Node, path string) MCPServer {
	o, ok := p.object(n, path, "name", "url", "api_key_env", "tools")
	if !ok {
		return MCPServer{}
	}
	var s MCPServer
	s.Name, _ = p.text(o, "name", true, toolNameRule)
	s.URL = p.endpoint(o, "url", true)
	s.APIKeyEnv = p.envVar(o, "api_key_env", false)
	if !p.required(o, "tools") {
		return s
	}
	items := p.list(o, "tools")
	if len(items) == 0 && o.get("tools").Kind == yaml.SequenceNode {
		p.fail(o.get("tools"), o.at("tools"), "must list at least one tool")
	}
	seen := map[string]int{}
	for i, item := range items {
		spec := p.mcpTool(item, index(o.at("tools"), i))
		p.unique(seen, spec.Name, i, item, index(o.at("tools"), i), o.at("tools"))
		s.Tools = append(s.Tools, spec)
	}
	return s
}

// mcpTool is one item of mcp[].tools: a bare tool name, whose description
// and schema the host takes from the server at startup (Parameters stays
// nil), or a full declaration used as written.
func (p *parser) mcpTool(n *yaml.Node, path string) rtsandbox.ToolSpec {
	if n.Kind != yaml.ScalarNode {
		return p.toolSpec(n, path)
	}
	if !isString(n) {
		p.fail(n, path, "must be a tool name or a tool declaration {name, description, parameters}")
		return rtsandbox.ToolSpec{}
	}
	if msg := mcpToolNameRule(n.Value); msg != "" {
		p.fail(n, path, "%s", msg)
		return rtsandbox.ToolSpec{}
	}
	return rtsandbox.ToolSpec{Name: n.Value}
}

func (p *parser) toolSpec(n *yaml.Node, path string) rtsandbox.ToolSpec {
	o, ok := p.object(n, path, "name", "description", "parameters")
	if !ok {
		return rtsandbox.ToolSpec{}
	}
	var t rtsandbox.ToolSpec
	t.Name, _ = p.text(o, "name", true, mcpToolNameRule)
	t.Description, _ = p.text(o, "description", true)
	t.Parameters = p.params(o, "parameters", true)
	return t
}

func (p *parser) sandbox(n *yaml.Node) Sandbox {
	s := Sandbox{
		Image:       DefaultImage,
		TurnTimeout: DefaultTurnTimeout,
		Limits:      Limits{MemoryMB: DefaultMemoryMB, CPUs: DefaultCPUs, PIDs: DefaultPIDs, WorkspaceMB: DefaultWorkspaceMB},

		MaxQueueWait: DefaultMaxQueueWait,
		ReapInterval: DefaultReapInterval,
	}
	if n == nil {
		return s
	}
	o, ok := p.object(n, "sandbox", "image", "user", "turn_timeout", "limits", "prompt", "time_zone",
		"max_turns", "max_queue_wait", "reap_interval", "runtime", "pool")
	if !ok {
		return s
	}
	if v, ok := p.text(o, "image", false, imageRule); ok {
		s.Image = v
	}
	if v, ok := p.text(o, "user", false, userRule); ok {
		s.User = v
		s.UID, s.GID, _ = splitUser(v)
	}
	s.TurnTimeout = p.duration(o, "turn_timeout", DefaultTurnTimeout, MinTurnTimeout, MaxTurnTimeout)
	s.MaxTurns = p.integer(o, "max_turns", 0, 1, MaxMaxTurns)
	s.MaxQueueWait = p.duration(o, "max_queue_wait", DefaultMaxQueueWait, MinMaxQueueWait, MaxMaxQueueWait)
	s.ReapInterval = p.duration(o, "reap_interval", DefaultReapInterval, MinReapInterval, MaxReapInterval)
	if l := o.get("limits"); l != nil {
		s.Limits = p.limits(l, o.at("limits"), s.Limits)
	}
	s.Prompt, _ = p.text(o, "prompt", false)
	s.TimeZone, _ = p.text(o, "time_zone", false, timeZoneRule)
	if v, ok := p.text(o, "runtime", false, runtimeRule); ok {
		s.Runtime = v
	}
	if n := o.get("pool"); n != nil {
		s.PoolSize = p.pool(n, o.at("pool"))
	}
	return s
}

// pool reads sandbox.pool: its size, 0 (off) up to MaxPoolSize; nil
// when unset (derived at serve).
func (p *parser) pool(n *yaml.Node, path string) *int {
	o, ok := p.object(n, path, "size")
	if !ok || o.get("size") == nil {
		return nil
	}
	v := p.integer(o, "size", 0, 0, MaxPoolSize)
	return &v
}

// limits has no upper bounds, like the reference (docs/limits.md, "Sealed turns"), except
// where the value must still fit the unit Docker takes.
func (p *parser) limits(n *yaml.Node, path string, l Limits) Limits {
	o, ok := p.object(n, path, "memory_mb", "cpus", "pids", "workspace_mb")
	if !ok {
		return l
	}
	l.MemoryMB = p.integer(o, "memory_mb", DefaultMemoryMB, MinMemoryMB, maxMemoryMB)
	l.PIDs = p.integer(o, "pids", DefaultPIDs, MinPIDs, math.MaxInt)
	l.WorkspaceMB = p.integer(o, "workspace_mb", DefaultWorkspaceMB, MinWorkspaceMB, l.MemoryMB)
	l.CPUs = p.cpus(o, "cpus")
	return l
}

func (p *parser) cpus(o object, key string) float64 {
	n := o.get(key)
	if n == nil {
		return DefaultCPUs
	}
	var f float64
	tag := n.ShortTag()
	if (tag != "!!int" && tag != "!!float") || n.Decode(&f) != nil || !finite(f) || f <= 0 {
		p.fail(n, o.at(key), "must be a finite number greater than 0")
		return DefaultCPUs
	}
	return f
}

// duration reads a Go duration string. A bare number is refused because
// its unit would be a guess (the reference counts milliseconds).
func (p *parser) duration(o object, key string, def, lo, hi time.Duration) time.Duration {
	n := o.get(key)
	if n == nil {
		return def
	}
	if t := n.ShortTag(); t == "!!int" || t == "!!float" {
		p.fail(n, o.at(key), "must be a duration string with a unit such as %q, not a bare number", secs(def))
		return def
	}
	s, ok := p.text(o, key, false)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < lo || d > hi {
		p.fail(n, o.at(key), "must be a duration from %s to %s such as %q", secs(lo), secs(hi), secs(def))
		return def
	}
	return d
}

// secs writes d as the operator would, "120s" rather than "2m0s".
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s" }
