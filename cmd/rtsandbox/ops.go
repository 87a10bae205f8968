// Operator commands around the container engine: `image build` and `reap`.

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/client"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/container/docker"
	"github.com/rtsandbox/rtsandbox/sandbox"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// imageBuildTimeout caps `image build`; compiling the worker from source
// and the daemon's build together take seconds, not minutes.
const imageBuildTimeout = 10 * time.Minute

// imageUsage is `rtsandbox image -h`.
const imageUsage = "usage: rtsandbox image build [--config FILE] [--tag TAG]\n\nrtsandbox image build -h shows the flags."

// runImage dispatches `rtsandbox image <subcommand>`; build is the only one.
func runImage(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && wantsHelp(args[:1]):
		fmt.Fprintln(stdout, imageUsage)
		return exitOK
	case len(args) == 0:
		fmt.Fprintf(stderr, "rtsandbox image: a subcommand is required\n%s\n", imageUsage)
		return exitUsage
	case args[0] != "build":
		fmt.Fprintf(stderr, "rtsandbox image: unknown subcommand %q\n%s\n", args[0], imageUsage)
		return exitUsage
	}
	return runImageBuild(ctx, args[1:], getenv, stdin, stdout, stderr)
}

// runImageBuild builds (or rebuilds) the worker image on the local daemon
// and reports the tag, where the worker binary came from and how long it
// took.
func runImageBuild(ctx context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("rtsandbox image build", stderr)
	configPath := fs.String("config", "", "config file; its sandbox.image is the default tag")
	tag := fs.String("tag", "", "image tag (default: sandbox.image of --config, else "+config.DefaultImage+")")
	code, ok := parseOpsFlags(fs, args, stderr)
	if !ok {
		return code
	}
	cfg, code, ok := loadOptionalConfig(*configPath, stderr, "rtsandbox image build")
	if !ok {
		return code
	}
	if *tag == "" {
		*tag = imageTag(cfg)
	}
	d, closeClient, err := dockerDriver(nil)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox image build:", err)
		return exitFail
	}
	defer closeClient()
	ctx, cancel := context.WithTimeout(ctx, imageBuildTimeout)
	defer cancel()
	began := time.Now()
	source, err := workerimage.Build(ctx, d, *tag)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox image build:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "built %s\nworker: %s\nelapsed: %s\n", *tag, source, time.Since(began).Round(time.Millisecond))
	return exitOK
}

// runReap force-removes the turn containers this installation left behind
// (after a crash or a kill -9) and reports how many it removed.
func runReap(ctx context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("rtsandbox reap", stderr)
	configPath := fs.String("config", "", "config file; its state_dir identifies the installation (required)")
	code, ok := parseOpsFlags(fs, args, stderr)
	if !ok {
		return code
	}
	if *configPath == "" {
		// Without state_dir there is no installation id, and reaping
		// another installation's containers would break its turns.
		fmt.Fprintln(stderr, "rtsandbox reap: --config is required: its state_dir identifies this installation")
		return exitUsage
	}
	cfg, code, ok := loadOptionalConfig(*configPath, stderr, "rtsandbox reap")
	if !ok {
		return code
	}
	id := installationID(cfg)
	// A running serve, turn or chat holds the run root's lock and owns the
	// containers of its live turns: reaping them would kill those turns.
	unlock, err := lockRunRoot(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox reap:", err)
		return exitFail
	}
	defer unlock()
	d, closeClient, err := dockerDriver(nil)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox reap:", err)
		return exitFail
	}
	defer closeClient()
	removed, err := d.Reap(ctx, id)
	fmt.Fprintf(stdout, "removed %d leftover container(s) of installation %s\n", removed, id)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox reap:", err)
		return exitFail
	}
	return exitOK
}

// lockRunRoot takes the lock that a live sealed runtime holds on
// <state_dir>/run for as long as it runs. No run root means no runtime ever
// ran here.
func lockRunRoot(cfg *config.Config) (unlock func(), err error) {
	root := filepath.Join(cfg.StateDir, runRootName)
	if _, err := os.Lstat(root); errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	f, err := sandbox.LockRunRoot(root)
	if errors.Is(err, sandbox.ErrRunRootBusy) {
		return nil, fmt.Errorf("state_dir %s is in use by a running rtsandbox (serve, turn or chat); it removes its own leftovers, so reap only after it stopped", cfg.StateDir)
	}
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// parseOpsFlags parses flags that take no positional arguments. ok is
// false when the command should return code at once: help (the flag set
// printed it) or misuse (the flag set, or this, named the flag or
// argument at fault).
func parseOpsFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	if err == nil {
		err = noArgs(fs)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		}
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK, false
	case err != nil:
		return exitUsage, false
	}
	return exitOK, true
}

// loadOptionalConfig loads path, or returns a nil config when path is "".
func loadOptionalConfig(path string, stderr io.Writer, name string) (*config.Config, int, bool) {
	if path == "" {
		return nil, exitOK, true
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, exitUsage, false
	}
	return cfg, exitOK, true
}

// imageTag is the configured worker image, or the default without a config.
func imageTag(cfg *config.Config) string {
	if cfg != nil && cfg.Sandbox.Image != "" {
		return cfg.Sandbox.Image
	}
	return config.DefaultImage
}

// installationID names this installation in container labels: "i" and the
// first 12 hex digits of the SHA-256 of the absolute state directory. Two
// installations on one daemon differ by state directory, so each reaps
// only its own containers; the hash keeps paths out of labels and within
// container.ValidInstallation.
func installationID(cfg *config.Config) string {
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil { // only when the working directory is gone; StateDir is absolute already
		dir = filepath.Clean(cfg.StateDir)
	}
	sum := sha256.Sum256([]byte(dir))
	return "i" + hex.EncodeToString(sum[:])[:12]
}

// dockerDriver connects to the Engine the environment names (DOCKER_HOST,
// else the local socket). Its closer lets removals still queued in the
// driver's background finish (within stopTimeout; the log names what is
// left for the next reap), then closes the client.
func dockerDriver(log *slog.Logger) (*docker.Driver, func(), error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, nil, fmt.Errorf("docker client: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := docker.New(cli, docker.WithLogger(log.With("component", "docker")))
	return d, func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			log.Warn("container removals still queued at exit; the next reap removes them", "err", err)
		}
		cli.Close()
	}, nil
}
