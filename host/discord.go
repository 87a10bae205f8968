package host

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gorilla/websocket"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/discord"
)

// DiscordNet is how the surface reaches Discord; the zero value is the real
// service. Tests point it at an in-process fake.
type DiscordNet struct {
	Client *http.Client
	Dialer *websocket.Dialer
}

// startDiscord connects the Discord surface to r and returns the function
// that disconnects it. The bot token is read from its variable when the
// surface connects.
func startDiscord(ctx context.Context, cfg *config.Config, r *router.Router, getenv env, log *slog.Logger, dn DiscordNet) (stop func(), err error) {
	d := cfg.Discord
	warnPreview(log, "discord.preview", d.Preview, cfg)
	s, err := discord.New(discord.Options{
		Token:       func() rtsandbox.Secret { return rtsandbox.Secret(d.TokenEnv.Lookup(getenv)) },
		RootCommand: d.RootCommand, Router: r, Logger: log.With("surface", "discord"),
		HTTPClient: dn.Client, Dialer: dn.Dialer, Preview: d.Preview,
		MaxUploadBytes: int64(d.MaxUploadMB) << 20,
	})
	if err != nil {
		return nil, err
	}
	if err := r.AddSurface(discord.Prefix, s); err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return func() { s.Close() }, nil
}

// warnPreview tells the operator that a surface's previews (key) cannot
// show anything while the model's answers are not streamed.
func warnPreview(log *slog.Logger, key string, on bool, cfg *config.Config) {
	if on && !cfg.Model.Stream {
		log.Warn(key+" is on but model.stream is off: no answer streams, so there is nothing to preview", "key", key)
	}
}
