// `rtsandbox channels list|on|off|status [KEY] --config FILE`: the
// operator's offline view of the channel store.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
)

const channelsUsage = "usage: rtsandbox channels list|on|off|status [KEY] --config FILE"

// runChannels changes or shows the sandboxed channels. list and status
// read the stored file and work beside a running server; on and off need
// the store's lock, which a running server holds: they then refuse (exit
// 1), because the server's owner commands are the way to change a live
// host: they wait behind the channel's queued turns. off also removes the
// channel's session container, which serve leaves running on purpose.
func runChannels(ctx context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox channels", stderr)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), channelsUsage+"\n\nflags:"); fs.PrintDefaults() }
	configPath := fs.String("config", "", "config file; its state_dir holds the channel store (required)")
	pos, err := cli.ParseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return exitUsage // the flag set named the flag and printed the usage
	}
	action, k, err := cli.ActionArgs(pos, []string{"list"}, []string{"on", "off", "status"}, "a channel KEY")
	key := rtsandbox.ChannelKey(k)
	if err == nil {
		err = cli.MissingFlag(fs, "config")
	}
	if err != nil {
		fmt.Fprintf(stderr, "rtsandbox channels: %v\n%s\n", err, channelsUsage)
		return exitUsage
	}
	if action != "list" && !key.Valid() {
		fmt.Fprintf(stderr, "rtsandbox channels: invalid channel key %q: want %s, such as http:lobby\n", key, rtsandbox.ChannelKeyRule)
		return exitUsage
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox channels", exitUsage, err)
	}
	if action == "list" || action == "status" {
		return showChannels(cfg, action, key, stdout, stderr)
	}
	enabled, err := host.SetChannel(cfg, key, action == "on")
	if err != nil {
		return cli.Fail(stderr, "rtsandbox channels", exitFail, err)
	}
	printStatus(stdout, key, enabled)
	if action == "off" {
		return removeSession(ctx, cfg, key, stdout, stderr)
	}
	return exitOK
}

// removeSession removes the session container of a channel switched off:
// it outlives serve on purpose, so off is where it goes.
func removeSession(ctx context.Context, cfg *config.Config, key rtsandbox.ChannelKey, stdout, stderr io.Writer) int {
	looked, err := host.RemoveSessionContainer(ctx, cfg, host.SessionMode(nil), key)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox channels", exitFail, err)
	}
	if looked {
		fmt.Fprintf(stdout, "%s: session container removed\n", key)
	}
	return exitOK
}

// showChannels answers list and status from the stored file (see
// host.StoredChannels).
func showChannels(cfg *config.Config, action string, key rtsandbox.ChannelKey, stdout, stderr io.Writer) int {
	keys, unseeded, err := host.StoredChannels(cfg)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox channels", exitFail, err)
	}
	if unseeded {
		fmt.Fprintln(stderr, "rtsandbox channels: no channel store yet; the first start seeds initial_channels")
	}
	if action == "list" {
		for _, k := range keys {
			fmt.Fprintln(stdout, k)
		}
		return exitOK
	}
	printStatus(stdout, key, slices.Contains(keys, key))
	return exitOK
}

func printStatus(w io.Writer, key rtsandbox.ChannelKey, enabled bool) {
	state := "disabled"
	if enabled {
		state = "enabled"
	}
	fmt.Fprintf(w, "%s: sandbox routing %s\n", key, state)
}
