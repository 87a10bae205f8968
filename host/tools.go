package host

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/hosttool"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// BrokerConfig wires a config file into a broker configuration. Credentials
// are environment variables read on every call and never stored. MCP tools
// written as bare names are completed from their server's tool list, under
// ctx (mcp.go); a config without them makes no network call.
func BrokerConfig(ctx context.Context, cfg *config.Config, getenv env, client *upstream.Client, log *slog.Logger) (broker.Config, error) {
	if client == nil {
		client = upstream.New(nil)
	}
	modelKey := cfg.Model.APIKeyEnv
	bc := broker.Config{
		ModelURL:        cfg.Model.URL,
		Model:           cfg.Model.Name,
		API:             cfg.Model.API,
		Stream:          cfg.Model.Stream,
		Thinking:        cfg.Model.Thinking,
		MaxOutputTokens: cfg.Model.MaxOutputTokens,
		APIKey: func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
			return modelKey.Secret(getenv)
		},
		Client: client,
		Logger: log,
	}
	for _, t := range cfg.Tools {
		tool, err := hostTool(t, getenv, client)
		if err != nil {
			return broker.Config{}, err
		}
		bc.Tools = append(bc.Tools, tool)
	}
	mcp, err := mcpServers(ctx, cfg.MCP, getenv, client)
	if err != nil {
		return broker.Config{}, err
	}
	bc.MCP = mcp
	return bc, nil
}

func hostTool(t config.Tool, getenv env, client *upstream.Client) (broker.Tool, error) {
	switch t.Builtin {
	case "":
		key := t.APIKeyEnv
		return broker.Tool{
			Spec: rtsandbox.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters},
			Impl: &hosttool.Webhook{URL: t.URL, Client: client, Key: func() rtsandbox.Secret {
				return rtsandbox.Secret(key.Lookup(getenv))
			}},
		}, nil
	case config.BuiltinClock:
		spec := hosttool.ClockSpec()
		if t.Description != "" {
			spec.Description = t.Description
		}
		return broker.Tool{Spec: spec, Impl: hosttool.Clock{}}, nil
	}
	return broker.Tool{}, fmt.Errorf("tools: unknown builtin %q", t.Builtin)
}

// envKey returns a getter for an optional credential variable; nil when
// none is configured, so no Authorization header is sent.
func envKey(name config.EnvVar, getenv env) func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
	if name == "" {
		return nil
	}
	return func(context.Context, rtsandbox.Binding) (rtsandbox.Secret, error) {
		return rtsandbox.Secret(name.Lookup(getenv)), nil
	}
}
