// `rtsandbox serve`: the long-running host. It owns the state directory,
// routes chat messages from the enabled surfaces to sealed turns, and on
// SIGTERM/SIGINT drains them and exits 0.

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/safefetch"
)

// defaultDrain is how long running turns may finish at shutdown before
// they are cancelled (their containers are removed either way).
const defaultDrain = 30 * time.Second

// runServe is `rtsandbox serve --config FILE [--drain 30s]`.
func runServe(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	st := newSetup("rtsandbox serve", stderr, cli.LogJSON) // JSON lines by default (docs/operations.md, "Metrics and the per-turn log record")
	drain := st.FS.Duration("drain", defaultDrain, "at shutdown, how long running turns may finish before they are cancelled")
	reseed := st.FS.Bool("reseed", false, "seed initial_channels again when the channel store is missing (after a deliberate reset)")
	cfg, log, code, ok := st.Load(args, getenv, stderr, stdout, slog.LevelInfo, func() error { return cli.PositiveFlag(st.FS, "drain") })
	if !ok {
		return code
	}
	log = log.With("app", "rtsandbox")
	if cfg.IsKubernetes() {
		defer routeKlog(log)()
	}
	if cfg.HTTP == nil && cfg.Discord == nil {
		return cli.Fail(stderr, "rtsandbox serve", exitUsage, host.ErrNoSurface)
	}
	if *reseed {
		if err := channels.Reseed(cfg.StateDir); err != nil {
			fmt.Fprintln(stderr, "rtsandbox serve: --reseed:", err)
			return exitFail
		}
		log.Warn("channel store marker removed: a missing store seeds initial_channels again", "state_dir", cfg.StateDir)
	}
	force, stopListening := cli.SecondSignal(ctx)
	defer stopListening()
	if err := serve(ctx, cfg, getenv, log, *drain, force, serveNet{}); err != nil {
		log.Error("serve failed", "err", err)
		return cli.Fail(stderr, "rtsandbox serve", exitFail, err)
	}
	return exitOK
}

// serveNet is how serve reaches what its config does not name; the zero
// value is production's. Tests point it at in-process fakes.
type serveNet struct {
	discord host.DiscordNet    // how the Discord surface reaches Discord
	fetcher *safefetch.Fetcher // how session mode downloads attachments by URL; nil: safefetch's own
}

// serve runs the host until ctx ends, then drains it (host.Serve).
func serve(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, drain time.Duration, force <-chan struct{}, n serveNet) error {
	o := host.Options{Config: cfg, Getenv: getenv, Logger: log, Sessions: host.SessionMode(n.fetcher), Discord: n.discord}
	return host.Serve(ctx, o, drain, force)
}
