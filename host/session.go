package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/skills/skilltree"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// SessionRuntime is the session runtime (docs/architecture.md, "The two modes") as the host
// drives it: package session's *Runtime. Run takes a message's
// attachments and answers with the reply files; StartFresh removes the
// channel's container, then archives its conversation (owner fresh); Stop
// aborts the channel's turn; Remove stops and removes the channel's
// container (owner off). Shutdown calls Close, which aborts running turns
// and stops the brokers but leaves the containers running, so a restarted
// host continues every conversation.
type SessionRuntime interface {
	rtsandbox.Runtime
	Close(ctx context.Context) error
}

// SessionContainers removes session containers while no serve runs:
// `rtsandbox reap` (all of this installation's) and `rtsandbox channels
// off` (one channel's). A missing container is not an error.
type SessionContainers interface {
	Remove(ctx context.Context, channel rtsandbox.ChannelKey) error
	RemoveAll(ctx context.Context) (int, error)
}

// SessionDeps is what the host hands Sessions.Runtime: the config and
// what serve already opened or decided.
type SessionDeps struct {
	Config *config.Config
	Getenv func(string) string
	Logger *slog.Logger
	// Engine is serve's Docker client; the host closes it after the
	// runtime's Close. nil on engine: kubernetes.
	Engine *client.Client
	// Kube is engine: kubernetes (the sealed runtime's), whose listener
	// and client the channels' Pods share; nil on Docker.
	Kube *KubeEngine
	// UID and GID run the workers (WorkerUser: sandbox.user when the
	// host runs as root, else the host's own ids; never root).
	UID, GID     int
	Installation string // InstallationID: labels the containers
	TimeZone     string // TimeZone(cfg): the workers' zone
	// ProfileFor names a channel's profile (config.ProfileFor).
	ProfileFor func(rtsandbox.ChannelKey) string
	// Brokers are the broker configurations of the session profiles in
	// use, by profile name, built at start like the sealed broker's
	// (MCP tools named bare are listed once, now): the profile's model,
	// only its tools and MCP servers, the web tools it lists, the memory
	// tools (every session profile has them, as every sealed worker does),
	// and the sealed runtime's budget ledger and call observer, so budgets
	// and metrics count both modes. broker.New checks one.
	Brokers map[string]broker.Config
	// Skills are the validated copies of the skills directories of the
	// session profiles in use that name one holding skills
	// (sessionSkills), by profile.
	Skills map[string]*skilltree.Tree
	// Memory is the memory database both modes share (the sealed
	// runtime's): the session runtime builds each turn's prompt memory
	// block from it (memstore.Store.Block), and the memory tools run on it.
	Memory *memstore.Store
	// OnTurn receives every admitted session turn's stats (the turn
	// metrics with mode="session"): session.Options.OnTurn. nil when
	// metrics are off.
	OnTurn func(session.TurnStats)
	// WatchActive binds the active-turns gauge (mode="session") to the
	// runtime's count (session.Runtime.Active) once the runtime exists;
	// nil when metrics are off.
	WatchActive func(active func() int)
}

// Sessions is how the host and the offline commands build session mode;
// SessionMode is the real one (tests build others). The zero value builds none: serve then refuses a
// config with a session profile (ErrNoSessionRuntime), and reap and
// channels off leave session containers alone.
type Sessions struct {
	// Runtime builds the session runtime of serve; called only when a
	// profile uses session mode.
	Runtime func(ctx context.Context, d SessionDeps) (SessionRuntime, error)
	// Containers builds the offline remover of reap and channels off on
	// cfg's engine: engine is the Docker client (closed by the caller
	// afterwards), nil on engine: kubernetes, where the remover opens its
	// own client. A nil remover means the engine has none to look for
	// (Kubernetes without kubernetes.session).
	Containers func(cfg *config.Config, engine *client.Client) (SessionContainers, error)
}

// ErrNoSessionRuntime refuses a config whose profiles use session mode on
// a host built without the session runtime.
var ErrNoSessionRuntime = errors.New("profiles: a profile uses mode: session, but this host was built without the session runtime")

// runtimeMux is the router's runtime: it runs each channel in the runtime
// of its profile's mode, asking the profile afresh on every call, so a
// channel whose profile changed takes the new mode with its next turn.
// Session turns run under the daily budgets here (the sealed runtime
// keeps its own).
type runtimeMux struct {
	sealed  rtsandbox.Runtime
	session SessionRuntime // nil: no profile uses session mode
	profile func(rtsandbox.ChannelKey) (string, config.Profile)
	budget  turnBudget // the daily budgets of session turns
	// leftovers removes session containers when no profile uses session
	// mode any more (nil: none to remove), so off still removes a
	// container an earlier session profile left.
	leftovers SessionContainers
}

var _ rtsandbox.Runtime = (*runtimeMux)(nil)

// errNoSession fails a session channel's turn on a mux without a session
// runtime (only a hand-built config can get there; New refuses it).
var errNoSession = fmt.Errorf("%w: the channel's profile uses session mode, which this host does not run", rtsandbox.ErrInvalid)

// runtimeFor returns the runtime of channel's mode; errNoSession for a
// session channel on a host without the session runtime.
func (m *runtimeMux) runtimeFor(channel rtsandbox.ChannelKey) (rt rtsandbox.Runtime, session bool, err error) {
	if _, p := m.profile(channel); p.Mode != config.ModeSession {
		return m.sealed, false, nil
	}
	if m.session == nil {
		return nil, true, errNoSession
	}
	return m.session, true, nil
}

// Run runs the turn in the channel's runtime: a session channel's under
// the daily budgets.
func (m *runtimeMux) Run(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, onText func(int, string)) (rtsandbox.Answer, error) {
	rt, session, err := m.runtimeFor(b.Channel)
	switch {
	case err != nil:
		return rtsandbox.Answer{}, err
	case !session:
		return rt.Run(ctx, b, in, onText)
	}
	a, err := m.budget.run(ctx, b, func() (rtsandbox.Answer, error) { return rt.Run(ctx, b, in, onText) })
	if err != nil {
		a.Files = nil
	}
	return a, err
}

func (m *runtimeMux) StartFresh(channel rtsandbox.ChannelKey) error {
	rt, _, err := m.runtimeFor(channel)
	if err != nil {
		return err
	}
	return rt.StartFresh(channel)
}

func (m *runtimeMux) Stop(channel rtsandbox.ChannelKey) bool {
	rt, _, err := m.runtimeFor(channel)
	return err == nil && rt.Stop(channel)
}

// Status names the channel's mode and profile; a session channel adds its
// container's state.
func (m *runtimeMux) Status(ctx context.Context, channel rtsandbox.ChannelKey) (rtsandbox.RuntimeStatus, error) {
	name, p := m.profile(channel)
	if p.Mode != config.ModeSession {
		return rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSealed, Profile: name}, nil
	}
	want := rtsandbox.RuntimeStatus{Mode: rtsandbox.ModeSession, Profile: name}
	if m.session == nil {
		return want, errNoSession
	}
	st, err := m.session.Status(ctx, channel)
	// Mode and profile are the host's to say, whatever the runtime knew
	// before it failed.
	st.Mode, st.Profile = want.Mode, want.Profile
	return st, err
}

// Remove removes the channel's session container whatever its profile
// says now: one left by an earlier session profile goes too.
func (m *runtimeMux) Remove(ctx context.Context, channel rtsandbox.ChannelKey) error {
	if m.session == nil {
		if m.leftovers != nil {
			return m.leftovers.Remove(ctx, channel)
		}
		return nil
	}
	return m.session.Remove(ctx, channel)
}

// newRuntimeMux returns the router's runtime for cfg: the sealed runtime
// for sealed profiles, session for session ones.
func newRuntimeMux(cfg *config.Config, sealed rtsandbox.Runtime, session SessionRuntime) *runtimeMux {
	return &runtimeMux{sealed: sealed, session: session, profile: cfg.ProfileFor}
}

// sessionDeps gathers what the session runtime is built from; the
// brokers only when a profile uses session mode.
func sessionDeps(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, engine *client.Client, svc *services, observe func(broker.CallRecord)) (SessionDeps, error) {
	uid, gid, err := workerUser(cfg)
	if err != nil {
		return SessionDeps{}, err
	}
	d := SessionDeps{Config: cfg, Getenv: getenv, Logger: log, Engine: engine, UID: uid, GID: gid,
		Installation: InstallationID(cfg), TimeZone: TimeZone(cfg, getenv), ProfileFor: profileName(cfg),
		Memory: svc.memory}
	if cfg.UsesSessions() {
		if d.Brokers, err = sessionBrokers(ctx, cfg, getenv, svc, observe, log); err != nil {
			return SessionDeps{}, err
		}
		if d.Skills, err = sessionSkills(cfg, d.Brokers); err != nil {
			return SessionDeps{}, err
		}
	}
	return d, nil
}

// startSessions builds the session runtime when a profile uses session
// mode; nil when none does. Its Close runs before the sealed runtime's
// (the caller registers it after): brokers stop, containers stay.
func (h *Host) startSessions(ctx context.Context, s Sessions, d SessionDeps) (SessionRuntime, error) {
	cfg := d.Config
	if !cfg.UsesSessions() {
		return nil, nil
	}
	if s.Runtime == nil {
		return nil, ErrNoSessionRuntime
	}
	rt, err := s.Runtime(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("session runtime: %w", err)
	}
	h.closers = append(h.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			return fmt.Errorf("session runtime: %w", err)
		}
		return nil
	})
	return rt, nil
}

// sessionBrokers builds the broker configuration of every session
// profile a channel can get (config.ForProfile), sharing the sealed
// runtime's web tools, memory database, budget ledger and observer.
func sessionBrokers(ctx context.Context, cfg *config.Config, getenv env, svc *services, observe func(broker.CallRecord), log *slog.Logger) (map[string]broker.Config, error) {
	out := map[string]broker.Config{}
	client := upstream.New(nil)
	for _, name := range sessionProfiles(cfg) {
		p, _ := cfg.Profile(name)
		pc, ok := cfg.ForProfile(name)
		if !ok {
			return nil, fmt.Errorf("profiles.%s: model %q: %w", name, p.Model, rtsandbox.ErrInvalid)
		}
		bc, err := BrokerConfig(ctx, pc, getenv, client, log)
		if err != nil {
			return nil, fmt.Errorf("profiles.%s: %w", name, err)
		}
		for _, t := range svc.web.tools {
			if slices.Contains(p.Tools, t.Spec.Name) {
				bc.Tools = append(bc.Tools, t)
			}
		}
		if bc.Tools, err = withMemoryTools(bc.Tools, svc.memory, log); err != nil {
			return nil, fmt.Errorf("profiles.%s: %w", name, err)
		}
		bc.Budget, bc.Observe, bc.Intake = svc.ledger, observe, svc.intake
		out[name] = bc
	}
	return out, nil
}

// errMemoryToolName refuses an operator's tool that takes the name of a
// memory tool in a session profile.
var errMemoryToolName = fmt.Errorf("%w: the tool name is reserved for the memory tools of session mode", rtsandbox.ErrInvalid)

// withMemoryTools adds the memory tools of m to tools (a new slice),
// refusing a tool of the same name at startup rather than at a channel's
// first turn. Without a database (a hand-built runtime) there are none.
func withMemoryTools(tools []broker.Tool, m *memstore.Store, log *slog.Logger) ([]broker.Tool, error) {
	if m == nil {
		return tools, nil
	}
	out := slices.Clip(tools)
	for _, t := range m.Tools(log) {
		spec := t.Spec()
		if slices.ContainsFunc(tools, func(o broker.Tool) bool { return o.Spec.Name == spec.Name }) {
			return nil, fmt.Errorf("tools: %q: %w", spec.Name, errMemoryToolName)
		}
		out = append(out, broker.Tool{Spec: spec, Impl: t})
	}
	return out, nil
}

// sessionProfiles names the session profiles a channel can get, sorted.
func sessionProfiles(cfg *config.Config) []string {
	var out []string
	add := func(name string, p config.Profile) {
		if p.Mode == config.ModeSession && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	add(cfg.ProfileFor(""))
	for ch := range cfg.ChannelProfiles {
		add(cfg.ProfileFor(ch))
	}
	slices.Sort(out)
	return out
}

// profileName adapts config.ProfileFor to the name-only function the
// runtimes take.
func profileName(cfg *config.Config) func(rtsandbox.ChannelKey) string {
	return func(ch rtsandbox.ChannelKey) string {
		name, _ := cfg.ProfileFor(ch)
		return name
	}
}
