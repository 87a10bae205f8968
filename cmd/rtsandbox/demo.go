package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// demoStoppedText explains a demo that stopped because its output went
// away (`rtsandbox demo | head -1`).
const demoStoppedText = "rtsandbox demo: stopped, its output was closed; the turns' containers were removed"

// runDemo shows the main job on a fresh machine with Docker and no API
// key: a scripted stand-in model on loopback, the worker image (built if
// missing) and two sealed turns in one channel, each phase timed. When
// stdout is closed the demo cancels its turns, removes what it started
// and exits 1 with one line on stderr.
func runDemo(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox demo", stderr)
	tag := fs.String("image", config.DefaultImage, "worker image; built when missing")
	user := fs.String("user", "", `worker "UID:GID" (default: yours; 65534:65534 when you are root)`)
	logFormat := cli.LogFormatFlag(fs, cli.LogText)
	if code, ok := cli.ParseFlags(fs, args, stderr); !ok {
		return code
	}
	uid, gid, err := demoUser(*user)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox demo", exitUsage, err)
	}
	log, err := cli.NewLogger(stderr, *logFormat, getenv, slog.LevelWarn)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox demo", exitUsage, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := cli.NewStopWriter(stdout, cancel)
	err = demo(ctx, out, log, *tag, uid, gid)
	switch {
	case out.Failed() != nil:
		fmt.Fprintln(stderr, demoStoppedText)
		log.Debug("demo output failed", "err", out.Failed(), "demo_err", err)
		return exitFail
	case err != nil:
		return cli.Fail(stderr, "rtsandbox demo", exitFail, err)
	}
	return exitOK
}

func demoUser(spec string) (int, int, error) {
	if spec == "" {
		if os.Geteuid() == 0 {
			return 65534, 65534, nil
		}
		return os.Geteuid(), os.Getegid(), nil
	}
	uid, gid, err := config.ParseUser(spec)
	if err != nil {
		return 0, 0, fmt.Errorf("--user: %w", err)
	}
	return uid, gid, nil
}

// demo runs the conversation of host.Demo against the scripted stand-in.
func demo(ctx context.Context, out io.Writer, log *slog.Logger, tag string, uid, gid int) error {
	const key = "demo-stand-in-key"
	model := fakemodel.NewWithOptions(fakemodel.Options{Key: key, Loop: true}, fakemodel.MemoryDemo())
	defer model.Close()
	fmt.Fprintf(out, "rtsandbox demo\nmodel: a SCRIPTED STAND-IN on %s, not a real LLM (no API key needed)\n", model.URL())
	return host.Demo(ctx, out, log, host.DemoOptions{ModelURL: model.ChatURL(), Key: key, Image: tag, UID: uid, GID: gid})
}
