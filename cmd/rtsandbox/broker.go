package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
)

// parseBrokerFlags parses `rtsandbox broker` flags.
func parseBrokerFlags(args []string, stderr io.Writer) (f cli.BindingFlags, o host.BrokerOptions, logFormat string, err error) {
	fs := cli.NewFlagSet("rtsandbox broker", stderr)
	f.Register(fs, "channel key the turn is bound to, such as http:lobby (required)", true)
	fs.StringVar(&o.Socket, "socket", "", "Unix socket path to create (required)")
	fs.IntVar(&o.MaxCalls, "max-calls", rtsandbox.DefaultMaxCalls, "call budget, 1-1000")
	fs.StringVar(&logFormat, "log-format", cli.LogJSON, "audit record format: json (one JSON object a line) or text (key=value)")
	if err := fs.Parse(args); err != nil {
		return f, o, logFormat, err
	}
	if err := f.Check(fs, "socket"); err != nil {
		return f, o, logFormat, err
	}
	if o.MaxCalls < 1 || o.MaxCalls > rtsandbox.MaxCallsLimit {
		return f, o, logFormat, fmt.Errorf("--max-calls: %d is outside 1-1000", o.MaxCalls)
	}
	o.Channel, o.Speaker = rtsandbox.ChannelKey(f.Channel), f.Speaker
	return f, o, logFormat, nil
}

// runBroker serves one turn's broker on a Unix socket until SIGINT or
// SIGTERM, for running the sealed worker by hand.
func runBroker(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	const name = "rtsandbox broker"
	f, o, logFormat, err := parseBrokerFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return cli.Fail(stderr, name, exitUsage, err)
	}
	log, err := cli.NewLogger(stderr, logFormat, getenv, slog.LevelInfo)
	if err != nil {
		return cli.Fail(stderr, name, exitUsage, err)
	}
	cfg, err := config.Load(f.Config)
	if err != nil {
		return cli.Fail(stderr, name, exitUsage, err)
	}
	o.Announce = func(s string) { fmt.Fprintln(stdout, "rtsandbox broker "+s) }
	if err := host.ServeBroker(ctx, cfg, getenv, log, o); err != nil {
		code := exitFail
		if errors.Is(err, host.ErrSetup) {
			code = exitUsage
		}
		return cli.Fail(stderr, name, code, err)
	}
	return exitOK
}
