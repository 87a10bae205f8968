package host

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/channels"
	"github.com/rtsandbox/rtsandbox/container/kubernetes"
	"github.com/rtsandbox/rtsandbox/router"
)

// startKubeRuntime is startRuntime for engine: kubernetes: the sealed
// runtime on the Kubernetes engine (KubernetesEngine: its broker listener,
// the workers' NetworkPolicy, the warm pool), the reap of what a crash
// left at start, a periodic reap that spares the turns under way and the
// pool's idle workers, the session runtime when a profile uses session
// mode (the channels' Pods on the same listener and client), and the
// router.
func (h *Host) startKubeRuntime(ctx context.Context, getenv env, sessions Sessions, m *hostMetrics, store *channels.Store) error {
	cfg, log := h.cfg, h.log
	id := InstallationID(cfg)
	reports := newReportPipe()
	s, err := NewSealedRuntime(cfg, getenv, SealedOptions{Logger: log.With("plugin", "sandbox"), Reports: reports,
		OnTurn: m.onTurn(), Observe: m.observe(), OnSettle: m.onSettle(), Pool: true, OnPoolRefill: m.onPoolRefill()})
	if err != nil {
		return err
	}
	eng := s.driver.(*kubernetes.Sealed)
	reaper := func(ctx context.Context) func() { return reapEvery(ctx, eng, id, cfg.Sandbox.ReapInterval, log) }
	if err := h.serveSealed(ctx, s, eng, reaper, "pods and claims", m); err != nil {
		return err
	}
	// Registered after the sealed runtime's closer, so it runs before it
	// (while the listener still serves): brokers stop, the channels'
	// Pods stay for the next start.
	deps, err := sessionDeps(ctx, cfg, getenv, log.With("plugin", "session"), nil, s.shared, m.observe())
	if err != nil {
		return err
	}
	deps.Kube = s.kube
	deps.OnTurn, deps.WatchActive = m.onSessionTurn(), m.watchSessions()
	sess, err := h.startSessions(ctx, sessions, deps)
	if err != nil {
		return err
	}
	h.web, h.ready, h.usage = s.shared.web, engineReady(eng), s.shared.usageReport()
	policy, err := access.New(cfg.Access)
	if err != nil {
		return fmt.Errorf("access: %w", err)
	}
	mux := newRuntimeMux(cfg, s.Runtime, sess)
	mux.budget = turnBudget{ledger: s.shared.ledger, timeout: cfg.Session.TurnTimeout, log: log}
	h.router, err = router.New(router.Options{Channels: store, Runtime: mux, Access: policy, Logger: log,
		OnDrop: m.onDrop(), Usage: s.shared.usageLine(log), Door: newDoor(cfg, getenv), OnDoor: m.onDoor(), InFlight: h.inFlight})
	if err != nil {
		return err
	}
	stopPipe := reports.pipe(h.router)
	h.closers = append(h.closers, func() error { stopPipe(); return nil })
	return nil
}

// reapEvery reaps eng every interval until stopped (the engine spares the
// turns under way), logging what it removed.
func reapEvery(ctx context.Context, eng *kubernetes.Sealed, id string, interval time.Duration, log *slog.Logger) (stop func()) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if err := reap(rctx, eng, id, reapTimeout, log, "orphan pods and claims removed"); err != nil && rctx.Err() == nil {
					log.Warn("periodic reap failed", "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
