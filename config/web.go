package config

import (
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
	"go.yaml.in/yaml/v3"
)

// Defaults and ranges of the web section (docs/web.md; docs/limits.md,
// "Web access and skills").
const (
	DefaultFetchMaxBytes = 5 << 20
	MaxFetchMaxBytes     = 32 << 20
	DefaultFetchTimeout  = 60 * time.Second
	MinFetchTimeout      = time.Millisecond
	MaxFetchTimeout      = 120 * time.Second

	DefaultResearchRunning = 2
	MaxResearchRunning     = 10
	DefaultResearchTimeout = 10 * time.Minute
	MinResearchTimeout     = time.Second
	MaxResearchTimeout     = 20 * time.Minute

	// Built-in tool names the web section claims; a webhook tool may not
	// take them while the feature is on.
	WebFetchTool = "web_fetch"
	ResearchTool = "research"
)

// Search providers.
const (
	ProviderSearXNG = "searxng"
	ProviderBrave   = "brave"
)

// Web is the host's controlled web access. Without a web section it is the
// zero value: everything off. Within one, the defaults are filled in. A present fetch or research mapping is on unless
// it says enabled: false.
type Web struct {
	Fetch    WebFetch
	Search   *WebSearch // nil means no search backend
	Research WebResearch
}

// WebFetch is the built-in web_fetch host tool.
type WebFetch struct {
	Enabled  bool
	MaxBytes int64         // 1 … 32 MiB, default 5 MiB
	Timeout  time.Duration // 1ms … 120s, default 60s
}

// WebSearch is the search backend research uses. Its URL is operator
// configuration and may be internal; it is not SSRF-vetted.
type WebSearch struct {
	Provider  string // ProviderSearXNG or ProviderBrave
	URL       upstream.Endpoint
	APIKeyEnv EnvVar // required for brave, optional bearer for searxng
}

// WebResearch is the host research worker behind the guest research tool.
// It calls the top-level model endpoint (model.url, model.api_key_env)
// with its own model name.
type WebResearch struct {
	Enabled              bool
	Model                string // default: the top-level model.name
	MaxRunningPerChannel int    // 1 … 10, default 2
	Timeout              time.Duration
}

func (p *parser) web(n *yaml.Node, c *Config) Web {
	if n == nil {
		return Web{}
	}
	w := Web{
		Fetch:    WebFetch{MaxBytes: DefaultFetchMaxBytes, Timeout: DefaultFetchTimeout},
		Research: WebResearch{MaxRunningPerChannel: DefaultResearchRunning, Timeout: DefaultResearchTimeout},
	}
	o, ok := p.object(n, "web", "fetch", "search", "research")
	if !ok {
		return w
	}
	if f := o.get("fetch"); f != nil {
		if fo, ok := p.object(f, o.at("fetch"), "enabled", "max_bytes", "timeout"); ok {
			w.Fetch.Enabled = p.enabled(fo)
			w.Fetch.MaxBytes = int64(p.integer(fo, "max_bytes", DefaultFetchMaxBytes, 1, MaxFetchMaxBytes))
			w.Fetch.Timeout = p.duration(fo, "timeout", DefaultFetchTimeout, MinFetchTimeout, MaxFetchTimeout)
		}
	}
	if s := o.get("search"); s != nil {
		if so, ok := p.object(s, o.at("search"), "provider", "url", "api_key_env"); ok {
			ws := &WebSearch{}
			ws.Provider, _ = p.text(so, "provider", true, providerRule)
			ws.URL = p.endpoint(so, "url", true)
			ws.APIKeyEnv = p.envVar(so, "api_key_env", ws.Provider == ProviderBrave)
			w.Search = ws
		}
	}
	if r := o.get("research"); r != nil {
		if ro, ok := p.object(r, o.at("research"), "enabled", "model", "max_running_per_channel", "timeout"); ok {
			w.Research.Enabled = p.enabled(ro)
			w.Research.Model, _ = p.text(ro, "model", false, notBlank)
			w.Research.MaxRunningPerChannel = p.integer(ro, "max_running_per_channel", DefaultResearchRunning, 1, MaxResearchRunning)
			w.Research.Timeout = p.duration(ro, "timeout", DefaultResearchTimeout, MinResearchTimeout, MaxResearchTimeout)
			if w.Research.Enabled && w.Search == nil {
				p.fail(r, o.at("research"), "requires web.search")
			}
			// The research worker speaks chat completions only.
			if w.Research.Enabled && c.Model.API == rtsandbox.ModelAPIAnthropic {
				p.fail(r, o.at("research"), "requires model.api: openai (the research worker speaks chat completions only)")
			}
		}
	}
	if w.Research.Model == "" {
		w.Research.Model = c.Model.Name
	}
	return w
}

// enabled reads "enabled", true when absent: writing the mapping turns the
// feature on.
func (p *parser) enabled(o object) bool {
	if o.get("enabled") == nil {
		return true
	}
	return p.boolean(o, "enabled")
}

func providerRule(s string) string {
	if s != ProviderSearXNG && s != ProviderBrave {
		return `must be "searxng" or "brave"`
	}
	return ""
}

// webToolNames refuses webhook tools that take the name of an enabled
// built-in web tool.
func (p *parser) webToolNames(c *Config, root *yaml.Node) {
	for i, t := range c.Tools {
		if t.Builtin == "" && (c.Web.Fetch.Enabled && t.Name == WebFetchTool || c.Web.Research.Enabled && t.Name == ResearchTool) {
			p.fail(root, index("tools", i)+".name", "%q is reserved for the built-in web tool", t.Name)
		}
	}
}
