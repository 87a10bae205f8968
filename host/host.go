// Package host is the chat host's lifecycle: it puts the validated config
// together into a running host (channel store, start checks, metrics, the
// container engine, the sealed runtime with its broker and tools, the
// router, the surfaces) and takes it apart again in a fixed order. Only
// this package and cmd/ wire packages together (arch_test.go).
//
// The contract:
//
//   - New starts everything or nothing: a failed step undoes the steps
//     before it. The state directory's lock is taken first, so the startup
//     reap can only remove containers of a host that is gone.
//   - Run serves until ctx ends (nil) or a surface stops on its own (its
//     error).
//   - Close drains: surfaces take no new messages, research jobs end (their
//     last reports still post), running turns may finish until Close's ctx
//     ends and are then cancelled, servers close, the runtime waits for its
//     containers, a final reap removes what a crash could leave, and the
//     driver, metrics and the channel store close last. Every step after
//     the drain has its own StopTimeout; none derives from a cancelled
//     serve context.
//   - Research outcomes travel on a channel (reports) that the host pipes
//     to the router once the router exists, so nothing is bound late.
//
// Builders for the one-shot commands (turn, chat, demo, broker, doctor)
// live here too: NewSealedRuntime, BrokerConfig, Checks. The host never
// reaches back into cmd/: everything it needs arrives in Options.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/inflight"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/httpapi"
)

const (
	// StopTimeout bounds each shutdown step after the drain: closing
	// streams, the HTTP server, the final reap, queued removals.
	StopTimeout = 30 * time.Second
	// reapTimeout bounds the startup reap of orphan containers.
	reapTimeout = 60 * time.Second
)

// ErrNoSurface refuses a config that enables no chat surface: such a host
// could never receive a message.
var ErrNoSurface = errors.New("the config enables no chat surface: add an http: or a discord: section")

// env is the process environment, read on every use so that rotated
// secrets take effect without a restart.
type env = func(string) string

// Options configure a Host. Config, Getenv and Logger are required.
type Options struct {
	Config *config.Config
	Getenv func(string) string
	Logger *slog.Logger
	// Discord is how the Discord surface reaches Discord; the zero value is
	// the real service. Tests point it at an in-process fake.
	Discord DiscordNet
	// Sessions builds the session runtime when a profile uses session
	// mode (SessionMode builds the real one); the zero value serves
	// sealed profiles only.
	Sessions Sessions
}

// Host is a running chat host.
type Host struct {
	log    *slog.Logger
	cfg    *config.Config
	router *router.Router
	web    *webTools                                                // research jobs, ended before the drain
	ready  func(context.Context) error                              // readiness beyond draining
	usage  func(context.Context, rtsandbox.ChannelKey) (any, error) // nil: no budgets
	api    *httpapi.API
	apiLn  *listener
	failed chan error // a surface that stopped on its own
	// surfaces stop in reverse after the drain; closers run in reverse
	// after them (runtime, reaper, driver, metrics, store).
	surfaces []func()
	closers  []func() error
	// inFlight records the messages taken and not yet answered;
	// restarted are the earlier process's, told by stopNotices.
	inFlight    *inflight.Journal
	restarted   []inflight.Entry
	stopNotices func()
}

// New starts a host from opts. On error everything started is stopped.
func New(ctx context.Context, opts Options) (_ *Host, err error) {
	cfg, log := opts.Config, opts.Logger
	if cfg.HTTP == nil && cfg.Discord == nil {
		return nil, ErrNoSurface
	}
	if cfg.UsesSessions() && opts.Sessions.Runtime == nil {
		return nil, ErrNoSessionRuntime
	}
	h := &Host{log: log, cfg: cfg, failed: make(chan error, 1)}
	defer func() {
		if err != nil { // nothing runs yet: stop what started at once
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			h.Close(ctx)
		}
	}()
	setMemoryLimit(cfg, log)
	store, err := h.openStore()
	if err != nil {
		return nil, err
	}
	// Under the state directory's lock; closed after the router settled
	// every message (Close), so a graceful stop leaves it empty.
	h.inFlight, h.restarted = inflight.Open(cfg.StateDir, log)
	h.closers = append(h.closers, h.inFlight.Close)
	if err := StartChecks(ctx, cfg, opts.Getenv, log); err != nil { // docs/operations.md
		return nil, err
	}
	m, err := startMetrics(cfg, log) // up until the drain is over
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, func() error { m.stop(); return nil })
	if err := h.startRuntime(ctx, opts.Getenv, opts.Sessions, m, store); err != nil {
		return nil, err
	}
	if cfg.HTTP != nil {
		if err := h.startHTTP(opts.Getenv); err != nil {
			return nil, err
		}
	}
	m.watchRouter(h.router)
	if cfg.Discord != nil {
		stop, err := startDiscord(ctx, cfg, h.router, opts.Getenv, log, opts.Discord)
		if err != nil {
			return nil, err // the discord package names itself ("discord: …")
		}
		h.surfaces = append(h.surfaces, stop)
	}
	// Only a start that succeeded spends initial_channels: a refused one
	// left the state directory as it found it (channels.OpenPending).
	if err := store.Seed(); err != nil {
		return nil, err
	}
	log.Info("serving", "surfaces", surfaceNames(cfg), "state_dir", cfg.StateDir,
		"installation", InstallationID(cfg), "channels", len(store.List()))
	h.stopNotices = restartNotices(h.router, h.restarted, log) // every surface is up
	return h, nil
}

// openStore opens the channel store, holding the state directory's lock.
func (h *Host) openStore() (*channels.Store, error) {
	cfg := h.cfg
	stored := channelStoreExists(cfg.StateDir) // else this start seeds initial_channels
	store, err := channels.OpenPending(cfg.StateDir, cfg.InitialChannels)
	if errors.Is(err, channels.ErrLocked) {
		return nil, fmt.Errorf("state_dir %s is in use by another rtsandbox serve: %w", cfg.StateDir, err)
	}
	if err != nil {
		return nil, err
	}
	h.closers = append(h.closers, store.Close)
	if stored {
		warnChannelDrift(h.log, cfg.InitialChannels, store.List())
	}
	return store, nil
}

// startRuntime connects the engine, builds the sealed runtime, reaps
// orphans, starts the reaper, builds the session runtime when a profile
// uses session mode, starts the router on both, and pipes research
// reports to the router.
func (h *Host) startRuntime(ctx context.Context, getenv env, sessions Sessions, m *hostMetrics, store *channels.Store) error {
	cfg, log := h.cfg, h.log
	if cfg.IsKubernetes() {
		return h.startKubeRuntime(ctx, getenv, sessions, m, store)
	}
	d, engine, closeClient, err := dockerClient(log)
	if err != nil {
		return err
	}
	h.closers = append(h.closers, func() error { closeClient(); return nil })
	id := InstallationID(cfg)
	// The runtime first: it takes the run root's lock, so the reap below
	// cannot remove the containers of a `chat` or `turn` that still runs
	// on this state directory (serve then refuses to start instead).
	reports := newReportPipe()
	s, err := NewSealedRuntime(cfg, getenv, SealedOptions{Driver: d, Logger: log.With("plugin", "sandbox"), Reports: reports,
		OnTurn: m.onTurn(), Observe: m.observe(), OnSettle: m.onSettle(), Pool: true, OnPoolRefill: m.onPoolRefill()})
	if err != nil {
		return err
	}
	reaper := func(ctx context.Context) func() { return startReaper(ctx, d, id, cfg.Sandbox.ReapInterval, log) }
	if err := h.serveSealed(ctx, s, d, reaper, "containers", m); err != nil {
		return err
	}
	// Registered after the sealed runtime's closer, so it runs before it:
	// brokers stop, session containers stay for the next start.
	deps, err := sessionDeps(ctx, cfg, getenv, log.With("plugin", "session"), engine, s.shared, m.observe())
	if err != nil {
		return err
	}
	deps.OnTurn, deps.WatchActive = m.onSessionTurn(), m.watchSessions()
	sess, err := h.startSessions(ctx, sessions, deps)
	if err != nil {
		return err
	}
	h.web, h.ready, h.usage = s.shared.web, engineReady(d), s.shared.usageReport()
	policy, err := access.New(cfg.Access)
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	mux := newRuntimeMux(cfg, s.Runtime, sess)
	mux.budget = turnBudget{ledger: s.shared.ledger, timeout: cfg.Session.TurnTimeout, log: log}
	if sess == nil && sessions.Containers != nil {
		if mux.leftovers, err = sessions.Containers(cfg, engine); err != nil {
			return err
		}
	}
	h.router, err = router.New(router.Options{Channels: store, Runtime: mux, Access: policy, Logger: log,
		OnDrop: m.onDrop(), Usage: s.shared.usageLine(log), Door: newDoor(cfg, getenv), OnDoor: m.onDoor(), InFlight: h.inFlight})
	if err != nil {
		return err
	}
	stopPipe := reports.pipe(h.router)
	h.closers = append(h.closers, func() error { stopPipe(); return nil })
	return nil
}

// Run serves until ctx ends (nil) or a surface stops on its own.
func (h *Host) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		h.log.Info("shutting down: no new messages; running turns may finish")
		return nil
	case err := <-h.failed:
		return err
	}
}

// Close drains and stops everything in order; running turns may finish
// until ctx ends. It returns the first error of a step that failed.
func (h *Host) Close(ctx context.Context) error {
	if h.stopNotices != nil {
		h.stopNotices() // the ones not told yet stay recorded
	}
	if h.api != nil {
		h.api.Stop()
	}
	if h.router != nil {
		h.router.Drain() // waiting messages are refused now; reports still post
	}
	// Research jobs end first: each posts its "ran out of time" outcome
	// through the router, which must still be open.
	jctx, jcancel := context.WithTimeout(context.Background(), StopTimeout)
	if err := h.web.dispose(jctx); err != nil { // nil web: nothing to end
		h.log.Warn("research jobs did not end in time", "err", err)
	}
	jcancel()
	if h.router != nil {
		if err := h.router.Close(ctx); err != nil {
			h.log.Warn("running turns did not finish in time and were cancelled")
		}
	}
	h.stopHTTP()
	err := h.closeAll()
	h.log.Info("stopped")
	return err
}

// closeAll stops the surfaces, then runs the closers in reverse.
func (h *Host) closeAll() error {
	for i := len(h.surfaces) - 1; i >= 0; i-- {
		h.surfaces[i]()
	}
	h.surfaces = nil
	var first error
	for i := len(h.closers) - 1; i >= 0; i-- {
		if err := h.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	h.closers = nil
	return first
}

// startHTTP listens on http.listen and serves the chat API.
func (h *Host) startHTTP(getenv env) error {
	c := h.cfg.HTTP
	if !c.Loopback {
		h.log.Warn("http.listen is not a loopback address: the chat API is reachable from other machines; put TLS and a firewall in front of it", "listen", c.Listen)
	}
	if c.TokenEnv.Lookup(getenv) == "" {
		h.log.Warn("the http guest token variable is empty: every chat API request is refused until it is set", "token_env", string(c.TokenEnv))
	}
	ownerID := httpOwner(h.cfg.Access)
	if c.OwnerTokenEnv != "" && ownerID == "" {
		h.log.Warn("http.owner_token_env is set but access.owners has no http: identity: owner requests are refused")
	}
	warnPreview(h.log, "http.preview", c.Preview, h.cfg)
	api, err := httpapi.New(httpapi.Options{
		Preview:       c.Preview,
		Router:        h.router,
		Token:         func() string { return c.TokenEnv.Lookup(getenv) },
		OwnerToken:    func() string { return c.OwnerTokenEnv.Lookup(getenv) },
		OwnerID:       ownerID,
		LoopbackHosts: c.Loopback,
		Logger:        h.log,
		Ready:         h.ready,
		Usage:         h.usage,

		MaxRequestBytes: int64(c.MaxRequestMB) << 20,
	})
	if err != nil {
		return err
	}
	if err := h.router.AddSurface(httpapi.Prefix, api); err != nil {
		return err
	}
	h.api = api
	h.apiLn, err = listen("http chat API", "http.listen", c.Listen, httpapi.NewServer(api.Handler(), h.log), h.log,
		func(err error) { h.failed <- err })
	return err
}

// stopHTTP ends the API's streams and shuts the server down.
func (h *Host) stopHTTP() {
	if h.api == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := h.api.Close(ctx); err != nil {
		h.log.Error("http chat API did not close", "err", err)
	}
	h.apiLn.shutdown()
}

// httpOwner is the subject of the first http: owner identity: the one the
// owner token speaks as.
func httpOwner(rules access.Rules) string {
	for _, o := range rules.Owners {
		if o.Provider() == httpapi.Prefix {
			return o.Subject()
		}
	}
	return ""
}

// setMemoryLimit puts the whole host under host.memory_limit_mb as the Go
// runtime's soft memory limit: near it the collector runs more often, so
// a burst of large pages or answers slows the host instead of growing it
// until the kernel kills every channel's turns at once. Every parser of
// guest input is bounded on its own; this is the limit on their sum.
func setMemoryLimit(cfg *config.Config, log *slog.Logger) {
	debug.SetMemoryLimit(int64(cfg.Host.MemoryLimitMB) << 20)
	log.Info("memory limit set", "memory_limit_mb", cfg.Host.MemoryLimitMB)
}

// startReaper removes, every interval while the host runs, this
// installation's containers that no turn owns (the driver knows its own),
// so cleanup converges after an engine outage without a restart. The
// returned function stops it and waits.
func startReaper(ctx context.Context, d *docker.Driver, id string, interval time.Duration, log *slog.Logger) (stop func()) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) // runs through the drain
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.ReapEvery(rctx, id, interval, nil); err != nil {
			log.Error("container reaper did not start", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

// sealedEngine is what serve asks of the sealed runtime's engine beside
// the runtime's own use: its installation's leftovers reaped, and its
// removals under way counted (a metric).
type sealedEngine interface {
	Reap(context.Context, string) (int, error)
	Pending() int
}

// serveSealed puts the sealed runtime s in service on eng, on either
// engine: the metrics that watch it, the reap of a crash's leftovers
// (what names them in the log), then the periodic reaper that startReaper
// starts and the warm pool, after the reap, which would remove its
// workers (the engine tracks them as its runs, so the reaper spares them
// from then on). Its closer stops the reaper (before the engine closes),
// closes s (which aborts what is left and waits for its workers to go)
// and reaps whatever a crash of this process during the drain could
// leave. On error s is closed.
func (h *Host) serveSealed(ctx context.Context, s *SealedRuntime, eng sealedEngine, startReaper func(context.Context) (stop func()), what string, m *hostMetrics) error {
	id, log := InstallationID(h.cfg), h.log
	m.watchSandbox(s.Runtime, eng.Pending)
	if err := reap(ctx, eng, id, reapTimeout, log, "orphan "+what+" removed at startup"); err != nil {
		s.Close()
		return err
	}
	stopReaper := startReaper(ctx)
	s.Runtime.StartPool()
	m.watchPool(s.Runtime)
	h.closers = append(h.closers, func() error {
		stopReaper()
		s.Close()
		return reap(context.Background(), eng, id, StopTimeout, log, what+" removed at shutdown")
	})
	return nil
}

// reap removes this installation's turn containers, within timeout.
func reap(ctx context.Context, d interface {
	Reap(context.Context, string) (int, error)
}, id string, timeout time.Duration, log *slog.Logger, what string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	n, err := d.Reap(ctx, id)
	if n > 0 {
		log.Warn(what, "count", n, "installation", id)
	}
	if err != nil {
		return fmt.Errorf("reap containers of installation %s: %w", id, err)
	}
	return nil
}

// surfaceNames lists the enabled surfaces, for messages.
func surfaceNames(cfg *config.Config) string {
	var n []string
	if cfg.HTTP != nil {
		n = append(n, "http")
	}
	if cfg.Discord != nil {
		n = append(n, "discord")
	}
	return strings.Join(n, ", ")
}

// engineReady is the host's readiness check: the container engine answers
// a ping. A result is kept for a second, so probes cannot flood the engine.
func engineReady(d interface {
	Ping(context.Context) (string, error)
}) func(context.Context) error {
	var (
		mu   sync.Mutex
		at   time.Time
		last error
	)
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < time.Second {
			return last
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, last = d.Ping(pctx)
		if last != nil {
			last = fmt.Errorf("container engine: %w", last)
		}
		at = time.Now()
		return last
	}
}
