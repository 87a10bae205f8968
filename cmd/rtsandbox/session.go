// Session mode's wiring: the one place this binary says how the session
// runtime (serve) and the offline session-container remover (reap,
// channels off) are built from their parts: package session's runtime on
// the Docker session driver, with one broker.Session per channel built
// from the profile's broker configuration.

package main

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/delegate"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/session"
)

// sessions builds session mode for the host.
func sessions() host.Sessions {
	return host.Sessions{Runtime: sessionRuntime, Containers: sessionContainers}
}

// sessionRuntime builds serve's session runtime from what the host opened.
func sessionRuntime(_ context.Context, d host.SessionDeps) (host.SessionRuntime, error) {
	cfg := d.Config
	image := host.ImageTag(cfg)
	lim := container.SessionLimits{MemoryMB: cfg.Session.Limits.MemoryMB, CPUs: cfg.Session.Limits.CPUs, PIDs: cfg.Session.Limits.PIDs}
	profiles := map[string]session.Profile{}
	for name := range d.Brokers {
		profiles[name] = session.Profile{Limits: lim}
	}
	newBroker := func(profile, socket string) (session.Broker, error) {
		return sessionBroker(d, cfg, image, profile, socket)
	}
	rt, err := session.New(session.Options{
		Driver:       docker.NewSession(d.Engine),
		NewBroker:    newBroker,
		Profiles:     profiles,
		ProfileFor:   d.ProfileFor,
		PartyDir:     cfg.Session.PartyDir,
		Image:        image,
		Installation: d.Installation,
		UID:          d.UID,
		GID:          d.GID,
		TimeZone:     d.TimeZone,
		Log:          container.LogConfig{Driver: cfg.Session.LogDriver, Options: cfg.Session.LogOptions},
		TurnTimeout:  cfg.Session.TurnTimeout,
		StartTimeout: cfg.Session.StartTimeout,
		Scrub:        func(s string) string { return delegate.ScrubDiagnostic(s, delegate.NoLimit) },
		Logger:       d.Logger,
	})
	if err != nil {
		return nil, err
	}
	return sessionStatus{rt}, nil
}

// sessionBroker makes the broker of one channel of profile, listening on
// socket: the profile's checked broker configuration, the session budget,
// and the worker's profile as GET /worker/config answers it.
func sessionBroker(d host.SessionDeps, cfg *config.Config, image, profile, socket string) (session.Broker, error) {
	bc, ok := d.Brokers[profile]
	if !ok {
		return nil, fmt.Errorf("profiles.%s: %w: not a session profile in use", profile, rtsandbox.ErrInvalid)
	}
	b, err := broker.New(bc)
	if err != nil {
		return nil, fmt.Errorf("profiles.%s: %w", profile, err)
	}
	tools, mcp := b.Declarations()
	s, err := broker.NewSession(broker.SessionConfig{
		Broker:      b,
		WorkerImage: image,
		MaxCalls:    cfg.Session.MaxCalls,
		Worker: rtsandbox.SessionWorkerConfig{
			ModelAPI: bc.API, Model: bc.Model, Stream: bc.Stream,
			Prompt: cfg.Sandbox.Prompt, TimeZone: d.TimeZone, Tools: tools, MCP: mcp,
		},
	})
	if err != nil {
		return nil, err
	}
	if err := s.Listen(socket); err != nil {
		return nil, err
	}
	return s, nil
}

// sessionStatus gives the session runtime the status shape the router
// shows.
type sessionStatus struct{ *session.Runtime }

func (s sessionStatus) Status(ctx context.Context, ch rtsandbox.ChannelKey) (router.RuntimeStatus, error) {
	st, err := s.Runtime.Status(ctx, ch)
	return router.RuntimeStatus{Mode: st.Mode, Profile: st.Profile, Container: st.Container}, err
}

// sessionContainers removes this installation's session containers while
// no serve runs.
func sessionContainers(cfg *config.Config, engine *client.Client) (host.SessionContainers, error) {
	return offlineSessions{d: docker.NewSession(engine), installation: host.InstallationID(cfg)}, nil
}

type offlineSessions struct {
	d            *docker.SessionDriver
	installation string
}

func (o offlineSessions) Remove(ctx context.Context, ch rtsandbox.ChannelKey) error {
	return o.d.Remove(ctx, container.SessionName(o.installation, string(ch)))
}

func (o offlineSessions) RemoveAll(ctx context.Context) (int, error) {
	return o.d.ReapSessions(ctx, o.installation)
}
