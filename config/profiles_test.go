package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

// withTools adds a webhook tool "lookup", the built-in clock and an MCP
// server "docs" to minimal, for profiles to name.
const withTools = minimal + `tools:
  - {name: lookup, description: d, parameters: {}, url: 'https://x/'}
  - {name: clock, builtin: clock}
mcp:
  - {name: docs, url: 'https://mcp.example/', tools: [search]}
  - {name: wiki, url: 'https://wiki.example/', tools: [search]}
`

func TestParseProfiles(t *testing.T) {
	sealed := Profile{Mode: ModeSealed}
	tests := []struct {
		name      string
		in        string
		models    []string
		profiles  map[string]Profile
		channels  map[rtsandbox.ChannelKey]string
		defaultTo string
	}{
		{
			name:      "no-profiles-means-built-in-sealed-default",
			in:        withTools,
			profiles:  map[string]Profile{DefaultProfile: sealed},
			defaultTo: DefaultProfile,
		},
		{
			name: "issue-example",
			in: withTools + "models: {main: {url: 'https://api.anthropic.com', name: claude, api_key_env: AK, api: anthropic}}\n" +
				"profiles:\n  default: {mode: sealed}\n  studio: {mode: session, model: main, mcp: [docs], tools: [lookup, clock]}\n" +
				"channels_profile: {\"discord:112233445566778899\": studio}\n",
			models: []string{"main"},
			profiles: map[string]Profile{
				DefaultProfile: sealed,
				"studio":       {Mode: ModeSession, Model: "main", MCP: []string{"docs"}, Tools: []string{"lookup", "clock"}},
			},
			channels:  map[rtsandbox.ChannelKey]string{"discord:112233445566778899": "studio"},
			defaultTo: DefaultProfile,
		},
		{
			name:      "session-without-model-uses-the-model-block",
			in:        withTools + "profiles: {bare: {mode: session}}\ndefault_profile: bare\n",
			profiles:  map[string]Profile{DefaultProfile: sealed, "bare": {Mode: ModeSession, Model: DefaultModel}},
			defaultTo: "bare",
		},
		{
			name:      "model-block-by-name",
			in:        withTools + "profiles: {s: {mode: session, model: default, mcp: [wiki, docs]}}\n",
			profiles:  map[string]Profile{DefaultProfile: sealed, "s": {Mode: ModeSession, Model: DefaultModel, MCP: []string{"wiki", "docs"}}},
			defaultTo: DefaultProfile,
		},
		{
			name:      "default-redefined-as-session",
			in:        withTools + "profiles: {default: {mode: session, tools: [clock]}}\n",
			profiles:  map[string]Profile{DefaultProfile: {Mode: ModeSession, Model: DefaultModel, Tools: []string{"clock"}}},
			defaultTo: DefaultProfile,
		},
		{
			name: "web-tools-when-on",
			in: withTools + "web: {fetch: {}, search: {provider: searxng, url: 'https://s.example/'}, research: {}}\n" +
				"profiles: {w: {mode: session, tools: [web_fetch, research]}}\n",
			profiles:  map[string]Profile{DefaultProfile: sealed, "w": {Mode: ModeSession, Model: DefaultModel, Tools: []string{"web_fetch", "research"}}},
			defaultTo: DefaultProfile,
		},
		{
			name:      "skills-dir-cleaned",
			in:        withTools + "profiles: {s: {mode: session, tools: [lookup], skills: /srv/skills/./studio/}}\n",
			profiles:  map[string]Profile{DefaultProfile: sealed, "s": {Mode: ModeSession, Model: DefaultModel, Tools: []string{"lookup"}, Skills: "/srv/skills/studio"}},
			defaultTo: DefaultProfile,
		},
		{
			name:      "channel-mapped-to-built-in-default",
			in:        withTools + "profiles: {s: {mode: session}}\ndefault_profile: s\nchannels_profile: {'http:lobby': default}\n",
			profiles:  map[string]Profile{DefaultProfile: sealed, "s": {Mode: ModeSession, Model: DefaultModel}},
			channels:  map[rtsandbox.ChannelKey]string{"http:lobby": DefaultProfile},
			defaultTo: "s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse error: %v", err)
			}
			if diff := cmp.Diff(tt.profiles, c.Profiles); diff != "" {
				t.Errorf("Profiles mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.channels, c.ChannelProfiles); diff != "" {
				t.Errorf("ChannelProfiles mismatch (-want +got):\n%s", diff)
			}
			if c.DefaultProfile != tt.defaultTo {
				t.Errorf("DefaultProfile = %q; want %q", c.DefaultProfile, tt.defaultTo)
			}
			var models []string
			for name := range c.Models {
				models = append(models, name)
			}
			if diff := cmp.Diff(tt.models, models); diff != "" {
				t.Errorf("Models mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseModelsEntry(t *testing.T) {
	in := minimal + "models:\n  main: {url: 'https://api.anthropic.com', name: claude-x, api_key_env: AK, api: anthropic, thinking: low, stream: true}\n"
	c, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse error: %v", err)
	}
	want := Model{URL: ep("https://api.anthropic.com"), Name: "claude-x", APIKeyEnv: "AK", API: rtsandbox.ModelAPIAnthropic, Thinking: "low", Stream: true}
	if diff := cmp.Diff(want, c.Models["main"]); diff != "" {
		t.Errorf("models.main mismatch (-want +got):\n%s", diff)
	}
}

func TestParseSession(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Session
	}{
		{
			name: "defaults-of-the-issue",
			in:   minimal,
			want: Session{
				MaxCalls: 128, MaxInFlight: 4, MaxRequestBytes: 96 << 20, MaxResponseBytes: 50 << 20, MaxConnections: 16,
				TurnTimeout: 600 * time.Second, StartTimeout: 90 * time.Second,
				Limits:   SessionLimits{MemoryMB: 1536, CPUs: 1, PIDs: 256},
				PartyDir: "/var/lib/rtsandbox/party", ContainerPrefix: "rtsandbox-session",
				LogDriver: "local", LogOptions: map[string]string{"max-size": "10m", "max-file": "3"},
				Disk: SessionDisk{Mode: "auto", SizeMB: 1024, MaxFiles: 20000, PruneAfter: 168 * time.Hour},
			},
		},
		{
			name: "every-key",
			in: minimal + "session:\n  max_calls: 1000\n  max_in_flight: 7\n  max_connections: 8\n  max_request_mb: 1\n  max_response_mb: 50\n" +
				"  turn_timeout: 1h\n  start_timeout: 1s\n  limits: {memory_mb: 64, cpus: 0.5, pids: 8}\n  party_dir: /srv/party/\n" +
				"  container_prefix: rt0-x\n  log_driver: local\n  log_options: {max-size: 10m, max-file: '3'}\n" +
				"  disk: {mode: soft, size_mb: 2048, max_files: 500, prune_after_hours: 24}\n",
			want: Session{
				MaxCalls: 1000, MaxInFlight: 7, MaxRequestBytes: 1 << 20, MaxResponseBytes: 50 << 20, MaxConnections: 8,
				TurnTimeout: time.Hour, StartTimeout: time.Second,
				Limits:   SessionLimits{MemoryMB: 64, CPUs: 0.5, PIDs: 8},
				PartyDir: "/srv/party", ContainerPrefix: "rt0-x", LogDriver: "local",
				LogOptions: map[string]string{"max-size": "10m", "max-file": "3"},
				Disk:       SessionDisk{Mode: "soft", SizeMB: 2048, MaxFiles: 500, PruneAfter: 24 * time.Hour},
			},
		},
		{
			name: "few-connections-lower-the-default-in-flight",
			in:   minimal + "session: {max_connections: 2}\n",
			want: sessionWith(func(s *Session) { s.MaxConnections, s.MaxInFlight = 2, 1 }),
		},
		{
			name: "party-dir-beside-the-state-dir-or-deeper-in-its-own-entry",
			in:   minimal + "session: {party_dir: /var/lib/rtsandbox/sessions/party}\n",
			want: sessionWith(func(s *Session) { s.PartyDir = "/var/lib/rtsandbox/sessions/party" }),
		},
		{
			name: "party-dir-outside-the-state-dir",
			in:   minimal + "session: {party_dir: /var/lib/rtsandbox-party}\n",
			want: sessionWith(func(s *Session) { s.PartyDir = "/var/lib/rtsandbox-party" }),
		},
		{
			name: "other-log-driver-drops-the-default-options",
			in:   minimal + "session: {log_driver: journald}\n",
			want: sessionWith(func(s *Session) { s.LogDriver, s.LogOptions = "journald", nil }),
		},
		{
			name: "options-alone-replace-the-default-options",
			in:   minimal + "session: {log_options: {max-size: 1m}}\n",
			want: sessionWith(func(s *Session) { s.LogOptions = map[string]string{"max-size": "1m"} }),
		},
		{
			name: "long-default-party-dir-is-fine-without-session-profiles",
			in:   strings.Replace(minimal, "/var/lib/rtsandbox", "/"+strings.Repeat("d", 80), 1),
			want: defaultSession("/" + strings.Repeat("d", 80)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse error: %v", err)
			}
			if diff := cmp.Diff(tt.want, c.Session); diff != "" {
				t.Errorf("Session mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// sessionWith is the default session block of minimal, changed by f.
func sessionWith(f func(*Session)) Session {
	s := defaultSession("/var/lib/rtsandbox")
	f(&s)
	return s
}

var profileErrorTests = []errorTest{
	// profiles
	{"profiles-not-mapping", withTools + "profiles: [a]\n", []string{"profiles: must be a mapping"}},
	{"profile-name-with-space", withTools + "profiles: {'a b': {mode: sealed}}\n", []string{`profiles["a b"]: must be a profile name matching ^[a-zA-Z0-9_-]{1,100}$`}},
	{"profile-name-too-long", withTools + "profiles: {" + strings.Repeat("p", 101) + ": {mode: sealed}}\n", []string{"must be a profile name matching"}},
	{"profile-duplicate", withTools + "profiles: {a: {mode: sealed}, a: {mode: sealed}}\n", []string{"profiles.a: duplicate key"}},
	{"profile-alias", withTools + "x: &p {mode: sealed}\nprofiles: {a: *p}\n", []string{"x: unknown key", "profiles.a: YAML aliases are not supported"}},
	{"profile-mode-missing", withTools + "profiles: {a: {model: default}}\n", []string{"profiles.a.mode: is required"}},
	{"profile-mode-unknown", withTools + "profiles: {a: {mode: pi}}\n", []string{`profiles.a.mode: must be "sealed" or "session"`}},
	{"profile-unknown-key", withTools + "profiles: {a: {mode: session, image: x}}\n", []string{"profiles.a.image: unknown key"}},
	{"sealed-profile-with-tools", withTools + "profiles: {a: {mode: sealed, tools: [clock], mcp: [docs], model: default}}\n", []string{
		"profiles.a.model: is only used with mode: session", "profiles.a.mcp: is only used with mode: session", "profiles.a.tools: is only used with mode: session"}},
	{"sealed-profile-with-skills", withTools + "profiles: {a: {mode: sealed, skills: /srv/skills}}\n", []string{"profiles.a.skills: is only used with mode: session"}},
	{"profile-skills-relative", withTools + "profiles: {a: {mode: session, skills: skills}}\n", []string{"profiles.a.skills: must be an absolute path"}},
	{"profile-skills-root", withTools + "profiles: {a: {mode: session, skills: /}}\n", []string{"profiles.a.skills: must not be the root directory"}},
	{"profile-skills-control", withTools + "profiles: {a: {mode: session, skills: \"/srv/a\\nb\"}}\n", []string{"profiles.a.skills: must not contain control characters"}},
	{"profile-skills-not-string", withTools + "profiles: {a: {mode: session, skills: [/srv/skills]}}\n", []string{"profiles.a.skills: must be a string"}},
	{"profile-unknown-model", withTools + "profiles: {a: {mode: session, model: main}}\n", []string{`profiles.a.model: must name "default" (the model block) or an entry of models (known: default)`}},
	{"profile-unknown-mcp", withTools + "profiles: {a: {mode: session, mcp: [docs, search]}}\n", []string{`profiles.a.mcp[1]: must name a server of the mcp list; "search" is not one (known: docs, wiki)`}},
	{"profile-unknown-tool", withTools + "profiles: {a: {mode: session, tools: [lookup, bash]}}\n", []string{`"bash" is not one (known: lookup, clock)`}},
	{"profile-web-tool-while-off", withTools + "profiles: {a: {mode: session, tools: [web_fetch]}}\n", []string{`profiles.a.tools[0]: must name a host tool`}},
	{"profile-duplicate-tool", withTools + "profiles: {a: {mode: session, tools: [clock, clock]}}\n", []string{`profiles.a.tools[1]: duplicate name "clock"`}},
	{"profile-tools-not-list", withTools + "profiles: {a: {mode: session, tools: clock}}\n", []string{"profiles.a.tools: must be a list"}},
	{"profile-tool-not-string", withTools + "profiles: {a: {mode: session, tools: [{name: clock}]}}\n", []string{"profiles.a.tools[0]: must be a string"}},

	// models
	{"models-default-reserved", minimal + "models: {default: {url: 'https://x/', name: m, api_key_env: K}}\n", []string{`models.default: "default" is reserved for the model block`}},
	{"models-bad-name", minimal + "models: {Main: {url: 'https://x/', name: m, api_key_env: K}}\n", []string{"models.Main: must be a model name matching"}},
	{"models-entry-checked-like-model", minimal + "models: {main: {url: 'http://x/', name: m, key: K}}\n", []string{
		"models.main.key: unknown key", "models.main.url: must be an https URL", "models.main.api_key_env: is required"}},

	// mapping channels to profiles: an unknown profile is refused at load
	{"channel-to-unknown-profile", withTools + "profiles: {studio: {mode: session}}\nchannels_profile: {'discord:1': studoi}\n", []string{
		`channels_profile["discord:1"]: must name a profile; "studoi" is not one (known: default, studio)`}},
	{"channel-key-invalid", withTools + "channels_profile: {lobby: default}\n", []string{"channels_profile.lobby: must be a channel key"}},
	{"channel-profile-not-string", withTools + "channels_profile: {'http:a': [default]}\n", []string{`channels_profile["http:a"]: must be a string`}},
	{"channel-key-over-256-bytes", withTools + "channels_profile: {'http:" + strings.Repeat("c", rtsandbox.MaxChannelKey-4) + "': default}\n", []string{"must be a channel key matching ^[a-z][a-z0-9_-]*:.+$ of at most 256 bytes"}},
	{"channel-duplicate", withTools + "channels_profile: {'http:a': default, 'http:a': default}\n", []string{`channels_profile["http:a"]: duplicate key`}},
	{"default-profile-unknown", withTools + "default_profile: studio\n", []string{`default_profile: must name a profile; "studio" is not one (known: default)`}},

	// session block
	{"session-unknown-key", minimal + "session: {network: host}\n", []string{"session.network: unknown key"}},
	{"session-calls-zero", minimal + "session: {max_calls: 0}\n", []string{"session.max_calls: must be an integer of at least 1"}},
	{"session-calls-over-range", minimal + "session: {max_calls: 1001}\n", []string{"session.max_calls: must be an integer of at most 1000"}},
	{"session-in-flight-not-below-connections", minimal + "session: {max_connections: 4, max_in_flight: 4}\n", []string{"session.max_in_flight: must be an integer of at most 3"}},
	{"session-connections-one", minimal + "session: {max_connections: 1}\n", []string{"session.max_connections: must be an integer of at least 2"}},
	{"session-request-over-protocol-limit", minimal + "session: {max_request_mb: 97}\n", []string{"session.max_request_mb: must be an integer of at most 96"}},
	{"session-response-over-limit", minimal + "session: {max_response_mb: 51}\n", []string{"session.max_response_mb: must be an integer of at most 50"}},
	{"session-turn-timeout-bare", minimal + "session: {turn_timeout: 600}\n", []string{`session.turn_timeout: must be a duration string with a unit such as "600s"`}},
	{"session-turn-timeout-too-long", minimal + "session: {turn_timeout: 2h}\n", []string{"session.turn_timeout: must be a duration from 1s to 3600s"}},
	{"session-start-timeout-short", minimal + "session: {start_timeout: 500ms}\n", []string{"session.start_timeout: must be a duration from 1s to 600s"}},
	{"session-memory-low", minimal + "session: {limits: {memory_mb: 63}}\n", []string{"session.limits.memory_mb: must be an integer of at least 64"}},
	{"session-pids-low", minimal + "session: {limits: {pids: 7}}\n", []string{"session.limits.pids: must be an integer of at least 8"}},
	{"session-limits-no-workspace", minimal + "session: {limits: {workspace_mb: 8}}\n", []string{"session.limits.workspace_mb: unknown key"}},
	{"session-party-dir-relative", minimal + "session: {party_dir: party}\n", []string{"session.party_dir: must be an absolute path"}},
	{"session-party-dir-root", minimal + "session: {party_dir: /}\n", []string{"session.party_dir: must not be the root directory"}},
	{"session-party-dir-colon", minimal + "session: {party_dir: '/srv/a:b'}\n", []string{"session.party_dir: must not contain ':' or ','"}},
	{"session-party-dir-comma", minimal + "session: {party_dir: '/srv/a,ro'}\n", []string{"session.party_dir: must not contain ':' or ','"}},
	{"session-party-dir-too-long", minimal + "profiles: {s: {mode: session}}\ndefault_profile: s\nsession: {party_dir: /" + strings.Repeat("p", MaxPartyDirLen) + "}\n", []string{
		"session.party_dir: must be at most 55 bytes"}},
	{"session-default-party-dir-too-long", strings.Replace(minimal, "/var/lib/rtsandbox", "/"+strings.Repeat("d", 50), 1) + "profiles: {s: {mode: session}}\nchannels_profile: {'http:a': s}\n", []string{
		`session.party_dir: must be at most 55 bytes so that <party_dir>/<channel>/run/broker.sock fits the 100-byte socket path limit ("/ddddd`}},
	{"session-party-dir-is-state-dir", minimal + "session: {party_dir: /var/lib/rtsandbox/}\n", []string{"session.party_dir: must not be state_dir itself"}},
	{"session-party-dir-in-run-root", minimal + "session: {party_dir: /var/lib/rtsandbox/run/party}\n", []string{"session.party_dir: must not lie in <state_dir>/run, which the host manages"}},
	{"session-party-dir-is-channel-state", minimal + "session: {party_dir: /var/lib/rtsandbox/channel-state}\n", []string{"session.party_dir: must not lie in <state_dir>/channel-state"}},
	{"session-party-dir-in-workspaces", minimal + "session: {party_dir: /var/lib/rtsandbox/workspaces/x}\n", []string{"session.party_dir: must not lie in <state_dir>/workspaces"}},
	{"session-prefix-upper", minimal + "session: {container_prefix: RT}\n", []string{"session.container_prefix: must match ^[a-z0-9][a-z0-9-]{0,40}$"}},
	{"session-prefix-dot", minimal + "session: {container_prefix: rt.x}\n", []string{"session.container_prefix: must match"}},
	{"session-log-driver-option-like", minimal + "session: {log_driver: -bad}\n", []string{"session.log_driver: must match ^[a-z0-9][a-z0-9_.-]{0,63}$"}},
	{"session-log-option-name", minimal + "session: {log_options: {Max: '1'}}\n", []string{"session.log_options.Max: must be a log option name"}},
	{"session-log-option-number", minimal + "session: {log_options: {max-file: 3}}\n", []string{`session.log_options.max-file: must be a string`}},
	{"session-log-option-newline", minimal + "session: {log_options: {tag: \"a\\nb\"}}\n", []string{"session.log_options.tag: must not contain line breaks"}},

	// budgets leave room for the longest turn of the modes in use
	{"budget-seconds-below-session-turn", withTools + "profiles: {s: {mode: session}}\ndefault_profile: s\nbudgets: {per_channel: {seconds: 599}}\n", []string{
		"budgets.per_channel.seconds: must be 0 (unlimited) or at least session.turn_timeout (600s)"}},
}

func TestParseProfileErrors(t *testing.T) { checkParseErrors(t, profileErrorTests) }

// A budget that fits the sealed turn, and a party dir too long for a
// socket, are fine while no channel gets a session profile: a session
// profile defined but named by no mapping is not in use.
func TestUnusedSessionProfileChecksNothingOfSessions(t *testing.T) {
	long := strings.Replace(minimal, "/var/lib/rtsandbox", "/"+strings.Repeat("d", 60), 1)
	for _, in := range []string{
		minimal + "budgets: {per_channel: {seconds: 120}}\n",
		minimal + "profiles: {s: {mode: session}}\nbudgets: {per_channel: {seconds: 120}}\n",
		long + "profiles: {s: {mode: session}}\n",
	} {
		c, err := Parse([]byte(in))
		if err != nil {
			t.Errorf("Parse(%q) error: %v", in, err)
			continue
		}
		if c.UsesSessions() {
			t.Errorf("Parse(%q).UsesSessions() = true; want false", in)
		}
	}
}

func TestProfileFor(t *testing.T) {
	c, err := Parse([]byte(withTools + "profiles: {studio: {mode: session, tools: [clock]}, quiet: {mode: sealed}}\n" +
		"channels_profile: {'discord:1': studio, 'http:x': default}\ndefault_profile: quiet\n"))
	if err != nil {
		t.Fatal(err)
	}
	hand := &Config{} // built by hand: every channel has the built-in default
	broken := &Config{ChannelProfiles: map[rtsandbox.ChannelKey]string{"http:a": "gone"}}
	tests := []struct {
		name    string
		c       *Config
		channel rtsandbox.ChannelKey
		want    string
		mode    string
	}{
		{"mapped-to-session", c, "discord:1", "studio", ModeSession},
		{"mapped-to-default", c, "http:x", DefaultProfile, ModeSealed},
		{"unmapped-gets-default-profile", c, "discord:2", "quiet", ModeSealed},
		{"hand-built-config", hand, "discord:1", DefaultProfile, ModeSealed},
		{"missing-profile-falls-back-to-sealed", broken, "http:a", DefaultProfile, ModeSealed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, p := tt.c.ProfileFor(tt.channel)
			if name != tt.want || p.Mode != tt.mode {
				t.Errorf("ProfileFor(%q) = %q, %q; want %q, %q", tt.channel, name, p.Mode, tt.want, tt.mode)
			}
		})
	}
	if !c.UsesSessions() || hand.UsesSessions() {
		t.Errorf("UsesSessions = %v (parsed), %v (hand-built); want true, false", c.UsesSessions(), hand.UsesSessions())
	}
	byDefault := &Config{Profiles: map[string]Profile{"s": {Mode: ModeSession}}, DefaultProfile: "s"}
	if !byDefault.UsesSessions() {
		t.Error("UsesSessions with a session default_profile = false; want true")
	}
}

func TestForProfile(t *testing.T) {
	c, err := Parse([]byte(withTools +
		"models: {main: {url: 'https://api.anthropic.com', name: claude, api_key_env: AK, api: anthropic}}\n" +
		"web: {fetch: {}, search: {provider: searxng, url: 'https://s.example/'}, research: {}}\n" +
		"profiles: {studio: {mode: session, model: main, mcp: [wiki], tools: [clock, web_fetch]}, plain: {mode: session}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Model           string
		Tools, MCP      []string
		Fetch, Research bool
	}
	see := func(pc *Config) view {
		v := view{Model: pc.Model.Name, Fetch: pc.Web.Fetch.Enabled, Research: pc.Web.Research.Enabled}
		for _, t := range pc.Tools {
			v.Tools = append(v.Tools, t.Name)
		}
		v.MCP = mcpNames(pc)
		return v
	}
	tests := []struct {
		name, profile string
		want          view
	}{
		{"session-gets-only-its-own", "studio", view{Model: "claude", Tools: []string{"clock"}, MCP: []string{"wiki"}, Fetch: true}},
		{"session-with-nothing-listed", "plain", view{Model: "m"}},
		{"sealed-gets-everything", DefaultProfile, view{Model: "m", Tools: []string{"lookup", "clock"}, MCP: []string{"docs", "wiki"}, Fetch: true, Research: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc, ok := c.ForProfile(tt.profile)
			if !ok {
				t.Fatalf("ForProfile(%q) not found", tt.profile)
			}
			if diff := cmp.Diff(tt.want, see(pc)); diff != "" {
				t.Errorf("ForProfile(%q) mismatch (-want +got):\n%s", tt.profile, diff)
			}
		})
	}
	if _, ok := c.ForProfile("nope"); ok {
		t.Error(`ForProfile("nope") found; want not found`)
	}
	if see(c).Model != "m" || len(c.Tools) != 2 {
		t.Error("ForProfile changed the config it was called on")
	}
}
