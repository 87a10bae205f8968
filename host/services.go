package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/privdir"
	"github.com/rtsandbox/rtsandbox/memstore"
)

// services are what both modes share, opened once per host from the
// config: the memory database (each channel's memory and the sealed
// mode's history), the daily budget ledger, the budget of request bodies
// being decoded, and the web tools. The sealed runtime and the session
// runtime are each built from them; neither reaches into the other.
type services struct {
	memory *memstore.Store
	// ledger keeps the daily budgets; nil when the config sets none.
	ledger *budget.Ledger
	// intake is the host's budget of request bodies being decoded, which
	// every broker of the host shares, sealed and session.
	intake *broker.Intake
	web    *webTools
}

// openServices makes the state directory (0700 when missing, otherwise it
// must be private to this user) and opens the shared services in it.
func openServices(cfg *config.Config, getenv env, o SealedOptions) (*services, error) {
	if _, err := privdir.Make(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("state_dir: %w (it must be owned by uid %d with mode 0700)", err, os.Geteuid())
	}
	memory, err := openMemory(cfg, o.Logger)
	if err != nil {
		return nil, err
	}
	svc := &services{memory: memory, intake: decodeIntake(cfg)}
	if svc.web, err = newWebTools(cfg, getenv, o.Client, o.Logger, o.Reports); err != nil {
		svc.close(o.Logger)
		return nil, err
	}
	if svc.ledger, err = openLedger(cfg, o.OnSettle, o.Logger); err != nil {
		svc.close(o.Logger)
		return nil, err
	}
	return svc, nil
}

// close ends research jobs (bounded by StopTimeout), then closes the
// ledger and the memory database.
func (svc *services) close(log *slog.Logger) {
	if svc.web != nil {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if err := svc.web.dispose(ctx); err != nil {
			log.Warn("research jobs did not end in time", "err", err)
		}
	}
	closeLedger(svc.ledger)
	if err := svc.memory.Close(); err != nil {
		log.Warn("memory database not closed cleanly", "err", err)
	}
}

// usageLine is the router's Usage: today's usage of a channel for the
// owner's status command; nil without budgets. A ledger failure is logged
// and shows nothing.
func (svc *services) usageLine(log *slog.Logger) func(context.Context, rtsandbox.ChannelKey) string {
	if svc.ledger == nil {
		return nil
	}
	return func(ctx context.Context, ch rtsandbox.ChannelKey) string {
		rep, err := svc.ledger.ChannelReport(ctx, ch)
		if err != nil {
			log.Error("budget usage unreadable", "channel", string(ch), "err", err)
			return ""
		}
		return rep.String()
	}
}

// usageReport is the HTTP API's Usage; nil without budgets.
func (svc *services) usageReport() func(context.Context, rtsandbox.ChannelKey) (any, error) {
	if svc.ledger == nil {
		return nil
	}
	return func(ctx context.Context, ch rtsandbox.ChannelKey) (any, error) {
		return svc.ledger.ChannelReport(ctx, ch)
	}
}
