package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
)

func TestParseHostSections(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		access   access.Rules
		initial  []rtsandbox.ChannelKey
		http     *HTTP
		discord  *Discord
		loopback bool
	}{
		{
			name: "absent-sections-disable-surfaces",
			in:   minimal,
		},
		{
			name: "every-key",
			in: minimal + `access:
  owners: ["discord:123456789012345678", "http:boss"]
  members: ["discord:1", "discord:role:42", "http:alice"]
initial_channels: ["discord:112233445566778899", "http:lobby"]
http:
  listen: 127.0.0.1:8787
  token_env: RTSANDBOX_HTTP_TOKEN
  owner_token_env: RTSANDBOX_HTTP_OWNER_TOKEN
discord:
  token_env: DISCORD_BOT_TOKEN
  root_command: roundtable
`,
			access: access.Rules{
				Owners:  []access.Identity{"discord:123456789012345678", "http:boss"},
				Members: []access.Identity{"discord:1", "discord:role:42", "http:alice"},
			},
			initial: []rtsandbox.ChannelKey{"discord:112233445566778899", "http:lobby"},
			http:    &HTTP{Listen: "127.0.0.1:8787", Loopback: true, TokenEnv: "RTSANDBOX_HTTP_TOKEN", OwnerTokenEnv: "RTSANDBOX_HTTP_OWNER_TOKEN"},
			discord: &Discord{TokenEnv: "DISCORD_BOT_TOKEN", RootCommand: "roundtable"},
		},
		{
			name:    "members-everyone-and-defaults",
			in:      minimal + "access: {owners: ['discord:1'], members: everyone}\nhttp: {token_env: T}\ndiscord: {token_env: D}\n",
			access:  access.Rules{Owners: []access.Identity{"discord:1"}, Everyone: true},
			http:    &HTTP{Listen: DefaultHTTPListen, Loopback: true, TokenEnv: "T"},
			discord: &Discord{TokenEnv: "D", RootCommand: DefaultRootCommand},
		},
		{
			name: "non-loopback-listen-recorded",
			in:   minimal + "http: {listen: '0.0.0.0:9000', token_env: T}\n",
			http: &HTTP{Listen: "0.0.0.0:9000", TokenEnv: "T"},
		},
		{
			name: "all-interfaces-listen",
			in:   minimal + "http: {listen: ':9000', token_env: T}\n",
			http: &HTTP{Listen: ":9000", TokenEnv: "T"},
		},
		{
			name: "ipv6-loopback-and-localhost",
			in:   minimal + "http: {listen: '[::1]:1', token_env: T}\ndiscord: {token_env: D, root_command: rt-sandbox_2}\n",
			http: &HTTP{Listen: "[::1]:1", Loopback: true, TokenEnv: "T"}, discord: &Discord{TokenEnv: "D", RootCommand: "rt-sandbox_2"},
		},
		{
			name: "localhost-is-loopback",
			in:   minimal + "http: {listen: 'localhost:65535', token_env: T}\n",
			http: &HTTP{Listen: "localhost:65535", Loopback: true, TokenEnv: "T"},
		},
		{
			name: "hostname-is-not-loopback",
			in:   minimal + "http: {listen: 'chat.internal:8080', token_env: T}\n",
			http: &HTTP{Listen: "chat.internal:8080", TokenEnv: "T"},
		},
		{
			name: "empty-values-mean-unset",
			in:   minimal + "access:\ninitial_channels: ~\nhttp:\ndiscord:\n",
		},
		{
			name:    "previews-on",
			in:      minimal + "http: {token_env: T, preview: true}\ndiscord: {token_env: D, preview: true}\n",
			http:    &HTTP{Listen: DefaultHTTPListen, Loopback: true, TokenEnv: "T", Preview: true},
			discord: &Discord{TokenEnv: "D", RootCommand: DefaultRootCommand, Preview: true},
		},
		{
			name:    "upload-bounds",
			in:      minimal + "http: {token_env: T, max_request_mb: 20}\ndiscord: {token_env: D, max_upload_mb: 50}\n",
			http:    &HTTP{Listen: DefaultHTTPListen, Loopback: true, TokenEnv: "T", MaxRequestMB: 20},
			discord: &Discord{TokenEnv: "D", RootCommand: DefaultRootCommand, MaxUploadMB: 50},
		},
		{
			name:    "previews-off-explicitly",
			in:      minimal + "http: {token_env: T, preview: false}\ndiscord: {token_env: D, preview: false}\n",
			http:    &HTTP{Listen: DefaultHTTPListen, Loopback: true, TokenEnv: "T"},
			discord: &Discord{TokenEnv: "D", RootCommand: DefaultRootCommand},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.access, c.Access); diff != "" {
				t.Errorf("Access (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.initial, c.InitialChannels); diff != "" {
				t.Errorf("InitialChannels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.http, c.HTTP); diff != "" {
				t.Errorf("HTTP (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.discord, c.Discord); diff != "" {
				t.Errorf("Discord (-want +got):\n%s", diff)
			}
			if _, err := access.New(c.Access); err != nil {
				t.Errorf("access.New(parsed rules) = %v", err)
			}
		})
	}
}

var hostErrorTests = []struct {
	name string
	in   string
	want []string
}{
	{"access-not-mapping", "access: everyone\n", []string{"access: must be a mapping"}},
	{"access-unknown-key", "access: {admins: []}\n", []string{"access.admins: unknown key"}},
	{"owner-malformed", "access: {owners: [alice]}\n", []string{"access.owners[0]: must be an identity"}},
	{"owner-role", "access: {owners: ['discord:role:1']}\n", []string{"access.owners[0]: must be a person, not a role"}},
	{"owner-number", "access: {owners: [123]}\n", []string{"access.owners[0]: must be a string"}},
	{"owners-not-list", "access: {owners: 'discord:1'}\n", []string{"access.owners: must be a list"}},
	{"owner-duplicate", "access: {owners: ['discord:1', 'discord:1']}\n", []string{`access.owners[1]: duplicate identity "discord:1" (also access.owners[0])`}},
	{"members-other-word", "access: {members: all}\n", []string{`access.members: must be "everyone" or a list`}},
	{"members-everyone-in-list", "access: {members: [everyone]}\n", []string{"access.members[0]: must be an identity"}},
	{"member-space", "access: {members: ['http:al ice']}\n", []string{"access.members[0]: must be an identity"}},
	{"member-upper-provider", "access: {members: ['Discord:1']}\n", []string{"access.members[0]: must be an identity"}},
	{"members-bool", "access: {members: true}\n", []string{"access.members: must be a list"}},
	{"initial-not-list", "initial_channels: 'discord:1'\n", []string{"initial_channels: must be a list"}},
	{"initial-bad-key", "initial_channels: ['Discord:1', 'nocolon']\n", []string{"initial_channels[0]: must be a channel key", "initial_channels[1]: must be a channel key"}},
	{"initial-key-over-256-bytes", "initial_channels: ['http:" + strings.Repeat("c", rtsandbox.MaxChannelKey-4) + "']\n", []string{"initial_channels[0]: must be a channel key matching ^[a-z][a-z0-9_-]*:.+$ of at most 256 bytes"}},
	{"initial-duplicate", "initial_channels: ['discord:1', 'discord:1']\n", []string{`initial_channels[1]: duplicate channel "discord:1" (also initial_channels[0])`}},
	{"initial-number", "initial_channels: [1]\n", []string{"initial_channels[0]: must be a string"}},
	{"http-unknown-key", "http: {token_env: T, port: 1}\n", []string{"http.port: unknown key"}},
	{"http-token-env-missing", "http: {listen: '127.0.0.1:1'}\n", []string{"http.token_env: is required"}},
	{"http-token-env-value", "http: {token_env: 'secret-value'}\n", []string{"http.token_env: must be an environment variable name"}},
	{"http-owner-token-env-bad", "http: {token_env: T, owner_token_env: '1X'}\n", []string{"http.owner_token_env: must be an environment variable name"}},
	{"http-same-token-envs", "http: {token_env: T, owner_token_env: T}\n", []string{"http.owner_token_env: must differ from token_env"}},
	{"http-listen-no-port", "http: {listen: '127.0.0.1', token_env: T}\n", []string{"http.listen: must be host:port"}},
	{"http-listen-port-zero", "http: {listen: '127.0.0.1:0', token_env: T}\n", []string{"http.listen: must be host:port"}},
	{"http-listen-port-too-big", "http: {listen: '127.0.0.1:65536', token_env: T}\n", []string{"http.listen: must be host:port"}},
	{"http-listen-port-name", "http: {listen: 'localhost:http', token_env: T}\n", []string{"http.listen: must be host:port"}},
	{"http-listen-url", "http: {listen: 'http://127.0.0.1:80', token_env: T}\n", []string{"http.listen: must be host:port"}},
	{"http-listen-bad-host", "http: {listen: 'a b:80', token_env: T}\n", []string{"http.listen: must be host:port"}},
	{"http-listen-number", "http: {listen: 8787, token_env: T}\n", []string{"http.listen: must be a string"}},
	{"http-not-mapping", "http: true\n", []string{"http: must be a mapping"}},
	{"http-preview-string", "http: {token_env: T, preview: 'yes'}\n", []string{"http.preview: must be true or false"}},
	{"http-preview-number", "http: {token_env: T, preview: 1}\n", []string{"http.preview: must be true or false"}},
	{"discord-preview-string", "discord: {token_env: D, preview: 'true'}\n", []string{"discord.preview: must be true or false"}},
	{"discord-preview-list", "discord: {token_env: D, preview: [true]}\n", []string{"discord.preview: must be true or false"}},
	{"http-max-request-too-large", "http: {token_env: T, max_request_mb: 68}\n", []string{"http.max_request_mb: must be an integer of at most 67"}},
	{"http-max-request-zero", "http: {token_env: T, max_request_mb: 0}\n", []string{"http.max_request_mb: must be an integer of at least 1"}},
	{"discord-max-upload-too-large", "discord: {token_env: D, max_upload_mb: 101}\n", []string{"discord.max_upload_mb: must be an integer of at most 100"}},
	{"discord-max-upload-string", "discord: {token_env: D, max_upload_mb: '10'}\n", []string{"discord.max_upload_mb: must be an integer"}},
	{"discord-token-env-missing", "discord: {root_command: rt}\n", []string{"discord.token_env: is required"}},
	{"discord-unknown-key", "discord: {token_env: D, guild: 1}\n", []string{"discord.guild: unknown key"}},
	{"root-command-upper", "discord: {token_env: D, root_command: Roundtable}\n", []string{"discord.root_command: must match ^[a-z][a-z0-9_-]{0,31}$"}},
	{"root-command-too-long", "discord: {token_env: D, root_command: " + strings.Repeat("a", 33) + "}\n", []string{"discord.root_command: must match"}},
	{"root-command-empty", "discord: {token_env: D, root_command: ''}\n", []string{"discord.root_command: must match"}},
	{"root-command-space", "discord: {token_env: D, root_command: 'a b'}\n", []string{"discord.root_command: must match"}},
}

func TestParseHostErrors(t *testing.T) {
	for _, tt := range hostErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			in := minimal + tt.in
			got, err := Parse([]byte(in))
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, nil; want errors %q", in, got, tt.want)
			}
			if !errors.Is(err, rtsandbox.ErrInvalid) {
				t.Errorf("Parse error %v does not match rtsandbox.ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error:\n%v\nwant it to contain %q", in, err, w)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tt.want) {
				t.Errorf("Parse(%q) reported %d problems:\n%v\nwant %d", in, n, err, len(tt.want))
			}
		})
	}
}
