package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/upstream/endpointtest"
)

const fullFile = `# every key
state_dir: /var/lib/rtsandbox
allow_http: false
model:
  url: https://api.openai.com/v1/chat/completions
  name: gpt-4.1-mini
  api_key_env: OPENAI_API_KEY
tools:
  - name: weather
    description: Current weather for a city
    parameters: {type: object, properties: {city: {type: string}}, required: [city], additionalProperties: false}
    url: https://tools.internal.example/weather
    api_key_env: WEATHER_TOOL_KEY
  - name: clock
    builtin: clock
mcp:
  - name: docs
    url: https://mcp.example/rpc
    api_key_env: DOCS_MCP_KEY
    tools: [{name: search, description: Search the docs, parameters: {type: object}}]
sandbox:
  image: registry.example/worker:1
  user: "1000:1001"
  turn_timeout: 90s
  limits: {memory_mb: 1024, cpus: 1.5, pids: 128}
  prompt: "Be brief."
  time_zone: Europe/Berlin
`

// minimal holds only the required keys; cases append to it.
const minimal = `state_dir: /var/lib/rtsandbox
model: {url: "https://api.example/v1/chat/completions", name: m, api_key_env: KEY}
`

func TestParseFull(t *testing.T) {
	got, err := Parse([]byte(fullFile))
	if err != nil {
		t.Fatalf("Parse(fullFile) error: %v", err)
	}
	want := &Config{
		StateDir: "/var/lib/rtsandbox",
		Model: Model{
			URL:       ep("https://api.openai.com/v1/chat/completions"),
			Name:      "gpt-4.1-mini",
			APIKeyEnv: "OPENAI_API_KEY",
		},
		Tools: []Tool{
			{
				Name:        "weather",
				Description: "Current weather for a city",
				Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`),
				URL:         ep("https://tools.internal.example/weather"),
				APIKeyEnv:   "WEATHER_TOOL_KEY",
			},
			{Name: "clock", Builtin: "clock"},
		},
		MCP: []MCPServer{{
			Name:      "docs",
			URL:       ep("https://mcp.example/rpc"),
			APIKeyEnv: "DOCS_MCP_KEY",
			Tools: []rtsandbox.ToolSpec{{
				Name:        "search",
				Description: "Search the docs",
				Parameters:  json.RawMessage(`{"type":"object"}`),
			}},
		}},
		Engine: EngineDocker,
		Sandbox: Sandbox{
			Image:       "registry.example/worker:1",
			User:        "1000:1001",
			UID:         1000,
			GID:         1001,
			TurnTimeout: 90 * time.Second,
			Limits:      Limits{MemoryMB: 1024, CPUs: 1.5, PIDs: 128, WorkspaceMB: DefaultWorkspaceMB},
			Prompt:      "Be brief.",
			TimeZone:    "Europe/Berlin",

			MaxQueueWait: DefaultMaxQueueWait,
			ReapInterval: DefaultReapInterval,
		},
		Host: Host{MemoryLimitMB: DefaultHostMemoryLimitMB},
	}
	withProfileDefaults(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse(fullFile) mismatch (-want +got):\n%s", diff)
	}
}

func TestParseDefaults(t *testing.T) {
	wantSandbox := Sandbox{
		Image:       DefaultImage,
		TurnTimeout: DefaultTurnTimeout,
		Limits:      Limits{MemoryMB: DefaultMemoryMB, CPUs: DefaultCPUs, PIDs: DefaultPIDs, WorkspaceMB: DefaultWorkspaceMB},
	}
	tests := []struct {
		name string
		in   string
		want *Config
	}{
		{
			name: "required-keys-only",
			in:   minimal,
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Sandbox:  wantSandbox,
			},
		},
		{
			name: "empty-values-mean-unset",
			in:   minimal + "allow_http:\ntools:\nmcp: ~\nsandbox: {image: ~, limits: {}}\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Sandbox:  wantSandbox,
			},
		},
		{
			name: "partial-limits-keep-other-defaults",
			in:   minimal + "sandbox: {limits: {pids: 8}, user: '', time_zone: ''}\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Sandbox: Sandbox{
					Image:       DefaultImage,
					TurnTimeout: DefaultTurnTimeout,
					Limits:      Limits{MemoryMB: DefaultMemoryMB, CPUs: DefaultCPUs, PIDs: 8, WorkspaceMB: DefaultWorkspaceMB},
				},
			},
		},
		{
			name: "state-dir-cleaned-and-http-allowed",
			in: "state_dir: /srv/rt//state/\nallow_http: true\n" +
				"model: {url: 'http://127.0.0.1:8080/v1', name: m, api_key_env: _K1}\n" +
				"sandbox: {turn_timeout: 1s, limits: {memory_mb: 64, cpus: 2}}\n",
			want: &Config{
				StateDir:  "/srv/rt/state",
				AllowHTTP: true,
				Model:     Model{URL: ep("http://127.0.0.1:8080/v1"), Name: "m", APIKeyEnv: "_K1"},
				Sandbox: Sandbox{
					Image:       DefaultImage,
					TurnTimeout: time.Second,
					Limits:      Limits{MemoryMB: 64, CPUs: 2, PIDs: DefaultPIDs, WorkspaceMB: DefaultWorkspaceMB},
				},
			},
		},
		{
			name: "no-upper-bounds-on-limits",
			in:   minimal + "sandbox: {turn_timeout: 600s, limits: {memory_mb: 0x100000, cpus: 64, pids: 1_000_000}}\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Sandbox: Sandbox{
					Image:       DefaultImage,
					TurnTimeout: 600 * time.Second,
					Limits:      Limits{MemoryMB: 1 << 20, CPUs: 64, PIDs: 1000000, WorkspaceMB: DefaultWorkspaceMB},
				},
			},
		},
		{
			name: "http-allowed-for-tools-and-mcp",
			in: minimal + "allow_http: true\ntools: [{name: w, description: d, parameters: {}, url: 'http://localhost:9/w'}]\n" +
				"mcp: [{name: m, url: 'http://[::1]:9/rpc', tools: [{name: s, description: '', parameters: {}}]}]\n",
			want: &Config{
				StateDir:  "/var/lib/rtsandbox",
				AllowHTTP: true,
				Model:     Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Tools:     []Tool{{Name: "w", Description: "d", Parameters: json.RawMessage(`{}`), URL: ep("http://localhost:9/w")}},
				MCP: []MCPServer{{Name: "m", URL: ep("http://[::1]:9/rpc"), Tools: []rtsandbox.ToolSpec{
					{Name: "s", Parameters: json.RawMessage(`{}`)},
				}}},
				Sandbox: wantSandbox,
			},
		},
		{
			name: "mcp-tools-by-name-and-declared",
			in:   minimal + "mcp: [{name: m, url: 'https://mcp.example/', tools: [search, {name: s, description: d, parameters: {}}, fetch]}]\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				MCP: []MCPServer{{Name: "m", URL: ep("https://mcp.example/"), Tools: []rtsandbox.ToolSpec{
					{Name: "search"}, {Name: "s", Description: "d", Parameters: json.RawMessage(`{}`)}, {Name: "fetch"},
				}}},
				Sandbox: wantSandbox,
			},
		},
		{
			name: "admission-and-reaper",
			in:   minimal + "sandbox: {max_turns: 3, max_queue_wait: 10s, reap_interval: 5s}\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Sandbox: Sandbox{
					Image:        DefaultImage,
					TurnTimeout:  DefaultTurnTimeout,
					Limits:       wantSandbox.Limits,
					MaxTurns:     3,
					MaxQueueWait: 10 * time.Second,
					ReapInterval: 5 * time.Second,
				},
			},
		},
		{
			name: "pool-size",
			in:   minimal + "sandbox: {pool: {size: 0}}\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Sandbox: Sandbox{
					Image: DefaultImage, TurnTimeout: DefaultTurnTimeout, Limits: wantSandbox.Limits,
					MaxQueueWait: DefaultMaxQueueWait, ReapInterval: DefaultReapInterval, PoolSize: new(0),
				},
			},
		},
		{
			name: "workspace-and-host-memory-limit",
			in:   minimal + "sandbox: {limits: {memory_mb: 128, workspace_mb: 128}}\nhost: {memory_limit_mb: 512}\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Sandbox: Sandbox{
					Image:       DefaultImage,
					TurnTimeout: DefaultTurnTimeout,
					Limits:      Limits{MemoryMB: 128, CPUs: DefaultCPUs, PIDs: DefaultPIDs, WorkspaceMB: 128},
				},
				Host: Host{MemoryLimitMB: 512},
				// A host of 512 MiB decodes bodies of at most 51 MiB
				// (a fifth of half): the default is lowered to it.
				Session: func() Session {
					s := defaultSession("/var/lib/rtsandbox")
					s.MaxRequestBytes = 51 << 20
					return s
				}(),
			},
		},
		{
			name: "builtin-with-own-description-and-parameters",
			in:   minimal + "tools: [{name: clock, builtin: clock, description: Time, parameters: {type: object}}]\n",
			want: &Config{
				StateDir: "/var/lib/rtsandbox",
				Model:    Model{URL: ep("https://api.example/v1/chat/completions"), Name: "m", APIKeyEnv: "KEY"},
				Tools:    []Tool{{Name: "clock", Builtin: "clock", Description: "Time", Parameters: json.RawMessage(`{"type":"object"}`)}},
				Sandbox:  wantSandbox,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.in, err)
			}
			if tt.want.Host == (Host{}) {
				tt.want.Host = Host{MemoryLimitMB: DefaultHostMemoryLimitMB}
			}
			if tt.want.Sandbox.MaxQueueWait == 0 {
				tt.want.Sandbox.MaxQueueWait = DefaultMaxQueueWait
			}
			if tt.want.Sandbox.ReapInterval == 0 {
				tt.want.Sandbox.ReapInterval = DefaultReapInterval
			}
			if tt.want.Engine == "" {
				tt.want.Engine = EngineDocker
			}
			withProfileDefaults(tt.want)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// errorTests lists invalid files and the problems each must report, one
// substring per problem. The count must match too, so a case that trips an
// unintended rule fails.
type errorTest struct {
	name string
	in   string
	want []string
}

var errorTests = []errorTest{
	// file shape
	{"empty-file", "", []string{"config: the file is empty"}},
	{"comments-only", "# nothing\n", []string{"config: the file is empty"}},
	{"top-level-list", "- a\n- b\n", []string{"config: the top level must be a mapping"}},
	{"top-level-scalar", "hello\n", []string{"config: the top level must be a mapping"}},
	{"top-level-null", "---\n", []string{"config: the top level must be a mapping"}},
	{"two-documents", minimal + "---\n" + minimal, []string{"config: holds more than one YAML document"}},
	{"syntax-error", "state_dir: [\n", []string{"config: yaml: "}},
	{"tab-indent", "model:\n\turl: x\n", []string{"config: yaml: "}},

	// unknown and duplicate keys at each level
	{"unknown-top-key", minimal + "bogus: 1\n", []string{"bogus: unknown key (line 3)"}},
	{"unknown-model-key", "state_dir: /s\nmodel: {url: 'https://x/', name: m, api_key_env: K, key: sk-1}\n", []string{"model.key: unknown key"}},
	{"unknown-tool-key", minimal + "tools: [{name: w, description: d, parameters: {}, url: 'https://x/', timeout: 5s}]\n", []string{"tools[0].timeout: unknown key"}},
	{"unknown-mcp-key", minimal + "mcp: [{name: d, url: 'https://x/', tools: [{name: s, description: d, parameters: {}}], headers: {}}]\n", []string{"mcp[0].headers: unknown key"}},
	{"unknown-mcp-tool-key", minimal + "mcp: [{name: d, url: 'https://x/', tools: [{name: s, description: d, parameters: {}, url: 'https://y/'}]}]\n", []string{"mcp[0].tools[0].url: unknown key"}},
	{"unknown-sandbox-key", minimal + "sandbox: {network: host}\n", []string{"sandbox.network: unknown key"}},
	{"unknown-limits-key", minimal + "sandbox: {limits: {swap_mb: 1}}\n", []string{"sandbox.limits.swap_mb: unknown key"}},
	{"odd-key-quoted", minimal + "\"a.b\": 1\n", []string{`["a.b"]: unknown key`}},
	{"duplicate-top-key", minimal + "state_dir: /other\n", []string{"state_dir: duplicate key (line 3)"}},
	{"duplicate-nested-key", "state_dir: /s\nmodel: {url: 'https://x/', name: m, name: n, api_key_env: K}\n", []string{"model.name: duplicate key"}},
	{"alias-refused", "state_dir: &d /s\nmodel: {url: 'https://x/', name: *d, api_key_env: K}\n", []string{"model.name: YAML aliases are not supported"}},
	{"merge-key-refused", "base: &b {name: m}\nstate_dir: /s\nmodel: {<<: *b, url: 'https://x/', api_key_env: K}\n", []string{"base: unknown key", `model["<<"]: unknown key`, "model.name: is required"}},
	{"non-scalar-key", minimal + "? [a]\n: 1\n", []string{"config: keys must be strings"}},

	// required keys
	{"missing-everything", "allow_http: true\n", []string{"state_dir: is required", "model: is required"}},
	{"missing-model-fields", "state_dir: /s\nmodel: {}\n", []string{"model.url: is required", "model.name: is required", "model.api_key_env: is required"}},
	{"model-not-mapping", "state_dir: /s\nmodel: gpt\n", []string{"model: must be a mapping"}},

	// state_dir
	{"state-dir-relative", "state_dir: var/lib\nmodel: {url: 'https://x/', name: m, api_key_env: K}\n", []string{"state_dir: must be an absolute path"}},
	{"state-dir-root", "state_dir: /\nmodel: {url: 'https://x/', name: m, api_key_env: K}\n", []string{"state_dir: must not be the root directory"}},
	{"state-dir-control", "state_dir: \"/s\\nx\"\nmodel: {url: 'https://x/', name: m, api_key_env: K}\n", []string{"state_dir: must not contain control characters"}},
	{"state-dir-number", "state_dir: 5\nmodel: {url: 'https://x/', name: m, api_key_env: K}\n", []string{"state_dir: must be a string"}},
	{"allow-http-string", minimal + "allow_http: 'yes'\n", []string{"allow_http: must be true or false"}},
	{"allow-http-yaml11-yes", minimal + "allow_http: yes\n", []string{"allow_http: must be true or false"}},

	// URL rule
	{"model-url-http", "state_dir: /s\nmodel: {url: 'http://x/', name: m, api_key_env: K}\n", []string{"model.url: must be an https URL without user info or fragment (set allow_http: true for loopback testing)"}},
	{"model-url-userinfo", "state_dir: /s\nmodel: {url: 'https://u:p@x/', name: m, api_key_env: K}\n", []string{"model.url: must be an https URL without user info"}},
	{"model-url-user-only", "state_dir: /s\nmodel: {url: 'https://u@x/', name: m, api_key_env: K}\n", []string{"model.url: must be an https URL without user info"}},
	{"model-url-fragment", "state_dir: /s\nmodel: {url: 'https://x/#f', name: m, api_key_env: K}\n", []string{"model.url: must be an https URL without user info or fragment"}},
	{"model-url-no-host", "state_dir: /s\nmodel: {url: 'https:///v1', name: m, api_key_env: K}\n", []string{"model.url: must name a host"}},
	{"model-url-port-only", "state_dir: /s\nmodel: {url: 'https://:443/v1', name: m, api_key_env: K}\n", []string{"model.url: must name a host"}},
	{"model-url-relative", "state_dir: /s\nmodel: {url: '/v1/chat', name: m, api_key_env: K}\n", []string{"model.url: must be an https URL"}},
	{"model-url-ftp-with-allow-http", "state_dir: /s\nallow_http: true\nmodel: {url: 'ftp://x/', name: m, api_key_env: K}\n", []string{"model.url: must be an http or https URL without user info or fragment"}},
	{"model-url-unparsable", "state_dir: /s\nmodel: {url: 'https://x y/', name: m, api_key_env: K}\n", []string{"model.url: must be a valid URL"}},
	{"allow-http-read-before-model-anywhere", "model: {url: 'http://127.0.0.1/', name: m, api_key_env: K}\nstate_dir: /s\nallow_http: false\n", []string{"model.url: must be an https URL"}},

	// model name and env var names
	{"model-name-blank", "state_dir: /s\nmodel: {url: 'https://x/', name: '  ', api_key_env: K}\n", []string{"model.name: must not be blank"}},
	{"model-name-empty", "state_dir: /s\nmodel: {url: 'https://x/', name: '', api_key_env: K}\n", []string{"model.name: must not be blank"}},
	{"env-var-leading-digit", "state_dir: /s\nmodel: {url: 'https://x/', name: m, api_key_env: 1KEY}\n", []string{"model.api_key_env: must be an environment variable name"}},
	{"env-var-value-not-name", "state_dir: /s\nmodel: {url: 'https://x/', name: m, api_key_env: 'sk-abc'}\n", []string{"model.api_key_env: must be an environment variable name"}},
	{"env-var-with-equals", "state_dir: /s\nmodel: {url: 'https://x/', name: m, api_key_env: 'A=B'}\n", []string{"model.api_key_env: must be an environment variable name"}},

	// tools
	{"tools-not-list", minimal + "tools: {name: w}\n", []string{"tools: must be a list"}},
	{"tool-not-mapping", minimal + "tools: [weather]\n", []string{"tools[0]: must be a mapping"}},
	{"tool-name-upper", minimal + "tools: [{name: Weather, description: d, parameters: {}, url: 'https://x/'}]\n", []string{"tools[0].name: must match ^[a-z][a-z0-9_]{0,47}$"}},
	{"tool-name-too-long", minimal + "tools: [{name: " + strings.Repeat("a", 49) + ", description: d, parameters: {}, url: 'https://x/'}]\n", []string{"tools[0].name: must match"}},
	{"tool-name-path", minimal + "tools: [{name: 'foo/..', description: d, parameters: {}, url: 'https://x/'}]\n", []string{"tools[0].name: must match"}},
	{"tool-name-missing", minimal + "tools: [{description: d, parameters: {}, url: 'https://x/'}]\n", []string{"tools[0].name: is required"}},
	{"tool-name-duplicate", minimal + "tools: [{name: w, description: d, parameters: {}, url: 'https://x/'}, {name: w, description: d, parameters: {}, url: 'https://y/'}]\n", []string{`tools[1].name: duplicate name "w" (also tools[0])`}},
	{"tool-clock-reserved", minimal + "tools: [{name: clock, description: d, parameters: {}, url: 'https://x/'}]\n", []string{`tools[0].name: "clock" is reserved for the built-in tool (set builtin: clock)`}},
	{"tool-url-missing", minimal + "tools: [{name: w, description: d, parameters: {}}]\n", []string{"tools[0].url: is required (or set builtin)"}},
	{"tool-url-http", minimal + "tools: [{name: w, description: d, parameters: {}, url: 'http://x/'}]\n", []string{"tools[0].url: must be an https URL without user info or fragment"}},
	{"tool-description-missing", minimal + "tools: [{name: w, parameters: {}, url: 'https://x/'}]\n", []string{"tools[0].description: is required"}},
	{"tool-parameters-missing", minimal + "tools: [{name: w, description: d, url: 'https://x/'}]\n", []string{"tools[0].parameters: is required"}},
	{"tool-parameters-list", minimal + "tools: [{name: w, description: d, parameters: [a], url: 'https://x/'}]\n", []string{"tools[0].parameters: must be a mapping"}},
	{"tool-parameters-string", minimal + "tools: [{name: w, description: d, parameters: '{\"type\":\"object\"}', url: 'https://x/'}]\n", []string{"tools[0].parameters: must be a mapping"}},
	{"tool-api-key-env-bad", minimal + "tools: [{name: w, description: d, parameters: {}, url: 'https://x/', api_key_env: 'x-y'}]\n", []string{"tools[0].api_key_env: must be an environment variable name"}},
	{"builtin-unknown", minimal + "tools: [{name: bash, builtin: bash}]\n", []string{`tools[0].builtin: must be "clock", the only built-in tool`}},
	{"builtin-with-url", minimal + "tools: [{name: clock, builtin: clock, url: 'https://x/'}]\n", []string{"tools[0].url: builtin and url are mutually exclusive"}},
	{"builtin-with-key", minimal + "tools: [{name: clock, builtin: clock, api_key_env: K}]\n", []string{"tools[0].api_key_env: is not used by builtin tools"}},
	{"builtin-other-name", minimal + "tools: [{name: time, builtin: clock}]\n", []string{`tools[0].name: must be "clock" for builtin: clock`}},
	{"builtin-parameters-list", minimal + "tools: [{name: clock, builtin: clock, parameters: []}]\n", []string{"tools[0].parameters: must be a mapping"}},
	{"builtin-twice", minimal + "tools: [{name: clock, builtin: clock}, {name: clock, builtin: clock}]\n", []string{`tools[1].name: duplicate name "clock" (also tools[0])`}},

	// parameters content
	{"parameters-alias", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {a: &s {type: string}, b: *s}}]\n", []string{"tools[0].parameters.b: YAML aliases are not supported"}},
	{"parameters-int-key", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {1: a}}]\n", []string{"tools[0].parameters: keys must be strings"}},
	{"parameters-null-key", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {~: a}}]\n", []string{"tools[0].parameters: keys must be strings"}},
	{"parameters-duplicate-key", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {properties: {a: 1, a: 2}}}]\n", []string{"tools[0].parameters.properties.a: duplicate key"}},
	{"parameters-nan", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {maximum: .nan}}]\n", []string{"tools[0].parameters.maximum: must be finite"}},
	{"parameters-inf-in-list", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {enum: [1, -.inf]}}]\n", []string{"tools[0].parameters.enum[1]: must be finite"}},
	{"parameters-binary", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {a: !!binary aGk=}}]\n", []string{"tools[0].parameters.a: unsupported YAML tag !!binary"}},
	{"parameters-custom-tag", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {a: !env HOME}}]\n", []string{"tools[0].parameters.a: unsupported YAML tag !env"}},
	{"parameters-bad-int", minimal + "tools: [{name: w, description: d, url: 'https://x/', parameters: {a: !!int abc}}]\n", []string{"tools[0].parameters.a: is not a valid !!int"}},

	// MCP
	{"mcp-name-bad", minimal + "mcp: [{name: Docs, url: 'https://x/', tools: [{name: s, description: d, parameters: {}}]}]\n", []string{"mcp[0].name: must match"}},
	{"mcp-name-duplicate", minimal + "mcp: [{name: d, url: 'https://x/', tools: [{name: s, description: d, parameters: {}}]}, {name: d, url: 'https://y/', tools: [{name: s, description: d, parameters: {}}]}]\n", []string{`mcp[1].name: duplicate name "d" (also mcp[0])`}},
	{"mcp-url-missing", minimal + "mcp: [{name: d, tools: [{name: s, description: d, parameters: {}}]}]\n", []string{"mcp[0].url: is required"}},
	{"mcp-url-fragment", minimal + "mcp: [{name: d, url: 'https://x/#a', tools: [{name: s, description: d, parameters: {}}]}]\n", []string{"mcp[0].url: must be an https URL without user info or fragment"}},
	{"mcp-tools-missing", minimal + "mcp: [{name: d, url: 'https://x/'}]\n", []string{"mcp[0].tools: is required"}},
	{"mcp-tools-empty", minimal + "mcp: [{name: d, url: 'https://x/', tools: []}]\n", []string{"mcp[0].tools: must list at least one tool"}},
	{"mcp-tool-name-bad", minimal + "mcp: [{name: d, url: 'https://x/', tools: [{name: 's.9', description: d, parameters: {}}]}]\n", []string{"mcp[0].tools[0].name: must match ^[a-zA-Z0-9_-]{1,128}$"}},
	{"mcp-tool-name-too-long", minimal + "mcp: [{name: d, url: 'https://x/', tools: [" + strings.Repeat("x", 129) + "]}]\n", []string{"mcp[0].tools[0]: must match ^[a-zA-Z0-9_-]{1,128}$"}},
	{"mcp-server-name-keeps-sealed-rule", minimal + "mcp: [{name: Docs, url: 'https://x/', tools: [s]}]\n", []string{"mcp[0].name: must match ^[a-z][a-z0-9_]{0,47}$"}},
	{"mcp-tool-name-duplicate", minimal + "mcp: [{name: d, url: 'https://x/', tools: [{name: s, description: d, parameters: {}}, {name: s, description: e, parameters: {}}]}]\n", []string{`mcp[0].tools[1].name: duplicate name "s" (also mcp[0].tools[0])`}},
	{"mcp-tool-fields-missing", minimal + "mcp: [{name: d, url: 'https://x/', tools: [{name: s}]}]\n", []string{"mcp[0].tools[0].description: is required", "mcp[0].tools[0].parameters: is required"}},
	{"mcp-tool-bare-name-bad", minimal + "mcp: [{name: d, url: 'https://x/', tools: ['get sum']}]\n", []string{"mcp[0].tools[0]: must match"}},
	{"mcp-tool-bare-not-string", minimal + "mcp: [{name: d, url: 'https://x/', tools: [1]}]\n", []string{"mcp[0].tools[0]: must be a tool name or a tool declaration {name, description, parameters}"}},
	{"mcp-tool-bare-null", minimal + "mcp: [{name: d, url: 'https://x/', tools: [~]}]\n", []string{"mcp[0].tools[0]: must be a tool name or a tool declaration {name, description, parameters}"}},
	{"mcp-tool-bare-duplicate", minimal + "mcp: [{name: d, url: 'https://x/', tools: [s, {name: s, description: d, parameters: {}}]}]\n", []string{`mcp[0].tools[1].name: duplicate name "s" (also mcp[0].tools[0])`}},
	{"mcp-api-key-env-bad", minimal + "mcp: [{name: d, url: 'https://x/', api_key_env: '$KEY', tools: [{name: s, description: d, parameters: {}}]}]\n", []string{"mcp[0].api_key_env: must be an environment variable name"}},

	// sandbox strings
	{"sandbox-not-mapping", minimal + "sandbox: [a]\n", []string{"sandbox: must be a mapping"}},
	{"image-empty", minimal + "sandbox: {image: ''}\n", []string{"sandbox.image: must not be empty"}},
	{"image-option", minimal + "sandbox: {image: --privileged}\n", []string{"sandbox.image: must not start with '-'"}},
	{"image-space", minimal + "sandbox: {image: 'a b'}\n", []string{"sandbox.image: must not contain whitespace or control characters"}},
	{"image-control", minimal + "sandbox: {image: \"a\\x7fb\"}\n", []string{"sandbox.image: must not contain whitespace or control characters"}},
	{"image-nbsp", minimal + "sandbox: {image: \"a\\u00a0b\"}\n", []string{"sandbox.image: must not contain whitespace"}},
	{"user-root", minimal + "sandbox: {user: '0:0'}\n", []string{`sandbox.user: must be "UID:GID" with decimal ids from 1 to 2147483647 (root is refused)`}},
	{"user-root-gid", minimal + "sandbox: {user: '1000:0'}\n", []string{"sandbox.user: must be \"UID:GID\""}},
	{"user-no-gid", minimal + "sandbox: {user: '1000'}\n", []string{"sandbox.user: must be \"UID:GID\""}},
	{"user-name", minimal + "sandbox: {user: 'nobody:nogroup'}\n", []string{"sandbox.user: must be \"UID:GID\""}},
	{"user-negative", minimal + "sandbox: {user: '-1:1000'}\n", []string{"sandbox.user: must be \"UID:GID\""}},
	{"user-plus-sign", minimal + "sandbox: {user: '+1:1'}\n", []string{"sandbox.user: must be \"UID:GID\""}},
	{"user-three-parts", minimal + "sandbox: {user: '1:2:3'}\n", []string{"sandbox.user: must be \"UID:GID\""}},
	{"user-too-large", minimal + "sandbox: {user: '4294967295:1'}\n", []string{"sandbox.user: must be \"UID:GID\""}},
	{"user-integer", minimal + "sandbox: {user: 1000}\n", []string{"sandbox.user: must be a string"}},
	{"time-zone-unknown", minimal + "sandbox: {time_zone: Mars/Olympus}\n", []string{"sandbox.time_zone: must be an IANA time zone name"}},
	{"time-zone-local", minimal + "sandbox: {time_zone: Local}\n", []string{"sandbox.time_zone: must be an IANA time zone name"}},
	{"time-zone-path", minimal + "sandbox: {time_zone: ../../etc/passwd}\n", []string{"sandbox.time_zone: must be an IANA time zone name"}},
	{"prompt-list", minimal + "sandbox: {prompt: [a]}\n", []string{"sandbox.prompt: must be a string"}},

	// durations
	{"timeout-bare-int", minimal + "sandbox: {turn_timeout: 20}\n", []string{`sandbox.turn_timeout: must be a duration string with a unit such as "120s", not a bare number`}},
	{"timeout-bare-float", minimal + "sandbox: {turn_timeout: 20.5}\n", []string{"sandbox.turn_timeout: must be a duration string with a unit such as \"120s\", not a bare number"}},
	{"timeout-no-unit-string", minimal + "sandbox: {turn_timeout: '20'}\n", []string{`sandbox.turn_timeout: must be a duration from 1s to 600s such as "120s"`}},
	{"timeout-too-short", minimal + "sandbox: {turn_timeout: 999ms}\n", []string{"sandbox.turn_timeout: must be a duration from 1s to 600s"}},
	{"timeout-too-long", minimal + "sandbox: {turn_timeout: 600001ms}\n", []string{"sandbox.turn_timeout: must be a duration from 1s to 600s"}},
	{"timeout-negative", minimal + "sandbox: {turn_timeout: -5s}\n", []string{"sandbox.turn_timeout: must be a duration from 1s to 600s"}},
	{"timeout-garbage", minimal + "sandbox: {turn_timeout: soon}\n", []string{"sandbox.turn_timeout: must be a duration from 1s to 600s"}},
	{"timeout-bool", minimal + "sandbox: {turn_timeout: true}\n", []string{"sandbox.turn_timeout: must be a string"}},

	// numbers
	{"memory-float", minimal + "sandbox: {limits: {memory_mb: 1.5}}\n", []string{"sandbox.limits.memory_mb: must be an integer"}},
	{"memory-string", minimal + "sandbox: {limits: {memory_mb: '512'}}\n", []string{"sandbox.limits.memory_mb: must be an integer"}},
	{"memory-float-integral", minimal + "sandbox: {limits: {memory_mb: 512.0}}\n", []string{"sandbox.limits.memory_mb: must be an integer"}},
	{"memory-too-small", minimal + "sandbox: {limits: {memory_mb: 63}}\n", []string{"sandbox.limits.memory_mb: must be an integer of at least 64"}},
	{"memory-overflows-bytes", minimal + "sandbox: {limits: {memory_mb: 8796093022208}}\n", []string{"sandbox.limits.memory_mb: must be an integer of at most 8796093022207"}},
	{"memory-beyond-int64", minimal + "sandbox: {limits: {memory_mb: 18446744073709551615}}\n", []string{"sandbox.limits.memory_mb: must be an integer of at most"}},
	{"pids-beyond-int64", minimal + "sandbox: {limits: {pids: 9223372036854775808}}\n", []string{"sandbox.limits.pids: must be an integer of at most 9223372036854775807"}},
	{"pids-too-small", minimal + "sandbox: {limits: {pids: 7}}\n", []string{"sandbox.limits.pids: must be an integer of at least 8"}},
	{"pids-float", minimal + "sandbox: {limits: {pids: 64.5}}\n", []string{"sandbox.limits.pids: must be an integer"}},
	{"pids-string", minimal + "sandbox: {limits: {pids: sixty}}\n", []string{"sandbox.limits.pids: must be an integer"}},
	{"cpus-zero", minimal + "sandbox: {limits: {cpus: 0}}\n", []string{"sandbox.limits.cpus: must be a finite number greater than 0"}},
	{"cpus-negative", minimal + "sandbox: {limits: {cpus: -1}}\n", []string{"sandbox.limits.cpus: must be a finite number greater than 0"}},
	{"cpus-nan", minimal + "sandbox: {limits: {cpus: .nan}}\n", []string{"sandbox.limits.cpus: must be a finite number greater than 0"}},
	{"cpus-inf", minimal + "sandbox: {limits: {cpus: .inf}}\n", []string{"sandbox.limits.cpus: must be a finite number greater than 0"}},
	{"cpus-string", minimal + "sandbox: {limits: {cpus: '2'}}\n", []string{"sandbox.limits.cpus: must be a finite number greater than 0"}},
	{"limits-not-mapping", minimal + "sandbox: {limits: 5}\n", []string{"sandbox.limits: must be a mapping"}},
	{"workspace-over-memory", minimal + "sandbox: {limits: {memory_mb: 64, workspace_mb: 65}}\n", []string{"sandbox.limits.workspace_mb: must be an integer of at most 64"}},
	{"workspace-zero", minimal + "sandbox: {limits: {workspace_mb: 0}}\n", []string{"sandbox.limits.workspace_mb: must be an integer of at least 1"}},
	{"host-memory-limit-low", minimal + "host: {memory_limit_mb: 63}\n", []string{"host.memory_limit_mb: must be an integer of at least 64"}},
	{"session-request-over-decode-budget", minimal + "host: {memory_limit_mb: 256}\nsession: {max_request_mb: 26}\n",
		[]string{"session.max_request_mb: must be at most 25 with host.memory_limit_mb 256: a body being decoded holds up to 5 times its size, and all of them together at most half of the memory limit"}},
	{"compactor-request-over-decode-budget", minimal + "host: {memory_limit_mb: 128}\nsession: {compactor: {engine: summary, max_request_mb: 13}}\n",
		[]string{"session.compactor.max_request_mb: must be at most 12 with host.memory_limit_mb 128"}},
	{"max-turns-zero", minimal + "sandbox: {max_turns: 0}\n", []string{"sandbox.max_turns: must be an integer of at least 1"}},
	{"pool-size-negative", minimal + "sandbox: {pool: {size: -1}}\n", []string{"sandbox.pool.size: must be an integer of at least 0"}},
	{"pool-size-over", minimal + "sandbox: {pool: {size: 65}}\n", []string{"sandbox.pool.size: must be an integer of at most 64"}},
	{"pool-size-string", minimal + "sandbox: {pool: {size: two}}\n", []string{"sandbox.pool.size: must be an integer"}},
	{"pool-unknown-key", minimal + "sandbox: {pool: {min: 1}}\n", []string{"sandbox.pool.min: unknown key"}},
	{"pool-not-mapping", minimal + "sandbox: {pool: 3}\n", []string{"sandbox.pool: must be a mapping"}},
	{"queue-wait-bare-number", minimal + "sandbox: {max_queue_wait: 5}\n", []string{"sandbox.max_queue_wait: must be a duration string"}},
	{"reap-interval-too-short", minimal + "sandbox: {reap_interval: 10ms}\n", []string{"sandbox.reap_interval: must be a duration from 1s to 3600s"}},
	{"host-unknown-key", minimal + "host: {gomaxprocs: 2}\n", []string{"host.gomaxprocs: unknown key"}},

	// all problems at once
	{
		name: "reports-every-problem",
		in: "state_dir: rel\nmodel: {url: 'http://x/', name: '', api_key_env: '1'}\n" +
			"tools: [{name: W, url: 'https://x/'}]\nsandbox: {turn_timeout: 5, limits: {pids: 1}, extra: 1}\n",
		want: []string{
			"state_dir: must be an absolute path",
			"model.url: must be an https URL",
			"model.name: must not be blank",
			"model.api_key_env: must be an environment variable name",
			"tools[0].name: must match",
			"tools[0].description: is required",
			"tools[0].parameters: is required",
			"sandbox.extra: unknown key",
			"sandbox.turn_timeout: must be a duration string",
			"sandbox.limits.pids: must be an integer of at least 8",
		},
	},
}

func TestParseErrors(t *testing.T) { checkParseErrors(t, errorTests) }

// checkParseErrors runs a table of invalid files: each must report
// exactly the listed problems.
func checkParseErrors(t *testing.T, tests []errorTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, nil; want errors %q", tt.in, got, tt.want)
			}
			if !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("Parse(%q) error %v does not match rtsandbox.ErrInvalid", tt.in, err)
			}
			lines := strings.Split(err.Error(), "\n")
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error:\n%v\nwant it to contain %q", tt.in, err, w)
				}
			}
			if len(lines) != len(tt.want) {
				t.Errorf("Parse(%q) reported %d problems:\n%v\nwant %d", tt.in, len(lines), err, len(tt.want))
			}
		})
	}
}

func TestParametersJSON(t *testing.T) {
	tests := []struct {
		name string
		in   string // the parameters mapping, in YAML
		want string
	}{
		{"key-order-kept", "{z: 1, a: 2, m: {y: 1, b: 2}}", `{"z":1,"a":2,"m":{"y":1,"b":2}}`},
		{
			name: "block-style-key-order",
			in:   "\n      type: object\n      required: [b, a]\n      properties:\n        b: {type: string}\n        a: {type: integer}\n      additionalProperties: false",
			want: `{"type":"object","required":["b","a"],"properties":{"b":{"type":"string"},"a":{"type":"integer"}},"additionalProperties":false}`,
		},
		{"empty", "{}", `{}`},
		{"core-schema-scalars", "{s: abc, i: -12, h: 0x1F, o: 0o17, f: 1.5, e: 1e3, t: true, T: True, n: null, tilde: ~, empty: }",
			`{"s":"abc","i":-12,"h":31,"o":15,"f":1.5,"e":1000,"t":true,"T":true,"n":null,"tilde":null,"empty":null}`},
		{"yaml11-words-are-strings", "{a: yes, b: no, c: on, d: off, e: y}", `{"a":"yes","b":"no","c":"on","d":"off","e":"y"}`},
		{"quoted-scalars-stay-strings", `{a: "1", b: 'true', c: "null", d: !!str 5}`, `{"a":"1","b":"true","c":"null","d":"5"}`},
		{"explicit-tags", `{a: !!int "7", b: !!float "2", c: !!bool "false"}`, `{"a":7,"b":2,"c":false}`},
		{"date-is-string", "{a: 2024-01-02}", `{"a":"2024-01-02"}`},
		{"big-integer-kept", "{a: 18446744073709551615, b: -9223372036854775808}", `{"a":18446744073709551615,"b":-9223372036854775808}`},
		{"nested-lists", "{a: [[1, x], [], [{b: c}]]}", `{"a":[[1,"x"],[],[{"b":"c"}]]}`},
		{"no-html-escaping", `{a: "<b>&</b>", "k\"q": "\u2028"}`, `{"a":"<b>&</b>","k\"q":"\u2028"}`},
		{"unicode-and-control", `{a: "é\t\u0001"}`, `{"a":"é\t\u0001"}`},
		{"block-scalar", "\n      a: |\n        line1\n        line2\n      b: 1", `{"a":"line1\nline2\n","b":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := minimal + "tools:\n  - name: w\n    description: d\n    url: https://x/\n    parameters: " + tt.in + "\n"
			c, err := Parse([]byte(in))
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", in, err)
			}
			if got := string(c.Tools[0].Parameters); got != tt.want {
				t.Errorf("parameters of %q = %s; want %s", tt.in, got, tt.want)
			}
			if !json.Valid(c.Tools[0].Parameters) {
				t.Errorf("parameters of %q = %s; not valid JSON", tt.in, c.Tools[0].Parameters)
			}
		})
	}
}

func TestEnvVarLookup(t *testing.T) {
	calls := 0
	values := []string{"first", "", "rotated"}
	getenv := func(name string) string {
		if name != "OPENAI_API_KEY" {
			t.Errorf("getenv(%q); want OPENAI_API_KEY", name)
		}
		v := values[calls]
		calls++
		return v
	}
	e := EnvVar("OPENAI_API_KEY")
	for i, want := range values {
		if got := e.Lookup(getenv); got != want {
			t.Errorf("Lookup call %d = %q; want %q", i, got, want)
		}
	}
	if calls != len(values) {
		t.Errorf("getenv called %d times; want %d (one per Lookup)", calls, len(values))
	}
	if got := EnvVar("").Lookup(func(string) string { t.Error("getenv called for an empty name"); return "x" }); got != "" {
		t.Errorf(`EnvVar("").Lookup = %q; want ""`, got)
	}
}

func TestEnvVarLookupDefaultsToEnvironment(t *testing.T) {
	t.Setenv("RTSANDBOX_CONFIG_TEST_KEY", "one")
	e := EnvVar("RTSANDBOX_CONFIG_TEST_KEY")
	if got := e.Lookup(nil); got != "one" {
		t.Errorf("Lookup(nil) = %q; want %q", got, "one")
	}
	t.Setenv("RTSANDBOX_CONFIG_TEST_KEY", "two")
	if got := e.Lookup(nil); got != "two" {
		t.Errorf("Lookup(nil) after change = %q; want %q", got, "two")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", fullFile)
	c, err := Load(good)
	if err != nil {
		t.Fatalf("Load(%q) error: %v", good, err)
	}
	want, _ := Parse([]byte(fullFile))
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Load(%q) mismatch (-want +got):\n%s", good, diff)
	}

	tests := []struct {
		name    string
		path    string
		want    string
		invalid bool
	}{
		{"missing-file", filepath.Join(dir, "nope.yaml"), "no such file", false},
		{"invalid-content", write("bad.yaml", "state_dir: x\n"), "state_dir: must be an absolute path", true},
		{"too-large", write("big.yaml", minimal+"# "+strings.Repeat("x", MaxFileSize)+"\n"), "larger than 1048576 bytes", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path)
			if err == nil {
				t.Fatalf("Load(%q) = nil error; want %q", tt.path, tt.want)
			}
			if !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load(%q) error %q; want it to name the path and contain %q", tt.path, err, tt.want)
			}
			if got := errors.Is(err, rtsandbox.ErrInvalid); got != tt.invalid {
				t.Errorf("errors.Is(Load(%q), ErrInvalid) = %v; want %v", tt.path, got, tt.invalid)
			}
		})
	}
}

func TestLoadExactlyMaxSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "max.yaml")
	pad := MaxFileSize - len(minimal) - len("# \n")
	if err := os.WriteFile(p, []byte(minimal+"# "+strings.Repeat("x", pad)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Errorf("Load(file of exactly %d bytes) error: %v", MaxFileSize, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(fullFile))
	f.Add([]byte(minimal))
	f.Add([]byte(withTools + "models: {main: {url: 'https://a/', name: c, api_key_env: A, api: anthropic}}\n" +
		"profiles: {s: {mode: session, model: main, mcp: [docs], tools: [clock]}}\nchannels_profile: {'http:a': s}\n" +
		"session: {max_calls: 9, limits: {pids: 9}, log_options: {max-size: 1m}}\n"))
	for _, tests := range [][]errorTest{errorTests, profileErrorTests, runtimeErrorTests} {
		for _, tt := range tests {
			f.Add([]byte(tt.in))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c1, err1 := Parse(data)
		c2, err2 := Parse(data)
		if err1 != nil {
			if !errors.Is(err1, rtsandbox.ErrInvalid) {
				t.Fatalf("Parse error %v does not match ErrInvalid", err1)
			}
			if err2 == nil || err1.Error() != err2.Error() {
				t.Fatalf("Parse not deterministic: %v then %v", err1, err2)
			}
			return
		}
		if err2 != nil {
			t.Fatalf("Parse accepted then refused: %v", err2)
		}
		if diff := cmp.Diff(c1, c2); diff != "" {
			t.Fatalf("Parse twice differs (-first +second):\n%s", diff)
		}
		for _, tool := range c1.Tools {
			if tool.Parameters != nil && !json.Valid(tool.Parameters) {
				t.Fatalf("tool %q parameters not valid JSON: %s", tool.Name, tool.Parameters)
			}
		}
	})
}

// withProfileDefaults fills in what Parse adds to a file without
// profiles or a session block: the built-in sealed default profile and the
// session defaults.
func withProfileDefaults(c *Config) {
	if c.Profiles == nil {
		c.Profiles = map[string]Profile{DefaultProfile: {Mode: ModeSealed}}
	}
	if c.DefaultProfile == "" {
		c.DefaultProfile = DefaultProfile
	}
	if c.Session.MaxCalls == 0 {
		c.Session = defaultSession(c.StateDir)
	}
	if c.Budgets.OnStoreError == "" {
		c.Budgets.OnStoreError = StoreDeny
	}
}

// ep is a checked endpoint for expected configs.
func ep(raw string) upstream.Endpoint { return upstream.MustParseEndpoint(raw, true) }

// Every URL key of the config refuses exactly what the one endpoint rule
// refuses, and names the key and the rule.
func TestURLKeysApplyTheEndpointRule(t *testing.T) {
	keys := map[string]func(u string) string{
		"model.url": func(u string) string {
			return "state_dir: /s\nmodel: {url: '" + u + "', name: m, api_key_env: K}\n"
		},
		"tools[0].url": func(u string) string {
			return minimal + "tools: [{name: w, description: d, parameters: {}, url: '" + u + "'}]\n"
		},
		"mcp[0].url": func(u string) string {
			return minimal + "mcp: [{name: d, url: '" + u + "', tools: [{name: s, description: d, parameters: {}}]}]\n"
		},
		"web.search.url": func(u string) string {
			return minimal + "web: {search: {provider: searxng, url: '" + u + "'}}\n"
		},
	}
	for _, tc := range endpointtest.Cases() {
		for key, doc := range keys {
			t.Run(tc.Name+"/"+key, func(t *testing.T) {
				in := doc(tc.Raw)
				if tc.AllowHTTP {
					in = "allow_http: true\n" + in
				}
				_, err := Parse([]byte(in))
				if tc.Want == nil {
					if err != nil && strings.Contains(err.Error(), key) {
						t.Fatalf("Parse(%s: %q) = %v; want the URL accepted", key, tc.Raw, err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), key+": must") {
					t.Fatalf("Parse(%s: %q) = %v; want a refusal naming %s", key, tc.Raw, err, key)
				}
			})
		}
	}
}

func TestParseUser(t *testing.T) {
	for _, tt := range []struct {
		in       string
		uid, gid int
		ok       bool
	}{
		{"1000:1000", 1000, 1000, true},
		{"65534:65534", 65534, 65534, true},
		{"0:0", 0, 0, false},
		{"1000", 0, 0, false},
		{"-1:5", 0, 0, false},
		{"+5:5", 0, 0, false},
		{"2147483648:1", 0, 0, false},
		{" 5:5", 0, 0, false},
	} {
		uid, gid, err := ParseUser(tt.in)
		if (err == nil) != tt.ok || uid != tt.uid || gid != tt.gid {
			t.Errorf("ParseUser(%q) = %d, %d, %v; want %d, %d, ok %v", tt.in, uid, gid, err, tt.uid, tt.gid, tt.ok)
		}
	}
}

// A missing required key is reported where the operator must write it: a
// top-level key the file lacks at no line at all (it used to say "line 1",
// the first key of the file), a nested one at its mapping, an empty one at
// its own line.
func TestRequiredKeyPointsWhereToWrite(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"top-level-absent", "state_dir: /s\n", []string{"model: is required (the file has no top-level model: key)"}},
		{"top-level-empty", "state_dir: /s\nmodel:\n", []string{"model: is required (the key is there with no value) (line 2)"}},
		{"nested-absent", "state_dir: /s\nmodel:\n  url: https://m.example/v1\n  name: m\n", []string{
			"model.api_key_env: is required (model has no api_key_env: key) (line 3)"}},
		{"nested-empty", "state_dir: /s\nmodel:\n  url: https://m.example/v1\n  name: m\n  api_key_env:\n", []string{
			"model.api_key_env: is required (the key is there with no value) (line 5)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error", tt.in)
			}
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("Parse(%q) problems (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestEnvVarSecret(t *testing.T) {
	getenv := func(k string) string { return map[string]string{"SET": "v", "EMPTY": ""}[k] }
	tests := []struct {
		name    string
		v       EnvVar
		want    rtsandbox.Secret
		wantErr string
	}{
		{"set", "SET", "v", ""},
		{"empty", "EMPTY", "", "EMPTY is unset or empty"},
		{"absent", "ABSENT", "", "ABSENT is unset or empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.v.Secret(getenv)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("Secret() = %q, %q; want %q, %q", got.Reveal(), gotErr, tt.want.Reveal(), tt.wantErr)
			}
		})
	}
}
