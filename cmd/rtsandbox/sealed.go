package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/chanstate"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/delegate"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/sandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// sealedRuntime is a sealed runtime wired from a config, with what must be
// closed after it.
type sealedRuntime struct {
	rt     *sandbox.Runtime
	driver container.Driver
	web    *webTools
	// ledger keeps the daily budgets; nil when the config sets none.
	ledger *budget.Ledger
	close  func()
}

// runRootName is the run root's name in the state directory.
const runRootName = "run"

// sealedOptions are the wiring choices a command may override.
type sealedOptions struct {
	client  *upstream.Client        // nil: the hardened default
	driver  container.Driver        // nil: the local Docker daemon
	onTurn  func(sandbox.TurnStats) // after the "turn" record (metrics.go)
	observe func(broker.CallRecord) // the broker's Observe (metrics)
	// onSettle is told every settled budget amount (metrics); nil is fine.
	onSettle func(budget.Kind, int64)
	log      *slog.Logger
	// poster receives research reports; nil refuses a config that enables
	// web.research.
	poster delegate.Poster
}

// newSealedRuntime builds the broker and the sealed runtime of cfg. The
// state directory holds the run root and the channel state (and, from
// older versions, the workspaces that the state store migrates once); it
// is created 0700 when missing and must otherwise be private to this user.
func newSealedRuntime(cfg *config.Config, getenv env, o sealedOptions) (*sealedRuntime, error) {
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	uid, gid, err := workerUser(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := privdir.Make(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("state_dir: %w (it must be owned by uid %d with mode 0700)", err, os.Geteuid())
	}
	state, err := chanstate.Open(chanstate.Options{
		Dir:        filepath.Join(cfg.StateDir, "channel-state"),
		LegacyRoot: filepath.Join(cfg.StateDir, "workspaces"),
		Logger:     o.log,
	})
	if err != nil {
		return nil, err
	}
	if o.client == nil {
		o.client = upstream.New(nil)
	}
	bc, err := brokerConfig(cfg, getenv, o.client, o.log)
	if err != nil {
		return nil, err
	}
	web, err := newWebTools(cfg, getenv, o.client, o.log, o.poster)
	if err != nil {
		return nil, err
	}
	bc.Tools = append(bc.Tools, web.tools...)
	bc.Observe = o.observe
	ledger, err := openLedger(cfg, o.onSettle)
	if err != nil {
		return nil, err
	}
	bc.Budget = ledger
	b, err := broker.New(bc)
	if err != nil {
		closeLedger(ledger)
		return nil, fmt.Errorf("broker: %w", err)
	}
	closeFn := func() { closeLedger(ledger) }
	if o.driver == nil {
		d, closeClient, err := dockerDriver(o.log)
		if err != nil {
			closeFn()
			return nil, err
		}
		o.driver, closeFn = d, func() { closeClient(); closeLedger(ledger) }
	}
	tools, mcp := sandbox.WorkerTools(bc)
	rt, err := sandbox.New(sandbox.Options{
		Broker: b, Driver: o.driver, Image: imageTag(cfg), UID: uid, GID: gid,
		RunRoot: filepath.Join(cfg.StateDir, runRootName), State: state,
		Model: cfg.Model.Name, Prompt: cfg.Sandbox.Prompt, TimeZone: timeZone(cfg, getenv),
		Tools: tools, MCP: mcp, TurnTimeout: cfg.Sandbox.TurnTimeout,
		MaxTurns: cfg.Sandbox.MaxTurns, MaxQueueWait: cfg.Sandbox.MaxQueueWait,
		Limits: container.Limits{
			MemoryMB: cfg.Sandbox.Limits.MemoryMB, CPUs: cfg.Sandbox.Limits.CPUs,
			PIDs: cfg.Sandbox.Limits.PIDs, WorkspaceMB: cfg.Sandbox.Limits.WorkspaceMB,
		},
		Installation: installationID(cfg), Logger: o.log, OnTurn: logTurn(o.log, o.onTurn),
		Budget: ledger,
	})
	if err != nil {
		closeFn()
		return nil, err // sandbox errors name the sandbox already
	}
	return &sealedRuntime{rt: rt, driver: o.driver, web: web, ledger: ledger, close: func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := web.dispose(ctx); err != nil {
			o.log.Warn("research jobs did not end in time", "err", err)
		}
		rt.Dispose()
		closeFn()
	}}, nil
}

// errRootUser refuses a root host without sandbox.user: the worker is never
// root, and guessing another user could hand a workspace to a stranger.
var errRootUser = errors.New("sandbox.user: required when rtsandbox runs as root; name a non-root \"UID:GID\" for the worker")

func workerUser(cfg *config.Config) (int, int, error) {
	if cfg.Sandbox.UID > 0 {
		return cfg.Sandbox.UID, cfg.Sandbox.GID, nil
	}
	if os.Geteuid() == 0 {
		return 0, 0, errRootUser
	}
	return os.Geteuid(), os.Getegid(), nil
}

// timeZone is sandbox.time_zone, else the host's IANA zone (TZ, then the
// /etc/localtime link), else UTC.
func timeZone(cfg *config.Config, getenv env) string {
	if cfg.Sandbox.TimeZone != "" {
		return cfg.Sandbox.TimeZone
	}
	if tz := strings.TrimPrefix(getenv("TZ"), ":"); tz != "" && tz != "Local" && !strings.HasPrefix(tz, "/") {
		if _, err := time.LoadLocation(tz); err == nil {
			return tz
		}
	}
	if target, err := os.Readlink("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(target, "zoneinfo/"); ok {
			if _, err := time.LoadLocation(name); err == nil {
				return name
			}
		}
	}
	return "UTC"
}

// openLedger opens the daily budget database in the state dir when the
// config sets any budget; nil otherwise (unlimited, and the broker's hot
// path pays nothing).
func openLedger(cfg *config.Config, onSettle func(budget.Kind, int64)) (*budget.Ledger, error) {
	if !cfg.Budgets.Set() {
		return nil, nil
	}
	l, err := budget.Open(filepath.Join(cfg.StateDir, budget.FileName), budgetConfig(cfg.Budgets))
	if err != nil {
		return nil, fmt.Errorf("budgets: %w", err)
	}
	l.OnSettle = onSettle
	return l, nil
}

func budgetConfig(b config.Budgets) budget.Config {
	lim := func(l config.BudgetLimits) budget.Limits {
		return budget.Limits{Calls: l.Calls, Tokens: l.Tokens, Seconds: l.Seconds}
	}
	return budget.Config{PerSpeaker: lim(b.PerSpeaker), PerChannel: lim(b.PerChannel), PerInstallation: lim(b.PerInstallation)}
}

func closeLedger(l *budget.Ledger) {
	if l != nil {
		l.Close()
	}
}

// usageLine is the router's Usage: today's usage of a channel for the
// owner's status command; nil without budgets. A ledger failure is logged
// and shows nothing.
func (s *sealedRuntime) usageLine(log *slog.Logger) func(context.Context, rtsandbox.ChannelKey) string {
	if s.ledger == nil {
		return nil
	}
	return func(ctx context.Context, ch rtsandbox.ChannelKey) string {
		rep, err := s.ledger.ChannelReport(ctx, ch)
		if err != nil {
			log.Error("budget usage unreadable", "channel", string(ch), "err", err)
			return ""
		}
		return rep.String()
	}
}

// usageReport is the HTTP API's Usage; nil without budgets.
func (s *sealedRuntime) usageReport() func(context.Context, rtsandbox.ChannelKey) (any, error) {
	if s.ledger == nil {
		return nil
	}
	return func(ctx context.Context, ch rtsandbox.ChannelKey) (any, error) {
		return s.ledger.ChannelReport(ctx, ch)
	}
}
