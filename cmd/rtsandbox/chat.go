package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
)

// runChat is a terminal chat in console:local as the current user (its
// owner), each line a sealed turn (host.Chat).
func runChat(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	const name = "rtsandbox chat"
	fs := cli.NewFlagSet(name, stderr)
	configPath := fs.String("config", "", "config file (required)")
	logFormat := cli.LogFormatFlag(fs, cli.LogText)
	if code, ok := cli.ParseFlags(fs, args, stderr); !ok {
		return code
	}
	if err := cli.MissingFlag(fs, "config"); err != nil {
		return cli.Fail(stderr, name, exitUsage, err)
	}
	log, err := cli.NewLogger(stderr, *logFormat, getenv, slog.LevelWarn)
	if err != nil {
		return cli.Fail(stderr, name, exitUsage, err)
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return cli.Fail(stderr, name, exitUsage, err)
	}
	say := func(msg string) { fmt.Fprintln(stderr, name+":", msg) }
	if err := host.Chat(ctx, cfg, getenv, log, host.ChatOptions{In: stdin, Out: stdout, Say: say}); err != nil {
		return cli.Fail(stderr, name, exitFail, err)
	}
	return exitOK
}
