package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/router"
)

// errNoDiscord is what a build without the Discord surface answers to a
// config with a discord: section.
var errNoDiscord = errors.New("discord surface not available in this build")

// startDiscord connects the Discord surface to r and returns the function
// that disconnects it. PLACEHOLDER: the Discord surface (surface/discord)
// replaces this body; until then a discord: section stops serve at startup.
func startDiscord(ctx context.Context, cfg *config.Config, r *router.Router, getenv env, log *slog.Logger) (stop func(), err error) {
	return nil, errNoDiscord
}
