package host

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/delegate"
	"github.com/rtsandbox/rtsandbox/hosttool"
	"github.com/rtsandbox/rtsandbox/research"
	"github.com/rtsandbox/rtsandbox/safefetch"
	"github.com/rtsandbox/rtsandbox/search"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/webpage"
)

// delegateTarget is the one delegation target: research for the guests
// of a sandboxed channel.
const delegateTarget = "guest"

// webTools are the host tools of the web: section and what must be shut
// down with them.
type webTools struct {
	tools     []broker.Tool
	delegator *delegate.Delegator // nil when research is off
}

// dispose cancels running research jobs; each still posts its "ran out of
// time" outcome, so it must run while the poster can post.
func (w *webTools) dispose(ctx context.Context) error {
	if w == nil || w.delegator == nil {
		return nil
	}
	return w.delegator.Dispose(ctx)
}

// newWebTools builds web_fetch and the research tool from cfg.Web.
// Research reports are posted through poster, which may be bound after
// construction (serve builds its router after the runtime).
func newWebTools(cfg *config.Config, getenv env, client *upstream.Client, log *slog.Logger, poster delegate.Poster) (*webTools, error) {
	w := &webTools{}
	if cfg.Web.Fetch.Enabled {
		opts := safefetch.DefaultOptions()
		opts.MaxBytes, opts.Timeout = cfg.Web.Fetch.MaxBytes, cfg.Web.Fetch.Timeout
		w.tools = append(w.tools, broker.Tool{Spec: hosttool.WebFetchSpec(), Impl: &hosttool.WebFetch{Options: opts, Logger: log}})
	}
	if !cfg.Web.Research.Enabled {
		return w, nil
	}
	if poster == nil {
		// One-shot commands (turn, demo) have no channel to post a later
		// report to: the tool is left out rather than failing every job.
		log.Warn("web.research is enabled but this command has no chat surface for reports; the research tool is off here")
		return w, nil
	}
	worker, err := newResearchWorker(cfg, getenv, client, log)
	if err != nil {
		return nil, err
	}
	w.delegator, err = delegate.New(delegate.Options{
		Target: delegateTarget, MaxRunning: cfg.Web.Research.MaxRunningPerChannel, Timeout: cfg.Web.Research.Timeout,
		Run: func(ctx context.Context, task string, _ delegate.RunContext) (string, error) {
			return worker.Run(ctx, task)
		},
		Deliver: delegate.PostOutcome(poster),
		Logger:  log,
	})
	if err != nil {
		return nil, fmt.Errorf("web.research: %w", err)
	}
	w.tools = append(w.tools, broker.Tool{Spec: delegate.ToolSpec(),
		Impl: &delegate.Tool{Delegator: w.delegator, Target: delegateTarget}})
	return w, nil
}

// newResearchWorker runs research on the configured model endpoint with
// the host's key; nothing of it enters a container.
func newResearchWorker(cfg *config.Config, getenv env, client *upstream.Client, log *slog.Logger) (*research.Worker, error) {
	s := cfg.Web.Search
	backend, err := search.New(search.Config{Provider: s.Provider, URL: s.URL, Client: client,
		Key: func() rtsandbox.Secret { return rtsandbox.Secret(s.APIKeyEnv.Lookup(getenv)) }})
	if err != nil {
		return nil, fmt.Errorf("web.search: %w", err)
	}
	modelKey := cfg.Model.APIKeyEnv
	worker, err := research.New(research.Options{
		ModelURL: cfg.Model.URL, Model: cfg.Web.Research.Model, Client: client,
		APIKey: func(context.Context) (rtsandbox.Secret, error) { return modelKey.Secret(getenv) },
		Search: backend, Extract: webpage.Extract, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("web.research: %w", err)
	}
	return worker, nil
}
