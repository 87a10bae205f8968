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

// bindingFlags are the flags of turn and broker that name the config and
// what the host admitted: the channel and the speaker.
type bindingFlags struct {
	config, channel string
	speaker         rtsandbox.Speaker
}

// register adds the flags; --config only when withConfig (a setup has its
// own).
func (f *bindingFlags) register(fs *flag.FlagSet, channelHelp string, withConfig bool) {
	if withConfig {
		fs.StringVar(&f.config, "config", "", "config file (required)")
	}
	fs.StringVar(&f.channel, "channel", "", channelHelp)
	fs.StringVar(&f.speaker.ID, "speaker-id", "", "speaker id (required)")
	fs.StringVar(&f.speaker.Name, "speaker-name", "", "speaker display name (required)")
	fs.StringVar(&f.speaker.PrincipalID, "principal", "", "speaker principal id (required)")
}

// check names the first flag at fault, in flag order; more are further
// required flags.
func (f *bindingFlags) check(fs *flag.FlagSet, more ...string) error {
	required := append([]string{"config", "channel", "speaker-id", "speaker-name", "principal"}, more...)
	if err := cli.FirstError(cli.NoArgs(fs), cli.MissingFlag(fs, required...)); err != nil {
		return err
	}
	if !rtsandbox.ChannelKey(f.channel).Valid() {
		return fmt.Errorf("--channel: %q is not a channel key (kind:id, such as http:lobby)", f.channel)
	}
	if err := f.speaker.Validate(); err != nil {
		return fmt.Errorf("--speaker-id/--speaker-name/--principal: %w", err)
	}
	return nil
}

// parseBrokerFlags parses `rtsandbox broker` flags.
func parseBrokerFlags(args []string, stderr io.Writer) (f bindingFlags, o host.BrokerOptions, logFormat string, err error) {
	fs := cli.NewFlagSet("rtsandbox broker", stderr)
	f.register(fs, "channel key the turn is bound to, such as http:lobby (required)", true)
	fs.StringVar(&o.Socket, "socket", "", "Unix socket path to create (required)")
	fs.IntVar(&o.MaxCalls, "max-calls", rtsandbox.DefaultMaxCalls, "call budget, 1-1000")
	fs.StringVar(&logFormat, "log-format", cli.LogJSON, "audit record format: json (one JSON object a line) or text (key=value)")
	if err := fs.Parse(args); err != nil {
		return f, o, logFormat, err
	}
	if err := f.check(fs, "socket"); err != nil {
		return f, o, logFormat, err
	}
	if o.MaxCalls < 1 || o.MaxCalls > rtsandbox.MaxCallsLimit {
		return f, o, logFormat, fmt.Errorf("--max-calls: %d is outside 1-1000", o.MaxCalls)
	}
	o.Channel, o.Speaker = rtsandbox.ChannelKey(f.channel), f.speaker
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
	cfg, err := config.Load(f.config)
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
