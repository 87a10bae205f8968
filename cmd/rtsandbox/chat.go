package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
)

// runChat is a terminal chat in console:local as the current user (its
// owner), each line a sealed turn (host.Chat).
func runChat(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	const name = "rtsandbox chat"
	cfg, log, code, ok := newSetup(name, stderr, cli.LogText).Load(args, getenv, stderr, stderr, slog.LevelWarn)
	if !ok {
		return code
	}
	say := func(msg string) { fmt.Fprintln(stderr, name+":", msg) }
	switch err := host.Chat(ctx, cfg, getenv, log, host.ChatOptions{In: stdin, Out: stdout, Say: say}); {
	case errors.Is(err, host.ErrSetup):
		return cli.Fail(stderr, name, exitUsage, err)
	case err != nil:
		return cli.Fail(stderr, name, exitFail, err)
	}
	return exitOK
}
