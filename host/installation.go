package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/moby/moby/client"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/sealed"
)

// LockRunRoot takes the lock that a live sealed runtime holds on
// <state_dir>/run for as long as it runs. No run root means no runtime ever
// ran here.
func LockRunRoot(cfg *config.Config) (unlock func(), err error) {
	root := filepath.Join(cfg.StateDir, RunRootName)
	if _, err := os.Lstat(root); errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	f, err := sealed.LockRunRoot(root)
	if errors.Is(err, sealed.ErrRunRootBusy) {
		return nil, fmt.Errorf("state_dir %s is in use by a running rtsandbox (serve, turn or chat); it removes its own leftovers, so reap only after it stopped", cfg.StateDir)
	}
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// ImageTag is the configured worker image, or the default without a config.
func ImageTag(cfg *config.Config) string {
	if cfg != nil && cfg.Sandbox.Image != "" {
		return cfg.Sandbox.Image
	}
	return config.DefaultImage
}

// InstallationID names this installation in container labels: "i" and the
// first 12 hex digits of the SHA-256 of the absolute state directory. Two
// installations on one daemon differ by state directory, so each reaps
// only its own containers; the hash keeps paths out of labels and within
// container.ValidInstallation.
func InstallationID(cfg *config.Config) string {
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil { // only when the working directory is gone; StateDir is absolute already
		dir = filepath.Clean(cfg.StateDir)
	}
	sum := sha256.Sum256([]byte(dir))
	return "i" + hex.EncodeToString(sum[:])[:12]
}

// DockerDriver connects to the Engine the environment names (DOCKER_HOST,
// else the local socket). Its closer lets removals still queued in the
// driver's background finish (within StopTimeout; the log names what is
// left for the next reap), then closes the client.
func DockerDriver(log *slog.Logger) (*docker.Driver, func(), error) {
	d, _, closeClient, err := dockerClient(log)
	return d, closeClient, err
}

// dockerClient is DockerDriver that also returns the client, for the
// session runtime and its offline remover, which share it.
func dockerClient(log *slog.Logger) (*docker.Driver, *client.Client, func(), error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("docker client: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := docker.New(cli, docker.WithLogger(log.With("component", "docker")))
	return d, cli, func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			log.Warn("container removals still queued at exit; the next reap removes them", "err", err)
		}
		cli.Close()
	}, nil
}

// Reap force-removes the turn containers this installation left behind
// (after a crash or a kill -9) and tells report how many, with the
// installation id. When s can build a session remover, it then removes
// every session container of the installation too (they outlive serve on
// purpose) and tells reportSessions how many.
func Reap(ctx context.Context, cfg *config.Config, s Sessions, report, reportSessions func(removed int, id string)) error {
	id := InstallationID(cfg)
	unlock, err := LockRunRoot(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	var cli *client.Client
	if cfg.IsKubernetes() {
		removed, err := reapKubernetes(ctx, cfg)
		report(removed, id)
		if err != nil {
			return err
		}
	} else {
		d, c, closeClient, err := dockerClient(nil)
		if err != nil {
			return err
		}
		defer closeClient()
		removed, err := d.Reap(ctx, id)
		report(removed, id)
		if err != nil {
			return err
		}
		cli = c
	}
	if s.Containers == nil {
		return nil
	}
	sc, err := s.Containers(cfg, cli)
	if err != nil {
		return fmt.Errorf("session containers: %w", err)
	}
	if sc == nil {
		return nil // the engine has none to look for
	}
	removed, err := sc.RemoveAll(ctx)
	reportSessions(removed, id)
	if err != nil {
		return fmt.Errorf("session containers: %w", err)
	}
	return nil
}

// RemoveSessionContainer removes channel's session container while no
// serve runs (`rtsandbox channels off`), and reports whether it could
// look: false without a session remover in s. A missing container is
// fine.
func RemoveSessionContainer(ctx context.Context, cfg *config.Config, s Sessions, channel rtsandbox.ChannelKey) (bool, error) {
	if s.Containers == nil {
		return false, nil
	}
	var cli *client.Client
	if !cfg.IsKubernetes() {
		_, c, closeClient, err := dockerClient(nil)
		if err != nil {
			return false, err
		}
		defer closeClient()
		cli = c
	}
	sc, err := s.Containers(cfg, cli)
	if err == nil && sc == nil {
		return false, nil // the engine has none to look for
	}
	if err == nil {
		err = sc.Remove(ctx, channel)
	}
	if err != nil {
		return false, fmt.Errorf("session container of %s: %w", channel, err)
	}
	return true, nil
}
