// `rtsandbox serve`: the long-running host. It owns the state directory,
// routes chat messages from the enabled surfaces to sealed turns, and on
// SIGTERM/SIGINT drains them and exits 0.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/httpapi"
)

const (
	// defaultDrain is how long running turns may finish at shutdown before
	// they are cancelled (their containers are removed either way).
	defaultDrain = 30 * time.Second
	// stopTimeout bounds each later shutdown step: closing streams, the
	// HTTP server, the final reap.
	stopTimeout = 30 * time.Second
	// reapTimeout bounds the startup reap of orphan containers.
	reapTimeout = 60 * time.Second
)

// errNoSurface refuses a config that enables no chat surface: such a host
// could never receive a message.
var errNoSurface = errors.New("the config enables no chat surface: add an http: or a discord: section")

// runServe is `rtsandbox serve --config FILE [--drain 30s]`.
func runServe(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("rtsandbox serve", stderr)
	configPath := fs.String("config", "", "config file (required)")
	drain := fs.Duration("drain", defaultDrain, "at shutdown, how long running turns may finish before they are cancelled")
	reseed := fs.Bool("reseed", false, "seed initial_channels again when the channel store is missing (after a deliberate reset)")
	logFormat := logFormatFlag(fs, logJSON)
	if code, ok := parseOpsFlags(fs, args, stderr); !ok {
		return code
	}
	if err := firstError(missingFlag(fs, "config"), positiveFlag(fs, "drain")); err != nil {
		fmt.Fprintln(stderr, "rtsandbox serve:", err)
		return exitUsage
	}
	log, err := newLogger(stdout, *logFormat, getenv, slog.LevelInfo) // JSON lines by default (host spec §1.15)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox serve:", err)
		return exitUsage
	}
	log = log.With("app", "rtsandbox")
	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox serve:", err)
		return exitUsage
	}
	if cfg.HTTP == nil && cfg.Discord == nil {
		fmt.Fprintln(stderr, "rtsandbox serve:", errNoSurface)
		return exitUsage
	}
	setMemoryLimit(cfg, log)
	if *reseed {
		if err := channels.Reseed(cfg.StateDir); err != nil {
			fmt.Fprintln(stderr, "rtsandbox serve: --reseed:", err)
			return exitFail
		}
		log.Warn("channel store marker removed: a missing store seeds initial_channels again", "state_dir", cfg.StateDir)
	}
	force, stopListening := secondSignal(ctx)
	defer stopListening()
	if err := serve(ctx, cfg, getenv, log, *drain, force); err != nil {
		log.Error("serve failed", "err", err)
		fmt.Fprintln(stderr, "rtsandbox serve:", err)
		return exitFail
	}
	return exitOK
}

// secondSignal returns a channel closed by the first SIGINT or SIGTERM
// that arrives after ctx ended (the first one ends ctx and starts the
// drain), and a function that stops listening.
func secondSignal(ctx context.Context) (force <-chan struct{}, stop func()) {
	forced, quit := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-quit:
			return
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sig)
		select {
		case <-sig:
			close(forced)
		case <-quit:
		}
	}()
	return forced, func() { close(quit); <-done }
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

// setMemoryLimit puts the whole host under host.memory_limit_mb as the Go
// runtime's soft memory limit: near it the collector runs more often, so
// a burst of large pages or answers slows the host instead of growing it
// until the kernel kills every channel's turns at once. Every parser of
// guest input is bounded on its own; this is the limit on their sum.
func setMemoryLimit(cfg *config.Config, log *slog.Logger) {
	limit := int64(cfg.Host.MemoryLimitMB) << 20
	debug.SetMemoryLimit(limit)
	log.Info("memory limit set", "memory_limit_mb", cfg.Host.MemoryLimitMB)
}

// serve runs the host until ctx ends, then drains. The order matters:
// the state-directory lock comes first, so the reap that follows can only
// remove containers of a host that is gone.
//
// force ends the drain at once when it is closed (a second SIGINT or
// SIGTERM): running turns are cancelled and serve exits.
func serve(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, drain time.Duration, force <-chan struct{}) (err error) {
	stored := channelStoreExists(cfg.StateDir) // else this start seeds initial_channels
	store, err := channels.Open(cfg.StateDir, cfg.InitialChannels)
	if errors.Is(err, channels.ErrLocked) {
		return fmt.Errorf("state_dir %s is in use by another rtsandbox serve: %w", cfg.StateDir, err)
	}
	if err != nil {
		return err
	}
	defer store.Close()
	if stored {
		warnChannelDrift(log, cfg.InitialChannels, store.List())
	}
	if err := startChecks(ctx, cfg, getenv, log); err != nil { // docs/operations.md
		return err
	}
	m, err := startMetrics(cfg, log) // up until the drain is over
	if err != nil {
		return err
	}
	defer m.stop()

	d, closeClient, err := dockerDriver(log)
	if err != nil {
		return err
	}
	defer closeClient()
	id := installationID(cfg)
	// The runtime first: it takes the run root's lock, so the reap below
	// cannot remove the containers of a `chat` or `turn` that still runs
	// on this state directory (serve then refuses to start instead).
	reports := &latePoster{}
	s, err := newSealedRuntime(cfg, getenv, sealedOptions{driver: d, log: log.With("plugin", "sandbox"), poster: reports,
		onTurn: m.onTurn(), observe: m.observe(), onSettle: m.onSettle()})
	if err != nil {
		return err
	}
	m.watchSandbox(s.rt, d.Pending)
	if err := reap(ctx, d, id, reapTimeout, log, "orphan containers removed at startup"); err != nil {
		s.close()
		return err
	}
	stopReaper := startReaper(ctx, d, id, cfg.Sandbox.ReapInterval, log)
	defer func() {
		stopReaper() // before the driver closes (closeClient, deferred above)
		s.close()    // aborts what is left and waits for its containers to go
		// Whatever a crash of this process during the drain could leave.
		if rerr := reap(context.Background(), d, id, stopTimeout, log, "containers removed at shutdown"); rerr != nil && err == nil {
			err = rerr
		}
	}()
	policy, err := access.New(cfg.Access)
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	r, err := router.New(router.Options{Channels: store, Runtime: s.rt, Access: policy, Logger: log, OnDrop: m.onDrop(),
		Usage: s.usageLine(log)})
	if err != nil {
		return err
	}
	reports.bind(routerReports{r})
	h := &host{log: log, router: r, drain: drain, force: force, web: s.web, ready: engineReady(d), usage: s.usageReport()}
	defer h.stop()
	if cfg.HTTP != nil {
		if err := h.startHTTP(cfg, getenv); err != nil {
			return err
		}
	}
	m.watchRouter(r)
	if cfg.Discord != nil {
		// The Discord surface (surface/discord) is wired here; see
		// discord_surface.go.
		stopDiscord, err := startDiscord(ctx, cfg, r, getenv, log, discordNet{})
		if err != nil {
			return err // the discord package names itself ("discord: …")
		}
		h.stops = append(h.stops, stopDiscord)
	}
	log.Info("serving", "surfaces", surfaceNames(cfg), "state_dir", cfg.StateDir, "installation", id, "channels", len(store.List()))
	select {
	case <-ctx.Done():
		log.Info("shutting down: no new messages; running turns may finish", "drain", drain.String())
		return nil
	case err := <-h.failed:
		return err
	}
}

// host holds what serve started, to stop it in order.
type host struct {
	log    *slog.Logger
	router *router.Router
	drain  time.Duration
	force  <-chan struct{}                                          // closed: cut the drain short
	ready  func(context.Context) error                              // readiness beyond draining
	usage  func(context.Context, rtsandbox.ChannelKey) (any, error) // nil: no budgets
	web    *webTools                                                // research jobs, cancelled before the drain
	api    *httpapi.API
	srv    *http.Server
	served chan struct{} // closed when srv.Serve returned
	failed chan error    // a surface that stopped on its own
	stops  []func()      // further surfaces, stopped in reverse
}

// startHTTP listens on http.listen and serves the chat API.
func (h *host) startHTTP(cfg *config.Config, getenv env) error {
	c := cfg.HTTP
	if !c.Loopback {
		h.log.Warn("http.listen is not a loopback address: the chat API is reachable from other machines; put TLS and a firewall in front of it", "listen", c.Listen)
	}
	if c.TokenEnv.Lookup(getenv) == "" {
		h.log.Warn("the http guest token variable is empty: every chat API request is refused until it is set", "token_env", string(c.TokenEnv))
	}
	ownerID := httpOwner(cfg.Access)
	if c.OwnerTokenEnv != "" && ownerID == "" {
		h.log.Warn("http.owner_token_env is set but access.owners has no http: identity: owner requests are refused")
	}
	api, err := httpapi.New(httpapi.Options{
		Router:        h.router,
		Token:         func() string { return c.TokenEnv.Lookup(getenv) },
		OwnerToken:    func() string { return c.OwnerTokenEnv.Lookup(getenv) },
		OwnerID:       ownerID,
		LoopbackHosts: c.Loopback,
		Logger:        h.log,
		Ready:         h.ready,
		Usage:         h.usage,
	})
	if err != nil {
		return err
	}
	if err := h.router.AddSurface(httpapi.Prefix, api); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
	h.api, h.srv = api, httpapi.NewServer(api.Handler(), h.log)
	h.served, h.failed = make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(h.served)
		if err := h.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			h.failed <- fmt.Errorf("http server: %w", err)
		}
	}()
	h.log.Info("http chat API listening", "addr", ln.Addr().String())
	return nil
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

// stop drains: surfaces take no new messages, running turns get up to
// h.drain to finish and are then cancelled, streams end, servers close.
// It never derives from the cancelled serve context (habit 14).
func (h *host) stop() {
	if h.api != nil {
		h.api.Stop()
	}
	h.router.Drain() // waiting messages are refused now; reports still post
	// Research jobs end first: each posts its "ran out of time" outcome
	// through the router, which must still be open.
	jctx, jcancel := context.WithTimeout(context.Background(), stopTimeout)
	if err := h.web.dispose(jctx); err != nil {
		h.log.Warn("research jobs did not end in time", "err", err)
	}
	jcancel()
	h.drainTurns()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if h.api != nil {
		if err := h.api.Close(ctx); err != nil {
			h.log.Error("http chat API did not close", "err", err)
		}
		if err := h.srv.Shutdown(ctx); err != nil {
			h.log.Error("http server did not shut down", "err", err)
			h.srv.Close()
		}
		<-h.served
	}
	for i := len(h.stops) - 1; i >= 0; i-- {
		h.stops[i]()
	}
	h.log.Info("stopped")
}

// startReaper removes, every interval while serve runs, this
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

// drainTurns lets running turns finish for up to h.drain, or until the
// second signal closes h.force, then cancels the rest.
func (h *host) drainTurns() {
	ctx, cancel := context.WithTimeout(context.Background(), h.drain)
	defer cancel()
	go func() { // ends with ctx at the latest
		select {
		case <-h.force:
			h.log.Warn("second signal: cancelling running turns now")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := h.router.Close(ctx); err != nil {
		h.log.Warn("running turns did not finish in time and were cancelled", "drain", h.drain.String())
	}
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
