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
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/skills/skilltree"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// SessionRuntime is the session runtime (session spec §1) as the host
// drives it: package session's *Runtime, whose Status the wiring converts
// to a router.RuntimeStatus. Shutdown calls Close, which aborts running
// turns and stops the brokers but leaves the containers running, so a
// restarted host continues every conversation.
type SessionRuntime interface {
	RunTurn(ctx context.Context, b rtsandbox.Binding, text string) (rtsandbox.Reply, error)
	// RunInput runs a turn with the message's attachments and answers
	// with the reply files (router.InputRuntime without previews).
	RunInput(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput) (router.Answer, error)
	// StartFresh removes the channel's container, then archives its
	// conversation (owner fresh).
	StartFresh(channel rtsandbox.ChannelKey) error
	// Stop aborts the channel's turn and removes its container (owner
	// stop); it reports whether a turn was running.
	Stop(channel rtsandbox.ChannelKey) bool
	Status(ctx context.Context, channel rtsandbox.ChannelKey) (router.RuntimeStatus, error)
	// Remove stops and removes the channel's container (owner off); a
	// channel without one is fine.
	Remove(ctx context.Context, channel rtsandbox.ChannelKey) error
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
	// runtime's Close.
	Engine *client.Client
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
	// engine (closed by the caller afterwards).
	Containers func(cfg *config.Config, engine *client.Client) (SessionContainers, error)
}

// ErrNoSessionRuntime refuses a config whose profiles use session mode on
// a host built without the session runtime.
var ErrNoSessionRuntime = errors.New("profiles: a profile uses mode: session, but this host was built without the session runtime")

// runtimeMux is the router's runtime: it runs each channel in the runtime
// of its profile's mode, asking the profile afresh on every call, so a
// channel whose profile changed takes the new mode with its next turn.
// Sealed channels keep the sealed runtime's previews; session channels
// have none yet (their runtime reports no streamed text).
type runtimeMux struct {
	sealed  router.TextRuntime
	session SessionRuntime // nil: no profile uses session mode
	profile func(rtsandbox.ChannelKey) (string, config.Profile)
	budget  turnBudget // the daily budgets of session turns
	// leftovers removes session containers when no profile uses session
	// mode any more (nil: none to remove), so off still removes a
	// container an earlier session profile left.
	leftovers SessionContainers
}

var (
	_ router.TextRuntime    = (*runtimeMux)(nil)
	_ router.InputRuntime   = (*runtimeMux)(nil)
	_ router.StatusRuntime  = (*runtimeMux)(nil)
	_ router.RemoverRuntime = (*runtimeMux)(nil)
)

// errNoSession fails a session channel's turn on a mux without a session
// runtime (only a hand-built config can get there; New refuses it).
var errNoSession = fmt.Errorf("%w: the channel's profile uses session mode, which this host does not run", rtsandbox.ErrInvalid)

// sessionFor returns the session runtime (nil when the host has none) and
// whether channel's profile uses session mode.
func (m *runtimeMux) sessionFor(channel rtsandbox.ChannelKey) (SessionRuntime, bool) {
	_, p := m.profile(channel)
	return m.session, p.Mode == config.ModeSession
}

func (m *runtimeMux) RunTurn(ctx context.Context, b rtsandbox.Binding, text string) (rtsandbox.Reply, error) {
	return m.RunTurnText(ctx, b, text, nil)
}

// RunTurnText runs the turn in the channel's runtime; onText is for the
// sealed runtime's previews (nil: none).
func (m *runtimeMux) RunTurnText(ctx context.Context, b rtsandbox.Binding, text string, onText func(int, string)) (rtsandbox.Reply, error) {
	s, session := m.sessionFor(b.Channel)
	switch {
	case session && s == nil:
		return rtsandbox.Reply{}, errNoSession
	case session:
		return m.budget.run(ctx, b, func() (rtsandbox.Reply, error) { return s.RunTurn(ctx, b, text) })
	case onText == nil:
		return m.sealed.RunTurn(ctx, b, text)
	}
	return m.sealed.RunTurnText(ctx, b, text, onText)
}

// RunInput runs the turn of a message with its attachments. A session
// channel's runtime takes them and may answer with files; a sealed
// channel's cannot, so its text ends with router.AttachmentsNotice when
// the message had files of its own (the replied-to message's never
// counted), as before.
func (m *runtimeMux) RunInput(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, onText func(int, string)) (router.Answer, error) {
	s, session := m.sessionFor(b.Channel)
	switch {
	case session && s == nil:
		return router.Answer{}, errNoSession
	case !session:
		text := in.Text
		if slices.ContainsFunc(in.Attachments, func(a rtsandbox.Attachment) bool { return !a.FromReference }) {
			text += "\n" + router.AttachmentsNotice
		}
		reply, err := m.RunTurnText(ctx, b, text, onText)
		return router.Answer{Reply: reply}, err
	}
	var files []rtsandbox.File
	reply, err := m.budget.run(ctx, b, func() (rtsandbox.Reply, error) {
		a, err := s.RunInput(ctx, b, in)
		files = a.Files
		return a.Reply, err
	})
	if err != nil {
		files = nil
	}
	return router.Answer{Reply: reply, Files: files}, err
}

func (m *runtimeMux) StartFresh(channel rtsandbox.ChannelKey) error {
	s, session := m.sessionFor(channel)
	switch {
	case session && s == nil:
		return errNoSession
	case session:
		return s.StartFresh(channel)
	}
	return m.sealed.StartFresh(channel)
}

func (m *runtimeMux) Stop(channel rtsandbox.ChannelKey) bool {
	s, session := m.sessionFor(channel)
	switch {
	case session && s == nil:
		return false
	case session:
		return s.Stop(channel)
	}
	return m.sealed.Stop(channel)
}

// Status names the channel's mode and profile; a session channel adds its
// container's state.
func (m *runtimeMux) Status(ctx context.Context, channel rtsandbox.ChannelKey) (router.RuntimeStatus, error) {
	name, p := m.profile(channel)
	if p.Mode != config.ModeSession {
		return router.RuntimeStatus{Mode: router.ModeSealed, Profile: name}, nil
	}
	want := router.RuntimeStatus{Mode: router.ModeSession, Profile: name}
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
func newRuntimeMux(cfg *config.Config, sealed router.TextRuntime, session SessionRuntime) *runtimeMux {
	return &runtimeMux{sealed: sealed, session: session, profile: cfg.ProfileFor}
}

// sessionDeps gathers what the session runtime is built from; the
// brokers only when a profile uses session mode.
func sessionDeps(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, engine *client.Client, s *SealedRuntime, observe func(broker.CallRecord)) (SessionDeps, error) {
	uid, gid, err := workerUser(cfg)
	if err != nil {
		return SessionDeps{}, err
	}
	d := SessionDeps{Config: cfg, Getenv: getenv, Logger: log, Engine: engine, UID: uid, GID: gid,
		Installation: InstallationID(cfg), TimeZone: TimeZone(cfg, getenv), ProfileFor: sessionProfile(cfg),
		Memory: s.memory}
	if cfg.UsesSessions() {
		if d.Brokers, err = sessionBrokers(ctx, cfg, getenv, s, observe, log); err != nil {
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
func sessionBrokers(ctx context.Context, cfg *config.Config, getenv env, s *SealedRuntime, observe func(broker.CallRecord), log *slog.Logger) (map[string]broker.Config, error) {
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
		for _, t := range s.web.tools {
			if slices.Contains(p.Tools, t.Spec.Name) {
				bc.Tools = append(bc.Tools, t)
			}
		}
		if bc.Tools, err = withMemoryTools(bc.Tools, s.memory, log); err != nil {
			return nil, fmt.Errorf("profiles.%s: %w", name, err)
		}
		bc.Budget, bc.Observe, bc.Intake = s.ledger, observe, s.intake
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

// sessionProfile adapts config.ProfileFor to the name-only function the
// session runtime takes.
func sessionProfile(cfg *config.Config) func(rtsandbox.ChannelKey) string {
	return func(ch rtsandbox.ChannelKey) string {
		name, _ := cfg.ProfileFor(ch)
		return name
	}
}
