// Operator commands around the container engine: `image build` and `reap`.

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/workerimage"
)

// imageUsage is `rtsandbox image -h`.
const imageUsage = "usage: rtsandbox image build [--config FILE] [--tag TAG]\n\nrtsandbox image build -h shows the flags."

// runImage dispatches `rtsandbox image <subcommand>`; build is the only one.
func runImage(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && cli.WantsHelp(args[:1]):
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
	fs := cli.NewFlagSet("rtsandbox image build", stderr)
	configPath := fs.String("config", "", "config file; its sandbox.image is the default tag")
	tag := fs.String("tag", "", "image tag; replaces any image under it (default: sandbox.image of --config, which must name an image rtsandbox built or none, else "+config.DefaultImage+")")
	code, ok := cli.ParseFlags(fs, args, stderr)
	if !ok {
		return code
	}
	cfg, code, ok := loadOptionalConfig(*configPath, stderr, "rtsandbox image build")
	if !ok {
		return code
	}
	// A tag named here may replace any image: that is what the operator
	// asked for. One taken from sandbox.image is held to serve's rule: an
	// image rtsandbox did not build is refused, so a typo in the config
	// never replaces the operator's image.
	key := ""
	if *tag == "" {
		*tag, key = host.ImageTag(cfg), host.ImageKey
	}
	r, err := host.BuildImage(ctx, *tag, key)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox image build", exitFail, err)
	}
	fmt.Fprintf(stdout, "built %s\nworker: %s\nelapsed: %s\n", *tag, r.Source, r.Took.Round(time.Millisecond))
	if r.State == workerimage.Foreign {
		fmt.Fprintf(stdout, "replaced: %s held an image rtsandbox had not built (no %s label)\n", *tag, workerimage.LabelWorkerSHA256)
	}
	if msg := r.PruneText(); msg != "" {
		fmt.Fprintln(stdout, msg)
	}
	return exitOK
}

// runReap force-removes the turn containers this installation left behind
// (after a crash or a kill -9) and its session containers (which outlive
// serve on purpose), and reports how many it removed.
func runReap(ctx context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox reap", stderr)
	configPath := fs.String("config", "", "config file; its state_dir identifies the installation (required)")
	code, ok := cli.ParseFlags(fs, args, stderr)
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
	err := host.Reap(ctx, cfg, host.SessionMode(nil), func(removed int, id string) {
		fmt.Fprintf(stdout, "removed %d leftover container(s) of installation %s\n", removed, id)
	}, func(removed int, id string) {
		fmt.Fprintf(stdout, "removed %d session container(s) of installation %s\n", removed, id)
	})
	if err != nil {
		return cli.Fail(stderr, "rtsandbox reap", exitFail, err)
	}
	// After the containers: an image only they used is free now. Only
	// images a minute old: a build that made one has tagged it by then.
	pruned, err := host.PruneWorkerImages(ctx, time.Now().Add(-host.PruneMinAge))
	if len(pruned) > 0 {
		fmt.Fprintln(stdout, host.PrunedText(pruned))
	}
	if err != nil {
		return cli.Fail(stderr, "rtsandbox reap", exitFail, fmt.Errorf("old worker images: %w", err))
	}
	return exitOK
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

// runRepair is `rtsandbox repair --config FILE`: with serve stopped, a
// damaged memory or usage database is moved aside (kept, named) so that
// the next start begins a fresh one (host.Repair, docs/operations.md).
func runRepair(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	st := newSetup("rtsandbox repair", stderr, "")
	cfg, _, code, ok := st.Load(args, getenv, stderr, nil, 0)
	if !ok {
		return code
	}
	if err := host.Repair(ctx, cfg, stdout, time.Now()); err != nil {
		return cli.Fail(stderr, "rtsandbox repair", exitFail, err)
	}
	return exitOK
}
