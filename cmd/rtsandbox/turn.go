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
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// runTurn runs one sealed turn and prints the reply JSON. Exit 0 when the
// reply is ok, 1 when the turn failed (the guest-facing text on stdout,
// details on stderr), 2 for usage or config errors.
func runTurn(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	var f brokerFlags
	var text string
	fs := newFlagSet("rtsandbox turn", stderr)
	fs.StringVar(&f.config, "config", "", "config file (required)")
	fs.StringVar(&f.channel, "channel", "", "channel key, such as http:lobby (required)")
	fs.StringVar(&f.speaker.ID, "speaker-id", "", "speaker id (required)")
	fs.StringVar(&f.speaker.Name, "speaker-name", "", "speaker display name (required)")
	fs.StringVar(&f.speaker.PrincipalID, "principal", "", "speaker principal id (required)")
	fs.StringVar(&text, "text", "", "the guest's message (required)")
	logFormat := logFormatFlag(fs, logText)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if err := checkTurnFlags(fs, f, text); err != nil {
		fmt.Fprintln(stderr, "rtsandbox turn:", err)
		return exitUsage
	}
	log, err := newLogger(stderr, *logFormat, getenv, slog.LevelWarn)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox turn:", err)
		return exitUsage
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox turn:", err)
		return exitUsage
	}
	s, err := newSealedRuntime(cfg, getenv, sealedOptions{log: log})
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox turn:", err)
		return exitUsage
	}
	defer s.close()
	if err := refreshImage(ctx, imageTag(cfg), func(msg string) { fmt.Fprintln(stderr, "rtsandbox turn:", msg) }); err != nil {
		return printReply(stdout, stderr, rtsandbox.Reply{}, err)
	}
	reply, err := s.rt.RunTurn(ctx, rtsandbox.ChannelKey(f.channel), f.speaker, text)
	return printReply(stdout, stderr, reply, err)
}

// checkTurnFlags names the first flag at fault, in flag order.
func checkTurnFlags(fs *flag.FlagSet, f brokerFlags, text string) error {
	if err := firstError(noArgs(fs), missingFlag(fs, "config", "channel", "speaker-id", "speaker-name", "principal", "text")); err != nil {
		return err
	}
	switch {
	case !rtsandbox.ChannelKey(f.channel).Valid():
		return fmt.Errorf("--channel: %q is not a channel key (kind:id, such as http:lobby)", f.channel)
	case rtsandbox.UTF16Len(text) > rtsandbox.MaxTextLen:
		return fmt.Errorf("--text: longer than %d UTF-16 units", rtsandbox.MaxTextLen)
	}
	if err := f.speaker.Validate(); err != nil {
		return fmt.Errorf("--speaker-id/--speaker-name/--principal: %w", err)
	}
	return nil
}

// printReply writes the reply JSON a guest would see and returns the exit
// code: a worker's ok:false and a failed turn both become the fixed
// guest-facing texts, with the details on stderr.
func printReply(stdout, stderr io.Writer, reply rtsandbox.Reply, err error) int {
	code := exitOK
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "rtsandbox turn: turn failed:", err)
		reply, code = rtsandbox.Reply{Text: rtsandbox.TurnFailedOrStoppedText}, exitFail
	case !reply.OK:
		fmt.Fprintf(stderr, "rtsandbox turn: the worker replied ok:false: %q\n", reply.Text)
		reply, code = rtsandbox.Reply{Text: rtsandbox.TurnFailedText}, exitFail
	}
	out, _ := jsonjs.Marshal(reply) // a Reply always encodes
	fmt.Fprintf(stdout, "%s\n", out)
	return code
}
