package config

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/compactor"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Defaults and ranges of the session block (docs/limits.md, "Session mode"). The per-turn budgets may be lowered, never raised beyond
// the protocol's limits in the root package; the container limits have
// the sandbox block's lower bounds.
const (
	DefaultSessionTurnTimeout  = rtsandbox.SessionTurnTimeout // 600 s
	MaxSessionTurnTimeout      = time.Hour
	DefaultSessionStartTimeout = rtsandbox.SessionStartTimeout // 90 s
	MaxSessionStartTimeout     = 10 * time.Minute

	DefaultSessionMaxCalls = rtsandbox.SessionMaxCalls // 128
	MaxSessionMaxCalls     = rtsandbox.MaxCallsLimit   // 1000, the reference's range (docs/protocol.md, "Privacy")
	DefaultSessionInFlight = rtsandbox.SessionMaxInFlight
	DefaultSessionConns    = rtsandbox.SessionMaxConns
	MinSessionConns        = 2 // the long poll plus one call
	MaxSessionConns        = 64

	DefaultSessionRequestMB  = rtsandbox.MaxSessionRequest >> 20 // 96
	DefaultSessionResponseMB = 50                                // upstream bytes of one answer (docs/protocol.md, "SSE")

	DefaultSessionMemoryMB = 1536 // 1.5 GiB, no extra swap
	DefaultSessionPIDs     = 256

	// DefaultPartyDirName is the party directory's name in the state
	// directory when session.party_dir is unset.
	DefaultPartyDirName    = "party"
	DefaultContainerPrefix = "rtsandbox-session"
	// DefaultLogDriver is Docker's "local" driver, which every daemon
	// since 18.09 has and `docker logs` reads (the runtime saves a
	// removed worker's last lines from it). The reference's journald
	// default fails on daemons not run under systemd; set log_driver:
	// journald to get it.
	DefaultLogDriver = "local"

	// MaxPartyDirLen keeps <party_dir>/<segment>/run/broker.sock within
	// the 100-byte socket path limit (docs/session.md, "Session runtime") for every channel: a segment
	// takes at most 28 bytes (session.Segment; a Discord channel's,
	// "discord_" and up to 20 digits, exactly that):
	// 100 − 28 − len("/" + "/run/broker.sock").
	MaxPartyDirLen = 100 - 28 - 17
)

// Session tunes session mode: the broker's per-turn budgets, the turn and
// start deadlines, the long-lived containers' limits and where their
// directories live. Parse fills in every default, also when no profile
// uses session mode.
type Session struct {
	MaxCalls    int // model, tool and MCP calls per turn (refused ones count)
	MaxInFlight int // calls at once; below MaxConnections (one is the long poll)
	// MaxRequestBytes bounds a worker request body, MaxResponseBytes the
	// upstream bytes streamed back for one call.
	MaxRequestBytes  int64
	MaxResponseBytes int64
	MaxConnections   int           // broker connections at once
	TurnTimeout      time.Duration // from admission to result
	StartTimeout     time.Duration // for a started worker to post /worker/ready
	Limits           SessionLimits
	// PartyDir holds one private directory per channel (run/ and
	// workspace/); absolute and clean, default <state_dir>/party.
	PartyDir string
	// ContainerPrefix starts every session container's name
	// (<prefix>-<channel segment>-<installation+channel hash>; see
	// container.PrefixedSessionName).
	ContainerPrefix string
	// LogDriver and LogOptions are the containers' Docker log
	// configuration: default local with 3 files of 10 MiB at most
	// (defaultLogOptions); a file that names log_driver and no
	// log_options gets no options.
	LogDriver  string
	LogOptions map[string]string
	// Compactor is session.compactor, the host compactor (session spec
	// docs/protocol.md, "Compaction"); nil means none: the workers summarise on their own.
	Compactor *Compactor
	// Disk bounds each channel's workspace (session.disk).
	Disk SessionDisk
}

// Compactor is session.compactor: the built-in summary engine
// (package compactor) on one of the configured models.
type Compactor struct {
	// Engine is CompactorSummary, the only built-in engine.
	Engine string
	// Model names the model the summaries are written by: DefaultModel
	// (the model block) or an entry of models (Config.CompactorModel).
	Model string
	// Timeout bounds one compaction: 1 s..600 s and at most half of
	// session.turn_timeout; default max(1 s, min(120 s, turn/3)).
	Timeout time.Duration
	// MaxRequestBytes bounds a worker's compact request (max_request_mb,
	// 1..96, default 32).
	MaxRequestBytes int64
	// MaxSummaryTokens is the summary's max_tokens (256..32768, default
	// 4096); MaxInputBytes bounds the transcript sent to the model
	// (max_input_kb, 16..8192, default 512).
	MaxSummaryTokens int
	MaxInputBytes    int
}

// CompactorSummary is the built-in summary engine's name in
// session.compactor.engine.
const CompactorSummary = compactor.Engine

// SessionLimits are a session container's resource limits.
type SessionLimits struct {
	MemoryMB int // memory and memory+swap
	CPUs     float64
	PIDs     int
}

var (
	containerPrefixRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,40}$`)
	logNameRE         = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
)

// defaultLogOptions bound the default driver's files per container.
func defaultLogOptions() map[string]string {
	return map[string]string{"max-size": "10m", "max-file": "3"}
}

// defaultSession is the session block of a file without one.
func defaultSession(stateDir string) Session {
	s := Session{
		MaxCalls:         DefaultSessionMaxCalls,
		MaxInFlight:      DefaultSessionInFlight,
		MaxRequestBytes:  DefaultSessionRequestMB << 20,
		MaxResponseBytes: DefaultSessionResponseMB << 20,
		MaxConnections:   DefaultSessionConns,
		TurnTimeout:      DefaultSessionTurnTimeout,
		StartTimeout:     DefaultSessionStartTimeout,
		Limits:           SessionLimits{MemoryMB: DefaultSessionMemoryMB, CPUs: DefaultCPUs, PIDs: DefaultSessionPIDs},
		ContainerPrefix:  DefaultContainerPrefix,
		LogDriver:        DefaultLogDriver,
		LogOptions:       defaultLogOptions(),
		Disk:             defaultSessionDisk(),
	}
	if stateDir != "" {
		s.PartyDir = filepath.Join(stateDir, DefaultPartyDirName)
	}
	return s
}

// session parses "session". The party directory's length is checked only
// when a profile uses session mode (used), since only then does a socket
// live under it.
func (p *parser) session(n *yaml.Node, c *Config) Session {
	stateDir, used := c.StateDir, c.UsesSessions()
	s := defaultSession(stateDir)
	var o object
	if n != nil {
		var ok bool
		if o, ok = p.object(n, "session", "max_calls", "max_in_flight", "max_request_mb", "max_response_mb",
			"max_connections", "turn_timeout", "start_timeout", "limits", "party_dir", "container_prefix",
			"log_driver", "log_options", "compactor", "disk"); !ok {
			return s
		}
		p.sessionFields(o, &s, c.Host.MemoryLimitMB)
		if n := o.get("compactor"); n != nil {
			s.Compactor = p.compactor(n, o.at("compactor"), s.TurnTimeout, c)
		}
	} else {
		s.MaxRequestBytes = min(s.MaxRequestBytes, int64(decodeMaxMB(c.Host.MemoryLimitMB))<<20)
	}
	if msg := partyDirPlace(s.PartyDir, stateDir); msg != "" && n != nil {
		p.fail(o.get("party_dir"), "session.party_dir", "%s", msg)
	}
	if used && len(s.PartyDir) > MaxPartyDirLen {
		var at *yaml.Node
		if n != nil {
			at = o.get("party_dir")
		}
		p.fail(at, "session.party_dir", "must be at most %d bytes so that <party_dir>/<channel>/run/broker.sock fits the 100-byte socket path limit (%q is %d; set a shorter session.party_dir)",
			MaxPartyDirLen, s.PartyDir, len(s.PartyDir))
	}
	return s
}

func (p *parser) sessionFields(o object, s *Session, memoryLimitMB int) {
	s.MaxCalls = p.integer(o, "max_calls", DefaultSessionMaxCalls, 1, MaxSessionMaxCalls)
	s.MaxConnections = p.integer(o, "max_connections", DefaultSessionConns, MinSessionConns, MaxSessionConns)
	s.MaxInFlight = p.integer(o, "max_in_flight", min(DefaultSessionInFlight, s.MaxConnections-1), 1, s.MaxConnections-1)
	s.MaxRequestBytes = int64(p.bodyMB(o, "max_request_mb", DefaultSessionRequestMB, DefaultSessionRequestMB, memoryLimitMB)) << 20
	s.MaxResponseBytes = int64(p.integer(o, "max_response_mb", DefaultSessionResponseMB, 1, DefaultSessionResponseMB)) << 20
	s.TurnTimeout = p.duration(o, "turn_timeout", DefaultSessionTurnTimeout, MinTurnTimeout, MaxSessionTurnTimeout)
	s.StartTimeout = p.duration(o, "start_timeout", DefaultSessionStartTimeout, time.Second, MaxSessionStartTimeout)
	if l := o.get("limits"); l != nil {
		s.Limits = p.sessionLimits(l, o.at("limits"))
	}
	if v, ok := p.text(o, "party_dir", false, partyDirRule); ok {
		s.PartyDir = filepath.Clean(v)
	}
	if v, ok := p.text(o, "container_prefix", false, patternRule(containerPrefixRE)); ok {
		s.ContainerPrefix = v
	}
	if v, ok := p.text(o, "log_driver", false, patternRule(logNameRE)); ok {
		s.LogDriver, s.LogOptions = v, nil // the default's options may not suit another driver
	}
	if n := o.get("log_options"); n != nil {
		s.LogOptions = p.logOptions(n, o.at("log_options"))
	}
	if n := o.get("disk"); n != nil {
		s.Disk = p.sessionDisk(n, o.at("disk"))
	}
}

// decodeMaxMB is the largest body, in MiB, that a host of memoryLimitMB
// decodes (rtsandbox.MaxDecodedBody): the memory limit's half that all
// the bodies being decoded share, over rtsandbox.DecodeFactor, since a
// body being decoded holds up to that many times its size.
func decodeMaxMB(memoryLimitMB int) int {
	return int(rtsandbox.MaxDecodedBody(int64(memoryLimitMB)<<20) >> 20)
}

// bodyMB reads a worker body limit in MiB: 1..protocolMax, and at most
// what host.memory_limit_mb can decode (decodeMaxMB); its default is def,
// or that bound when lower, so that a small host gets a smaller default
// instead of an error.
func (p *parser) bodyMB(o object, key string, def, protocolMax, memoryLimitMB int) int {
	most := max(1, decodeMaxMB(memoryLimitMB))
	v := p.integer(o, key, min(def, most), 1, protocolMax)
	if v > most {
		p.fail(o.get(key), o.at(key), "must be at most %d with host.memory_limit_mb %d: a body being decoded holds up to %d times its size, and all of them together at most half of the memory limit",
			most, memoryLimitMB, rtsandbox.DecodeFactor)
		return most
	}
	return v
}

// compactor parses session.compactor against the models parsed before
// and the session's turn timeout: its timeout must leave half the turn
// (docs/protocol.md, "Compaction": the compactor's timeout must leave half
// the turn).
func (p *parser) compactor(n *yaml.Node, path string, turn time.Duration, c *Config) *Compactor {
	o, ok := p.object(n, path, "engine", "model", "timeout", "max_request_mb", "max_summary_tokens", "max_input_kb")
	if !ok {
		return nil
	}
	k := &Compactor{Model: DefaultModel}
	k.Engine, _ = p.text(o, "engine", true, func(s string) string {
		if s != CompactorSummary {
			return fmt.Sprintf("must be %q (the built-in summary engine)", CompactorSummary)
		}
		return ""
	})
	if m, ok := p.text(o, "model", false, func(s string) string { return modelRefRule(s, c) }); ok {
		k.Model = m
	}
	def := wire.DefaultCompactorTimeoutFor(turn)
	k.Timeout = p.duration(o, "timeout", def, wire.MinCompactorTimeout, wire.MaxCompactorTimeout)
	if !wire.CompactorTimeoutFits(k.Timeout, turn) {
		var at *yaml.Node
		if at = o.get("timeout"); at == nil {
			at = n
		}
		p.fail(at, o.at("timeout"), "must leave half the turn: at most %s, half of session.turn_timeout %s (the compactor's timeout is %s)",
			secs(turn/2), secs(turn), secs(k.Timeout))
	}
	k.MaxRequestBytes = int64(p.bodyMB(o, "max_request_mb", wire.DefaultCompactorRequest>>20, wire.MaxCompactorRequest>>20, c.Host.MemoryLimitMB)) << 20
	k.MaxSummaryTokens = p.integer(o, "max_summary_tokens", compactor.DefaultMaxSummaryTokens, compactor.MinMaxSummaryTokens, compactor.MaxMaxSummaryTokens)
	k.MaxInputBytes = p.integer(o, "max_input_kb", compactor.DefaultMaxInputBytes>>10, compactor.MinMaxInputBytes>>10, compactor.MaxMaxInputBytes>>10) << 10
	return k
}

// CompactorModel returns the model session.compactor names; ok is false
// without a compactor or for a name that is not a model (Parse refuses
// it, so only a hand-built Config gets there).
func (c *Config) CompactorModel() (Model, bool) {
	if c.Session.Compactor == nil {
		return Model{}, false
	}
	return c.ModelOf(Profile{Model: c.Session.Compactor.Model})
}

func (p *parser) sessionLimits(n *yaml.Node, path string) SessionLimits {
	l := SessionLimits{MemoryMB: DefaultSessionMemoryMB, CPUs: DefaultCPUs, PIDs: DefaultSessionPIDs}
	o, ok := p.object(n, path, "memory_mb", "cpus", "pids")
	if !ok {
		return l
	}
	l.MemoryMB = p.integer(o, "memory_mb", DefaultSessionMemoryMB, MinMemoryMB, maxMemoryMB)
	l.PIDs = p.integer(o, "pids", DefaultSessionPIDs, MinPIDs, math.MaxInt)
	l.CPUs = p.cpus(o, "cpus")
	return l
}

// logOptions parses the log driver's options: names by the driver-name
// rule, values strings without line breaks (docs/session.md, "The container").
func (p *parser) logOptions(n *yaml.Node, path string) map[string]string {
	if n == nil {
		return nil
	}
	out := map[string]string{}
	for _, e := range p.entries(n, path) {
		switch {
		case !logNameRE.MatchString(e.key.Value):
			p.fail(e.key, e.path, "must be a log option name matching %s", logNameRE)
		case !isString(e.val):
			p.fail(e.val, e.path, "must be a string (quote numbers such as \"10m\" or \"3\")")
		case strings.ContainsAny(e.val.Value, "\r\n"):
			p.fail(e.val, e.path, "must not contain line breaks")
		default:
			out[e.key.Value] = e.val.Value
		}
	}
	return out
}

// partyDirRule is the state directory's rule plus the bind-mount rule of
// docs/session.md, "The container": the run and workspace paths under it are handed to
// Docker as "<path>:/run/sandbox:ro", so they may not hold ':' or ','.
func partyDirRule(s string) string {
	if msg := stateDirRule(s); msg != "" {
		return msg
	}
	if strings.ContainsAny(s, ":,") {
		return "must not contain ':' or ',' (it becomes part of a Docker bind mount)"
	}
	return ""
}

// stateOwned are the state directory's entries the host manages itself
// (host: the sealed run root, the channel state, the legacy workspaces).
// The sealed runtime removes every directory of its run root it does not
// know at start, so a party directory there would lose its workspaces.
var stateOwned = []string{"run", "channel-state", "workspaces"}

// partyDirPlace refuses a party directory that is the state directory or
// lies in one of the entries the host manages there; "" when it is fine.
func partyDirPlace(party, state string) string {
	if state == "" || party == "" {
		return ""
	}
	if party == state {
		return "must not be state_dir itself; give it a directory of its own such as <state_dir>/party"
	}
	rel, err := filepath.Rel(state, party)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "" // outside the state directory
	}
	first, _, _ := strings.Cut(rel, "/")
	if slices.Contains(stateOwned, first) {
		return fmt.Sprintf("must not lie in <state_dir>/%s, which the host manages (the sealed runtime removes what it does not know there)", first)
	}
	return ""
}

// patternRule wants s to match re.
func patternRule(re *regexp.Regexp) rule {
	return func(s string) string {
		if !re.MatchString(s) {
			return fmt.Sprintf("must match %s", re)
		}
		return ""
	}
}
