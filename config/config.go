// Package config turns the operator's YAML config file into validated
// options for the broker, the sandbox runtime and the commands.
//
// The contract:
//
//   - Parse accepts exactly one YAML document whose top level is a mapping.
//     Unknown keys, duplicate keys, YAML aliases and values of the wrong YAML
//     type are errors at every level, so a typo never silently drops a
//     safety setting.
//   - Every problem is reported, not only the first. Each one names the key
//     path and the rule it broke, such as
//     "tools[0].timeout: unknown key (line 12)". The returned error joins
//     them and matches rtsandbox.ErrInvalid with errors.Is.
//   - A Config that Parse returns is valid: names, URLs, ranges and the time
//     zone are checked and the sandbox defaults are filled in. What depends
//     on the running host (directory ownership and permissions, the process
//     uid, Docker) is checked by the component that uses it.
//   - Secrets never enter a Config. The file names environment variables
//     (EnvVar); their values are read with EnvVar.Lookup at the moment of
//     use, so a rotated key takes effect on the next call.
package config

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	// Embedded zone data makes sandbox.time_zone checkable, and usable later,
	// on minimal hosts without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// Defaults and ranges of the sandbox options, as in the reference
// (docs/limits.md, "Sealed turns").
const (
	DefaultImage       = "rtsandbox-worker:local"
	DefaultTurnTimeout = 120 * time.Second
	MinTurnTimeout     = 1 * time.Second
	MaxTurnTimeout     = 600 * time.Second

	DefaultMemoryMB = 512
	MinMemoryMB     = 64
	DefaultCPUs     = 1.0
	DefaultPIDs     = 64
	MinPIDs         = 8
	// Admission and cleanup (sandbox.max_turns, max_queue_wait,
	// reap_interval).
	MaxMaxTurns         = 10000
	DefaultMaxQueueWait = 2 * time.Minute
	MinMaxQueueWait     = time.Second
	MaxMaxQueueWait     = time.Hour
	DefaultReapInterval = 30 * time.Second
	MinReapInterval     = time.Second
	MaxReapInterval     = time.Hour
	// MaxPoolSize bounds sandbox.pool.size: each idle worker is a
	// running container.
	MaxPoolSize = 64

	// DefaultWorkspaceMB sizes the sealed container's tmpfs /workspace; it
	// may not exceed memory_mb, since tmpfs pages count against it.
	DefaultWorkspaceMB = 64
	MinWorkspaceMB     = 1

	// DefaultHostMemoryLimitMB is the host process's soft memory limit
	// (runtime/debug.SetMemoryLimit) when host.memory_limit_mb is unset.
	DefaultHostMemoryLimitMB = 1024
	MinHostMemoryLimitMB     = 64

	// BuiltinClock is the only built-in host tool so far.
	BuiltinClock = "clock"

	// MaxFileSize bounds the config file Load reads.
	MaxFileSize = 1 << 20
)

// maxMemoryMB keeps memory_mb*2^20 (the byte count handed to Docker)
// within int64, and memory_mb itself within int.
const maxMemoryMB = min(math.MaxInt64>>20, math.MaxInt)

// Config is a validated operator configuration.
type Config struct {
	StateDir  string // absolute and clean; permissions are checked by its user
	AllowHTTP bool   // cleartext http:// upstreams, for loopback tests only
	Model     Model
	Tools     []Tool
	MCP       []MCPServer
	Sandbox   Sandbox
	// Engine runs the workers: EngineDocker (the default, the host's
	// Docker Engine) or EngineKubernetes, with Kubernetes set.
	Engine     string
	Kubernetes *Kubernetes

	// Access says who may talk and who owns the host; the zero value
	// serves nobody.
	Access access.Rules
	// InitialChannels seed the channel store on its very first start.
	InitialChannels []rtsandbox.ChannelKey
	// HTTP and Discord are the chat surfaces; nil means off.
	HTTP    *HTTP
	Discord *Discord
	// Web is the controlled web access (web_fetch, search, research); the
	// zero value turns it off.
	Web Web
	// Host tunes the host process itself.
	Host Host
	// Metrics is serve's Prometheus listener; nil means off.
	Metrics *Metrics
	// Budgets are the daily budgets; the zero value is unlimited.
	Budgets Budgets

	// Models are the named model blocks of models:, which session
	// profiles may pick besides the model block (DefaultModel).
	Models map[string]Model
	// Profiles are the channel profiles by name; Parse adds the built-in
	// DefaultProfile (mode sealed) unless the file defines it. Use
	// Profile and ProfileFor, which also serve a hand-built Config.
	Profiles map[string]Profile
	// ChannelProfiles maps channels to their profile (channels_profile).
	ChannelProfiles map[rtsandbox.ChannelKey]string
	// DefaultProfile is the profile of every channel ChannelProfiles does
	// not name (default_profile); "" reads as DefaultProfile.
	DefaultProfile string
	// Session tunes session mode; Parse fills in its defaults.
	Session Session
}

// Host tunes the host process.
type Host struct {
	// MemoryLimitMB is the Go runtime's soft memory limit for the whole
	// host, in MiB (host.memory_limit_mb).
	MemoryLimitMB int
}

// Model is the upstream model: its endpoint, dialect and what the host
// decides for every call.
type Model struct {
	// URL is the chat-completions endpoint (api openai) or the API's base
	// URL without a query (api anthropic), such as
	// https://api.anthropic.com: the broker appends /v1/messages or
	// /v1/messages/count_tokens.
	URL       upstream.Endpoint
	Name      string
	APIKeyEnv EnvVar
	// API is model.api: rtsandbox.ModelAPIOpenAI or ModelAPIAnthropic;
	// empty means openai.
	API string
	// MaxOutputTokens is model.max_output_tokens: for openai the
	// max_tokens sent (1..32768), for anthropic the ceiling of the
	// worker's max_tokens (1025..200000); 0 means the API's default (4096
	// and 128000).
	MaxOutputTokens int
	// Thinking is model.thinking, the thinking level that caps an
	// Anthropic call's thinking budget and effort (anthropic only); empty
	// means high. Session mode will judge it per turn.
	Thinking modelapi.ThinkingLevel
	// Stream is model.stream: the worker may ask for streamed answers.
	Stream bool
	// ContextWindow is model.context_window, the model's context window
	// in tokens (wire.MinContextWindow–MaxContextWindow), and
	// ReserveTokens is model.reserve_tokens, the tokens a session worker
	// keeps free below it (1 to half the window). The session worker
	// compacts its conversation by them; 0 means the worker's defaults
	// (wire.DefaultContextWindow and DefaultReserveTokens, at most a
	// quarter of the window). Sealed turns do not read them.
	ContextWindow int
	ReserveTokens int
}

// Tool is a host tool: either a webhook (URL set) or a built-in (Builtin
// set). Description and Parameters of a built-in are empty unless the file
// gives them; the built-in supplies its own defaults.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage   // compact JSON, YAML key order kept
	URL         upstream.Endpoint // zero for a built-in
	APIKeyEnv   EnvVar
	Builtin     string
}

// MCPServer is an upstream MCP server and the tools the model may call on
// it, in config order. A tool written as a bare name has only Name set
// (Parameters nil): the host lists the server's tools at startup and takes
// that tool's description and schema from there (host.BrokerConfig).
type MCPServer struct {
	Name      string
	URL       upstream.Endpoint
	APIKeyEnv EnvVar
	Tools     []rtsandbox.ToolSpec
}

// NameOnly reports whether the MCP tool t was written as a bare name, to be
// completed from the server's tool list.
func NameOnly(t rtsandbox.ToolSpec) bool { return t.Parameters == nil }

// Sandbox holds the container options.
type Sandbox struct {
	Image string
	// User is "UID:GID" as written, or empty for the host's own uid:gid
	// decided at run time; UID and GID are its parsed parts (0 when empty).
	User        string
	UID, GID    int
	TurnTimeout time.Duration
	Limits      Limits
	Prompt      string // operator prompt; empty means the built-in text
	TimeZone    string // IANA name; empty means the host's zone at run time
	// MaxTurns bounds the turns running at once on the host; 0 means the
	// runtime derives it from CPUs and memory (sealed.DefaultMaxTurns).
	MaxTurns int
	// MaxQueueWait bounds a turn's wait for a slot (guests then get the
	// fixed busy text).
	MaxQueueWait time.Duration
	// ReapInterval is how often leftover containers that no live turn
	// owns are removed while the host runs.
	ReapInterval time.Duration
	// Runtime is the OCI runtime of sealed turns and the default of
	// session profiles, as written (sandbox.runtime): container.RuntimeRunc,
	// container.RuntimeRunsc (gVisor; docs/operations.md, "gVisor") or ""
	// for runc. Config.SealedRuntime and Config.RuntimeOf resolve it.
	Runtime string
	// PoolSize is sandbox.pool.size as written: how many sealed workers
	// serve keeps started for the next turns (0: none); nil when unset,
	// then serve derives it (sealed.DefaultPoolSize).
	PoolSize *int
}

// Limits are the container's resource limits.
type Limits struct {
	MemoryMB    int
	CPUs        float64
	PIDs        int
	WorkspaceMB int
}

// EnvVar is the name of an environment variable that holds a secret. The
// config keeps only the name so the secret is never stored, logged or
// copied into anything that reaches the container.
type EnvVar string

// Lookup returns the variable's current value, or "" when e is empty or the
// variable is unset. It reads on every call and never caches, so rotating
// the secret needs no restart. A nil getenv means os.Getenv.
func (e EnvVar) Lookup(getenv func(string) string) string {
	if e == "" {
		return ""
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	return getenv(string(e))
}

// Secret reads the variable's value on this use; an empty value is an
// error naming the variable (never a value), for the operator's log.
func (e EnvVar) Secret(getenv func(string) string) (rtsandbox.Secret, error) {
	v := e.Lookup(getenv)
	if v == "" {
		return "", fmt.Errorf("%s is unset or empty", e)
	}
	return rtsandbox.Secret(v), nil
}

// Parse validates a YAML config and returns it with defaults filled in. The
// error joins every problem found; it matches rtsandbox.ErrInvalid.
func Parse(data []byte) (*Config, error) {
	root, err := document(data)
	if err != nil {
		return nil, err
	}
	p := &parser{}
	c := p.config(root)
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// Load reads the config file at path and parses it. Files larger than
// MaxFileSize are refused without reading them whole. The error names path.
func Load(path string) (*Config, error) {
	data, err := readLimited(path)
	if err == nil {
		var c *Config
		if c, err = Parse(data); err == nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("config %s: %w", path, err)
}

// readLimited reads at most MaxFileSize+1 bytes, enough to tell that a file
// is too large, so a mistaken path such as /dev/zero cannot exhaust memory.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("file is larger than %d bytes: %w", MaxFileSize, rtsandbox.ErrInvalid)
	}
	return data, nil
}
