package host

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
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/delegate"
	"github.com/rtsandbox/rtsandbox/memstore"
	"github.com/rtsandbox/rtsandbox/sealed"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// SealedRuntime is a sealed runtime wired from a config, with what must be
// closed after it.
type SealedRuntime struct {
	Runtime *sealed.Runtime
	driver  container.OneShot
	// kube is engine: kubernetes, which the session runtime shares; nil
	// on Docker.
	kube *KubeEngine
	// shared are the services both modes use, opened once; the sealed
	// runtime closes them last.
	shared *services
	close  func()
}

// Close ends research jobs, aborts running turns, waits for their
// containers and closes what the runtime opened.
func (s *SealedRuntime) Close() { s.close() }

// RunRootName is the run root's name in the state directory.
const RunRootName = "run"

// SealedOptions are the wiring choices a command may override.
type SealedOptions struct {
	Client  *upstream.Client        // nil: the hardened default
	Driver  container.OneShot       // nil: the local Docker daemon
	OnTurn  func(sealed.TurnStats)  // after the "turn" record (metrics.go)
	Observe func(broker.CallRecord) // the broker's Observe (metrics)
	// OnSettle is told every settled budget amount (metrics); nil is fine.
	OnSettle func(budget.Kind, int64)
	Logger   *slog.Logger
	// Reports receives research reports; nil leaves the research tool
	// out (one-shot commands have no channel to post a later report to).
	Reports delegate.Poster
	// Pool keeps a warm pool of PoolSize(cfg) workers (serve); the
	// runtime fills it once StartPool is called. OnPoolRefill is told
	// each warm worker's start time (metrics); nil is fine.
	Pool         bool
	OnPoolRefill func(time.Duration)
}

// Names in the state directory of the older channel-state layouts that
// the memory database imports once (package memstore).
const (
	ChannelStateDirName = "channel-state" // the previous version's JSON files
	WorkspacesDirName   = "workspaces"    // the per-channel workspaces before them
)

// NewSealedRuntime builds the broker and the sealed runtime of cfg. The
// state directory holds the run root and the memory database (which
// imports, once, the channel state of older versions); it is created 0700
// when missing and must otherwise be private to this user.
func NewSealedRuntime(cfg *config.Config, getenv env, o SealedOptions) (*SealedRuntime, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = upstream.New(nil)
	}
	uid, gid, err := workerUser(cfg)
	if err != nil {
		return nil, err
	}
	svc, err := openServices(cfg, getenv, o)
	if err != nil {
		return nil, err
	}
	s, err := newSealedRuntime(cfg, getenv, o, uid, gid, svc)
	if err != nil {
		svc.close(o.Logger)
		return nil, err
	}
	return s, nil
}

// poolFor is PoolSize(cfg) when the caller keeps a pool, else 0, on
// either engine. On Kubernetes the runtime's warm workers are claimed
// from the engine's agent-sandbox warm pool (kubernetes.pool.sealed, the
// cluster-side supply; a Pod of their own without it) and attached before
// their turn (kubernetes.Sealed.Prestart): a claim then costs what
// Docker's does, where the agent-sandbox claim alone costs a turn about
// 180 ms (docs/kubernetes.md, "The warm pool").
func poolFor(cfg *config.Config, pool bool) int {
	if !pool {
		return 0
	}
	n, _ := PoolSize(cfg)
	return n
}

// openMemory opens the memory database in the state dir, importing the
// older layouts beside it. Startup has no caller context; an import is
// bounded by the files it reads.
func openMemory(cfg *config.Config, log *slog.Logger) (*memstore.Store, error) {
	return memstore.Open(context.Background(), memstore.Options{
		Path:            filepath.Join(cfg.StateDir, memstore.FileName),
		ChannelStateDir: filepath.Join(cfg.StateDir, ChannelStateDirName),
		LegacyRoot:      filepath.Join(cfg.StateDir, WorkspacesDirName),
		Logger:          log,
	})
}

// newSealedRuntime is NewSealedRuntime on the open services, which the
// runtime closes last.
func newSealedRuntime(cfg *config.Config, getenv env, o SealedOptions, uid, gid int, svc *services) (*SealedRuntime, error) {
	// Startup has no caller context here; the one network step (listing
	// MCP tools written as bare names) is bounded by MCPListTimeout.
	bc, err := BrokerConfig(context.Background(), cfg, getenv, o.Client, o.Logger)
	if err != nil {
		return nil, err
	}
	bc.Tools = append(bc.Tools, svc.web.tools...)
	bc.Observe, bc.Intake, bc.Budget = o.Observe, svc.intake, svc.ledger
	b, err := broker.New(bc)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	closeFn := func() {}
	var kube *KubeEngine
	limits := container.Limits{
		MemoryMB: cfg.Sandbox.Limits.MemoryMB, CPUs: cfg.Sandbox.Limits.CPUs,
		PIDs: cfg.Sandbox.Limits.PIDs, WorkspaceMB: cfg.Sandbox.Limits.WorkspaceMB,
	}
	switch {
	case o.Driver != nil:
	case cfg.IsKubernetes():
		spec, err := poolSpec(cfg, uid, gid, limits)
		if err != nil {
			return nil, err
		}
		eng, closeEngine, err := KubernetesEngine(context.Background(), cfg, spec, o.Pool, o.Logger)
		if err != nil {
			return nil, err
		}
		o.Driver, closeFn, kube = eng.Sealed, closeEngine, eng
	default:
		d, closeClient, err := DockerDriver(o.Logger)
		if err != nil {
			return nil, err
		}
		o.Driver, closeFn = d, closeClient
	}
	rt, err := sealed.New(sealed.Options{
		Broker: b, Driver: o.Driver, Image: ImageTag(cfg), UID: uid, GID: gid,
		RunRoot: filepath.Join(cfg.StateDir, RunRootName), State: svc.memory,
		Model: cfg.Model.Name, Prompt: cfg.Sandbox.Prompt, TimeZone: TimeZone(cfg, getenv),
		TurnTimeout: cfg.Sandbox.TurnTimeout,
		ModelAPI:    cfg.Model.API, ModelStream: cfg.Model.Stream, Thinking: string(cfg.Model.Thinking),
		MaxTurns: cfg.Sandbox.MaxTurns, MaxQueueWait: cfg.Sandbox.MaxQueueWait,
		Limits:       limits,
		Installation: InstallationID(cfg), Logger: o.Logger, OnTurn: logTurn(o.Logger, o.OnTurn),
		Budget: svc.ledger, ProfileFor: profileName(cfg), Runtime: cfg.SealedRuntime(),
		PoolSize: poolFor(cfg, o.Pool), OnPoolRefill: o.OnPoolRefill,
	})
	if err != nil {
		closeFn()
		return nil, err // sandbox errors name the sandbox already
	}
	return &SealedRuntime{Runtime: rt, driver: o.Driver, kube: kube, shared: svc, close: func() {
		rt.Close(context.Background())
		closeFn()
		svc.close(o.Logger)
	}}, nil
}

// errRootUser refuses a root host without sandbox.user: the worker is never
// root, and guessing another user could hand a workspace to a stranger.
var errRootUser = errors.New("sandbox.user: required when rtsandbox runs as root; name a non-root \"UID:GID\" for the worker")

// workerUser is the worker user of both modes: sandbox.user when set,
// else the host's own ids; a host running as root must set it.
func workerUser(cfg *config.Config) (int, int, error) {
	return workerUserOf(cfg, os.Geteuid(), os.Getegid())
}

func workerUserOf(cfg *config.Config, euid, egid int) (int, int, error) {
	if cfg.Sandbox.UID > 0 {
		return cfg.Sandbox.UID, cfg.Sandbox.GID, nil
	}
	if euid == 0 {
		return 0, 0, errRootUser
	}
	return euid, egid, nil
}

// TimeZone is sandbox.time_zone, else the host's IANA zone (TZ, then the
// /etc/localtime link), else UTC.
func TimeZone(cfg *config.Config, getenv env) string {
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
func openLedger(cfg *config.Config, onSettle func(budget.Kind, int64), log *slog.Logger) (*budget.Ledger, error) {
	if !cfg.Budgets.Set() {
		return nil, nil
	}
	bc := budgetConfig(cfg.Budgets)
	bc.Logger = log
	l, err := budget.Open(filepath.Join(cfg.StateDir, budget.FileName), bc)
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
	policy := budget.Deny
	if b.OnStoreError == config.StoreAllow {
		policy = budget.Allow
	}
	return budget.Config{PerSpeaker: lim(b.PerSpeaker), PerChannel: lim(b.PerChannel), PerInstallation: lim(b.PerInstallation),
		OnStoreError: policy}
}

func closeLedger(l *budget.Ledger) {
	if l != nil {
		l.Close()
	}
}

// decodeIntake is the host's budget of request bodies being decoded:
// rtsandbox.DecodeBudget of host.memory_limit_mb, so that however many
// channels send large bodies at once, decoding them holds at most that
// (broker.Intake).
func decodeIntake(cfg *config.Config) *broker.Intake {
	return broker.NewIntake(rtsandbox.DecodeBudget(int64(cfg.Host.MemoryLimitMB) << 20))
}
