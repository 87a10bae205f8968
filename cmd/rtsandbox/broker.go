package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/broker"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// brokerFlags are the flags of `rtsandbox broker`.
type brokerFlags struct {
	config, socket, channel string
	speaker                 rtsandbox.Speaker
	maxCalls                int
	logFormat               string
}

func parseBrokerFlags(args []string, stderr io.Writer) (brokerFlags, error) {
	var f brokerFlags
	fs := newFlagSet("rtsandbox broker", stderr)
	fs.StringVar(&f.config, "config", "", "config file (required)")
	fs.StringVar(&f.socket, "socket", "", "Unix socket path to create (required)")
	fs.StringVar(&f.channel, "channel", "", "channel key the turn is bound to, such as http:lobby (required)")
	fs.StringVar(&f.speaker.ID, "speaker-id", "", "speaker id (required)")
	fs.StringVar(&f.speaker.Name, "speaker-name", "", "speaker display name (required)")
	fs.StringVar(&f.speaker.PrincipalID, "principal", "", "speaker principal id (required)")
	fs.IntVar(&f.maxCalls, "max-calls", rtsandbox.DefaultMaxCalls, "call budget, 1-1000")
	fs.StringVar(&f.logFormat, "log-format", logJSON, "audit record format: json (one JSON object a line) or text (key=value)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if err := firstError(noArgs(fs), missingFlag(fs, "config", "socket", "channel", "speaker-id", "speaker-name", "principal")); err != nil {
		return f, err
	}
	switch {
	case !rtsandbox.ChannelKey(f.channel).Valid():
		return f, fmt.Errorf("--channel: %q is not a channel key (kind:id, such as http:lobby)", f.channel)
	case f.maxCalls < 1 || f.maxCalls > rtsandbox.MaxCallsLimit:
		return f, fmt.Errorf("--max-calls: %d is outside 1-1000", f.maxCalls)
	}
	if err := f.speaker.Validate(); err != nil {
		return f, fmt.Errorf("--speaker-id/--speaker-name/--principal: %w", err)
	}
	return f, nil
}

// runBroker serves one turn's broker until ctx ends (SIGINT or SIGTERM).
// Audit records go to stderr, as JSON unless --log-format text.
func runBroker(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	f, err := parseBrokerFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox broker:", err)
		return exitUsage
	}
	log, err := newLogger(stderr, f.logFormat, getenv, slog.LevelInfo)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox broker:", err)
		return exitUsage
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox broker:", err)
		return exitUsage
	}
	bc, err := brokerConfig(cfg, getenv, upstream.New(nil), log)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox broker:", err)
		return exitUsage
	}
	bc.MaxCalls = f.maxCalls
	b, err := broker.New(bc)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox broker:", err)
		return exitUsage
	}
	turnCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := broker.Listen(f.socket, b.Turn(turnCtx, rtsandbox.Binding{Channel: rtsandbox.ChannelKey(f.channel), Speaker: f.speaker}), broker.ListenOptions{Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox broker:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "rtsandbox broker listening on %s for channel %s (%d calls)\n", f.socket, f.channel, f.maxCalls)
	<-ctx.Done()
	cancel()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(stderr, "rtsandbox broker: close:", err)
		return exitFail
	}
	return exitOK
}
