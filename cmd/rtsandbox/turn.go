package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// runTurn runs one sealed turn and prints the reply JSON. Exit 0 when the
// reply is ok, 1 when the turn failed (the guest-facing text on stdout,
// details on stderr), 2 for usage or config errors.
func runTurn(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	var f cli.BindingFlags
	var text string
	st := newSetup("rtsandbox turn", stderr, cli.LogText)
	f.Register(st.FS, "channel key, such as http:lobby (required)", false)
	st.FS.StringVar(&text, "text", "", "the guest's message (required)")
	cfg, log, code, ok := st.Load(args, getenv, stderr, stderr, slog.LevelWarn, func() error { return checkTurnFlags(st.FS, f, text) })
	if !ok {
		return code
	}
	// The operator runs the turn as a member speaker; owner commands are
	// not turns.
	b := rtsandbox.Binding{Channel: rtsandbox.ChannelKey(f.Channel), Speaker: f.Speaker, Tier: rtsandbox.TierMember}
	reply, err := host.Turn(ctx, cfg, getenv, log, b, text, func(msg string) { fmt.Fprintln(stderr, "rtsandbox turn:", msg) })
	switch {
	case errors.Is(err, host.ErrSetup):
		return cli.Fail(stderr, "rtsandbox turn", exitUsage, err)
	case errors.Is(err, host.ErrStartRefused):
		return cli.Fail(stderr, "rtsandbox turn", exitFail, err)
	}
	return printReply(stdout, stderr, reply, err)
}

// checkTurnFlags names the first flag at fault, in flag order.
func checkTurnFlags(fs *flag.FlagSet, f cli.BindingFlags, text string) error {
	if err := f.Check(fs, "text"); err != nil {
		return err
	}
	if rtsandbox.UTF16Len(text) > rtsandbox.MaxTextLen {
		return fmt.Errorf("--text: longer than %d UTF-16 units", rtsandbox.MaxTextLen)
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
