// Session mode's wiring: the one place that says how the session runtime
// (serve) and the offline session-container remover (reap, channels off)
// are built from their parts: package session's runtime on the Docker
// session driver, with one broker.Session per channel built from the
// profile's broker configuration.

package host

import (
	"context"
	"fmt"
	"os"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/compactor"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/delegate"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/session"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// SessionMode builds session mode for the host (Options.Sessions) and for
// the offline commands; its runtime downloads attachments by URL through
// fetcher (nil: safefetch's own).
func SessionMode(fetcher *safefetch.Fetcher) Sessions {
	return Sessions{Runtime: func(ctx context.Context, d SessionDeps) (SessionRuntime, error) {
		return sessionRuntime(ctx, d, fetcher)
	}, Containers: sessionContainers}
}

// sessionRuntime builds serve's session runtime from what the host opened.
func sessionRuntime(ctx context.Context, d SessionDeps, fetcher *safefetch.Fetcher) (SessionRuntime, error) {
	image := ImageTag(d.Config)
	comp, err := sessionCompactor(d.Config, d.Getenv, upstream.New(nil))
	if err != nil {
		return nil, err
	}
	opts := sessionOptions(d, image)
	drv, err := sessionDriver(d)
	if err != nil {
		return nil, err
	}
	reapStrays(ctx, drv, d, opts.ContainerPrefix)
	opts.Driver, opts.Fetcher = drv, fetcher
	// One quota for every broker serve makes, so that a channel's count
	// of re-armed startup windows outlives its brokers.
	windows := broker.NewWindowQuota(rtsandbox.StartupWindowsPerDay, nil)
	opts.NewBroker = func(channel rtsandbox.ChannelKey, profile, socket string) (session.Broker, error) {
		b, err := sessionBroker(d, d.Config, sessionBrokerFor{channel: channel, profile: profile, image: image, socket: socket}, comp, windows)
		if err != nil || d.Kube == nil {
			return b, err
		}
		return d.Kube.sessionBroker(b, socket, handOver(d.UID, d.GID))
	}
	opts.ProfileFor = d.ProfileFor
	opts.Scrub = scrubDiagnostic
	opts.Logger = d.Logger
	opts.OnTurn = d.OnTurn
	rt, err := session.New(opts)
	if err != nil {
		return nil, err
	}
	if d.WatchActive != nil {
		d.WatchActive(rt.Active)
	}
	return rt, nil
}

// sessionEngine is the engine of the channels' containers: Docker's
// session driver, or Kubernetes' session Pods.
type sessionEngine interface {
	container.LongLived
	ReapStrays(ctx context.Context, installation string, name func(channel string) string) (int, error)
}

// sessionDriver is d's session engine: Kubernetes' when serve runs on
// engine: kubernetes, else the Docker daemon's.
func sessionDriver(d SessionDeps) (sessionEngine, error) {
	if d.Kube != nil {
		return d.Kube.sessions()
	}
	return docker.NewSession(d.Engine), nil
}

// handOver gives a file the host made for the worker (its socket's
// sibling, the broker hello) to the worker's user when the host runs as
// root, as the session runtime does with the socket; otherwise the worker
// runs as the host's own user and owns it already.
func handOver(uid, gid int) func(path string) error {
	return func(path string) error {
		if os.Geteuid() != 0 {
			return nil
		}
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("hand %s to the worker user: %w", path, err)
		}
		return nil
	}
}

// sessionBrokerFor is what one broker is made for: the channel whose
// worker it serves, on profile, with the worker image, listening on
// socket.
type sessionBrokerFor struct {
	channel                rtsandbox.ChannelKey
	profile, image, socket string
}

// scrubDiagnostic masks credential shapes in text bound for the operator
// log or, from a failed host compactor, the worker.
func scrubDiagnostic(s string) string { return delegate.ScrubDiagnostic(s, delegate.NoLimit) }

// sessionCompactor builds the host compactor session.compactor names (the
// built-in summary engine on the named model, its credential read per
// call), checked by the broker's rules; nil without one.
func sessionCompactor(cfg *config.Config, getenv func(string) string, client *upstream.Client) (broker.Compactor, error) {
	k := cfg.Session.Compactor
	if k == nil {
		return nil, nil
	}
	m, ok := cfg.CompactorModel()
	if !ok {
		return nil, fmt.Errorf("session.compactor.model: %w: %q is not a model", rtsandbox.ErrInvalid, k.Model)
	}
	key := m.APIKeyEnv
	c, err := compactor.New(compactor.Options{
		API: m.API, URL: m.URL, Model: m.Name, Client: client,
		APIKey:  func(context.Context) (rtsandbox.Secret, error) { return key.Secret(getenv) },
		Timeout: k.Timeout, MaxRequestBytes: k.MaxRequestBytes, MaxSummaryTokens: k.MaxSummaryTokens, MaxInputBytes: k.MaxInputBytes,
	})
	if err == nil {
		err = broker.CheckCompactor(c)
	}
	if err != nil {
		return nil, fmt.Errorf("session.compactor: %w", err)
	}
	return c, nil
}

// reapStrays removes the installation's session containers named under
// an earlier container prefix (docker.SessionDriver.ReapStrays), before
// any channel's broker listens, and only for a valid prefix (under an
// invalid one no container's name would match). A failure is logged, not fatal: the
// engine may be down now, and turns then fail on their own.
func reapStrays(ctx context.Context, drv sessionEngine, d SessionDeps, prefix string) {
	if !container.ValidSessionPrefix(prefix) {
		return // no name matches it: session.New refuses it next
	}
	name := func(channel string) string { return container.PrefixedSessionName(prefix, d.Installation, channel) }
	n, err := drv.ReapStrays(ctx, d.Installation, name)
	switch {
	case err != nil:
		d.Logger.Warn("session containers of an earlier container prefix not removed", "removed", n, "err", err)
	case n > 0:
		d.Logger.Info("session containers of an earlier container prefix removed", "removed", n, "prefix", prefix)
	}
}

// sessionOptions are the runtime's options as data, from the session
// block (limits, party dir, container prefix, log driver and options,
// turn, start and compactor timeouts, the disk bound), the worker user,
// zone and installation, one profile per session profile in use with its
// skills tree, and the prompt memory block from the memory database.
func sessionOptions(d SessionDeps, image string) session.Options {
	cs := d.Config.Session
	cs.ContainerPrefix = containerPrefix(d.Config)
	lim := container.SessionLimits{MemoryMB: cs.Limits.MemoryMB, CPUs: cs.Limits.CPUs, PIDs: cs.Limits.PIDs}
	profiles := map[string]session.Profile{}
	for name := range d.Brokers {
		p, _ := d.Config.Profile(name)
		profiles[name] = session.Profile{Limits: lim, Skills: d.Skills[name], Runtime: d.Config.RuntimeOf(p)}
	}
	o := session.Options{
		Profiles:        profiles,
		PartyDir:        cs.PartyDir,
		Image:           image,
		Installation:    d.Installation,
		ContainerPrefix: cs.ContainerPrefix,
		UID:             d.UID,
		GID:             d.GID,
		TimeZone:        d.TimeZone,
		Log:             container.LogConfig{Driver: cs.LogDriver, Options: cs.LogOptions},
		TurnTimeout:     cs.TurnTimeout,
		StartTimeout:    cs.StartTimeout,
		Disk: session.DiskOptions{Mode: session.DiskMode(cs.Disk.Mode), SizeMB: cs.Disk.SizeMB,
			MaxFiles: cs.Disk.MaxFiles, PruneAfter: cs.Disk.PruneAfter},
	}
	if cs.Compactor != nil {
		o.CompactorTimeout = cs.Compactor.Timeout
	}
	if d.Memory != nil {
		// Each turn's prompt memory block: the speaker's own entries and
		// the channel notes from the memory database, with its visibility.
		o.Memory = d.Memory.Block
	}
	return o
}

// sessionBroker makes the broker of one channel's worker (for): the
// profile's checked broker configuration, the session budget, the host
// compactor (nil: none), the channel its startup window is charged to
// with the host's window quota, and the worker's profile as GET
// /worker/config answers it (with the skills index and where the copy is
// mounted, when the profile has skills).
func sessionBroker(d SessionDeps, cfg *config.Config, f sessionBrokerFor, comp broker.Compactor, windows *broker.WindowQuota) (session.Broker, error) {
	profile := f.profile
	bc, ok := d.Brokers[profile]
	if !ok {
		return nil, fmt.Errorf("profiles.%s: %w: not a session profile in use", profile, rtsandbox.ErrInvalid)
	}
	b, err := broker.New(bc)
	if err != nil {
		return nil, fmt.Errorf("profiles.%s: %w", profile, err)
	}
	sc := sessionLimits(cfg.Session)
	sc.Broker, sc.WorkerImage = b, f.image
	sc.Channel, sc.Windows = f.channel, windows
	sc.Compactor, sc.Scrub = comp, scrubDiagnostic
	sc.Worker = workerConfig(d, cfg, b, bc, profile)
	s, err := broker.NewSession(sc)
	if err != nil {
		return nil, err
	}
	if err := s.Listen(f.socket); err != nil {
		return nil, err
	}
	return s, nil
}

// workerConfig is the answer of GET /worker/config for profile: its
// model, the operator's prompt, the zone, the tools and MCP servers its
// broker declares, and its skills index with where the copy is mounted
// (none when the profile has no skills).
func workerConfig(d SessionDeps, cfg *config.Config, b *broker.Broker, bc broker.Config, profile string) wire.SessionWorkerConfig {
	tools, mcp := b.Declarations()
	wc := wire.SessionWorkerConfig{
		ModelAPI: bc.API, Model: bc.Model, Stream: bc.Stream,
		Prompt: cfg.Sandbox.Prompt, TimeZone: d.TimeZone, Tools: tools, MCP: mcp,
	}
	if p, ok := cfg.Profile(profile); ok {
		if m, ok := cfg.ModelOf(p); ok {
			wc.ContextWindow, wc.ReserveTokens = m.ContextWindow, m.ReserveTokens
		}
	}
	if tree := d.Skills[profile]; tree != nil {
		wc.SkillsDir, wc.Skills = wire.SessionSkillsDir, tree.Skills()
	}
	return wc
}

// sessionLimits is the session block's per-turn budget and listener
// limits as a broker's configuration.
func sessionLimits(s config.Session) broker.SessionConfig {
	return broker.SessionConfig{
		MaxCalls:         s.MaxCalls,
		MaxInFlight:      s.MaxInFlight,
		MaxConnections:   s.MaxConnections,
		MaxRequestBytes:  s.MaxRequestBytes,
		MaxResponseBytes: s.MaxResponseBytes,
	}
}

// sessionContainers removes this installation's session containers while
// no serve runs.
func sessionContainers(cfg *config.Config, engine *client.Client) (SessionContainers, error) {
	if cfg.IsKubernetes() {
		return kubeSessionContainers(cfg)
	}
	return newOfflineSessions(cfg, docker.NewSession(engine)), nil
}

// containerPrefix is session.container_prefix; a hand-built config
// without one gets the default, which Parse fills in.
func containerPrefix(cfg *config.Config) string {
	if cfg.Session.ContainerPrefix == "" {
		return container.DefaultSessionPrefix
	}
	return cfg.Session.ContainerPrefix
}

// sessionRemover is what offlineSessions needs of *docker.SessionDriver.
type sessionRemover interface {
	Remove(ctx context.Context, name string) error
	ReapSessions(ctx context.Context, installation string) (int, error)
}

func newOfflineSessions(cfg *config.Config, d sessionRemover) offlineSessions {
	return offlineSessions{d: d, installation: InstallationID(cfg), prefix: containerPrefix(cfg), party: cfg.Session.PartyDir}
}

// offlineSessions removes one channel's container by the name serve gives
// it (the configured prefix), or all of the installation's by label,
// whatever their prefix; then it unmounts the workspace images (hard
// disk bound) that nothing runs on any more.
type offlineSessions struct {
	d            sessionRemover
	installation string
	prefix       string // session.container_prefix
	party        string // session.party_dir
}

func (o offlineSessions) Remove(ctx context.Context, ch rtsandbox.ChannelKey) error {
	if err := o.d.Remove(ctx, container.PrefixedSessionName(o.prefix, o.installation, string(ch))); err != nil {
		return err
	}
	_, err := session.DetachWorkspace(o.party, ch)
	return err
}

func (o offlineSessions) RemoveAll(ctx context.Context) (int, error) {
	n, err := o.d.ReapSessions(ctx, o.installation)
	if err != nil {
		return n, err
	}
	_, err = session.DetachAll(o.party)
	return n, err
}
