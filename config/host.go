package config

import (
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
)

// Defaults of the host sections.
const (
	DefaultHTTPListen  = "127.0.0.1:8787"
	DefaultRootCommand = "roundtable"
)

// HTTP is the HTTP chat surface. A nil *HTTP means the surface is off.
type HTTP struct {
	// Listen is host:port as written (default DefaultHTTPListen).
	Listen string
	// Loopback reports whether Listen's host is a loopback address or
	// "localhost"; serve warns when it is not.
	Loopback bool
	// TokenEnv names the variable holding the bearer token guests' bridges
	// use; required.
	TokenEnv EnvVar
	// OwnerTokenEnv names the variable holding the owner's bearer token;
	// empty means no owner commands over HTTP.
	OwnerTokenEnv EnvVar
	// Preview emits "delta" events with a streamed answer's text while
	// its turn runs (http.preview, default false).
	Preview bool
	// MaxRequestMB bounds a message body with attachments, in MiB
	// (http.max_request_mb, 1 to MaxHTTPRequestMB); 0 means the API's
	// default, the largest message with 50 MiB of attachments (about
	// 67.2 MiB).
	MaxRequestMB int
}

// MaxHTTPRequestMB is the largest http.max_request_mb: whole MiB within
// the API's default bound.
const MaxHTTPRequestMB = 67

// MaxDiscordUploadMB is the largest discord.max_upload_mb: a server with
// every boost takes 100 MiB, and a reply's files are 50 MiB at most.
const MaxDiscordUploadMB = 100

// Discord is the Discord surface. A nil *Discord means the surface is off.
type Discord struct {
	TokenEnv    EnvVar // required
	RootCommand string // ^[a-z][a-z0-9_-]{0,31}$, default DefaultRootCommand
	// Preview shows a streamed answer in one message edited while its
	// turn runs (discord.preview, default false).
	Preview bool
	// MaxUploadMB is the file bytes one message may carry, in MiB: the
	// servers' upload limit (discord.max_upload_mb, 1 to
	// MaxDiscordUploadMB); 0 means the surface's default, 10 MiB (a
	// server without boosts).
	MaxUploadMB int
}

var rootCommandRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// accessRules parses "access". Absent means nobody is served.
func (p *parser) accessRules(n *yaml.Node) access.Rules {
	var r access.Rules
	if n == nil {
		return r
	}
	o, ok := p.object(n, "access", "owners", "members")
	if !ok {
		return r
	}
	r.Owners = p.identities(o, "owners", true)
	m := o.get("members")
	if m != nil && isString(m) {
		if m.Value != "everyone" {
			p.fail(m, o.at("members"), `must be "everyone" or a list of identities and roles`)
		}
		r.Everyone = m.Value == "everyone"
		return r
	}
	r.Members = p.identities(o, "members", false)
	return r
}

// identities parses a list of identities ("discord:123", "http:alice") and,
// unless ownersOnly, roles ("discord:role:42"). Duplicates are refused.
func (p *parser) identities(o object, key string, ownersOnly bool) []access.Identity {
	var out []access.Identity
	seen := map[access.Identity]int{}
	for i, n := range p.list(o, key) {
		path := index(o.at(key), i)
		if !isString(n) {
			p.fail(n, path, "must be a string")
			continue
		}
		id, err := access.ParseIdentity(n.Value)
		switch {
		case err != nil:
			p.fail(n, path, "must be an identity <provider>:<subject> such as discord:123 or http:alice (provider ^[a-z][a-z0-9_-]{0,31}$, no whitespace, at most 256 characters)")
			continue
		case ownersOnly && id.IsRole():
			p.fail(n, path, "must be a person, not a role: the owner tier never comes from a role")
			continue
		}
		if j, dup := seen[id]; dup {
			p.fail(n, path, "duplicate identity %q (also %s)", n.Value, index(o.at(key), j))
			continue
		}
		seen[id] = i
		out = append(out, id)
	}
	return out
}

// channelKeys parses "initial_channels".
func (p *parser) channelKeys(o object, key string) []rtsandbox.ChannelKey {
	var out []rtsandbox.ChannelKey
	seen := map[rtsandbox.ChannelKey]int{}
	for i, n := range p.list(o, key) {
		path := index(key, i)
		if !isString(n) {
			p.fail(n, path, "must be a string")
			continue
		}
		k := rtsandbox.ChannelKey(n.Value)
		if !k.Valid() {
			p.fail(n, path, "must be "+rtsandbox.ChannelKeyRule+", such as discord:112233445566778899")
			continue
		}
		if j, dup := seen[k]; dup {
			p.fail(n, path, "duplicate channel %q (also %s)", n.Value, index(key, j))
			continue
		}
		seen[k] = i
		out = append(out, k)
	}
	return out
}

// httpSurface parses "http". Absent means the surface is off.
func (p *parser) httpSurface(n *yaml.Node) *HTTP {
	if n == nil {
		return nil
	}
	o, ok := p.object(n, "http", "listen", "token_env", "owner_token_env", "preview", "max_request_mb")
	if !ok {
		return nil
	}
	h := &HTTP{Listen: DefaultHTTPListen, Loopback: true}
	if v, ok := p.text(o, "listen", false, listenRule); ok {
		h.Listen, h.Loopback = v, loopback(v)
	}
	h.TokenEnv = p.envVar(o, "token_env", true)
	h.OwnerTokenEnv = p.envVar(o, "owner_token_env", false)
	h.Preview = p.boolean(o, "preview")
	h.MaxRequestMB = p.integer(o, "max_request_mb", 0, 1, MaxHTTPRequestMB)
	if h.TokenEnv != "" && h.TokenEnv == h.OwnerTokenEnv {
		p.fail(o.get("owner_token_env"), o.at("owner_token_env"), "must differ from token_env: a guest token must not run owner commands")
	}
	return h
}

// discordSurface parses "discord". Absent means the surface is off.
func (p *parser) discordSurface(n *yaml.Node) *Discord {
	if n == nil {
		return nil
	}
	o, ok := p.object(n, "discord", "token_env", "root_command", "preview", "max_upload_mb")
	if !ok {
		return nil
	}
	d := &Discord{RootCommand: DefaultRootCommand}
	d.TokenEnv = p.envVar(o, "token_env", true)
	if v, ok := p.text(o, "root_command", false, rootCommandRule); ok {
		d.RootCommand = v
	}
	d.Preview = p.boolean(o, "preview")
	d.MaxUploadMB = p.integer(o, "max_upload_mb", 0, 1, MaxDiscordUploadMB)
	return d
}

func rootCommandRule(s string) string {
	if !rootCommandRE.MatchString(s) {
		return "must match ^[a-z][a-z0-9_-]{0,31}$"
	}
	return ""
}

// listenRule wants host:port with a numeric port from 1 to 65535 (0 would
// pick a random port nobody can find) and an IP or DNS-style host. An empty
// host (":8787") means every interface.
func listenRule(s string) string {
	const want = "must be host:port with a port from 1 to 65535, such as 127.0.0.1:8787"
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return want
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strings.Trim(port, "0123456789") != "" {
		return want
	}
	if host == "" {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if !hostnameRE.MatchString(host) {
		return want
	}
	return ""
}

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

// loopback reports whether a valid listen address stays on this machine.
func loopback(listen string) bool {
	host, _, _ := net.SplitHostPort(listen)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
