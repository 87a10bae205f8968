package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"sync"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/surface/console"
)

// consoleChannel is the terminal chat's channel key.
const consoleChannel rtsandbox.ChannelKey = "console:local"

// runChat is a terminal chat in console:local as the current user, each
// line a sealed turn.
func runChat(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox chat", stderr)
	configPath := fs.String("config", "", "config file (required)")
	logFormat := cli.LogFormatFlag(fs, cli.LogText)
	if code, ok := cli.ParseFlags(fs, args, stderr); !ok {
		return code
	}
	if err := cli.MissingFlag(fs, "config"); err != nil {
		return cli.Fail(stderr, "rtsandbox chat", exitUsage, err)
	}
	log, err := cli.NewLogger(stderr, *logFormat, getenv, slog.LevelWarn)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox chat", exitUsage, err)
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox chat", exitUsage, err)
	}
	s, err := host.NewSealedRuntime(cfg, getenv, host.SealedOptions{Logger: log, Reports: &consolePoster{out: stdout}})
	if err != nil {
		return cli.Fail(stderr, "rtsandbox chat", exitUsage, err)
	}
	defer s.Close()
	if err := host.RefreshImage(ctx, host.ImageTag(cfg), func(msg string) { fmt.Fprintln(stderr, "rtsandbox chat:", msg) }); err != nil {
		return cli.Fail(stderr, "rtsandbox chat", exitFail, err)
	}
	c := &console.Chat{Runtime: s.Runtime, Channel: consoleChannel, Speaker: localSpeaker(),
		In: stdin, Out: stdout, Spinner: isTerminal(stdout), Logger: log}
	if err := c.Run(ctx); err != nil && ctx.Err() == nil {
		return cli.Fail(stderr, "rtsandbox chat", exitFail, err)
	}
	return exitOK
}

// localSpeaker is the operator at the terminal: their login name and uid.
func localSpeaker() rtsandbox.Speaker {
	uid := strconv.Itoa(os.Getuid())
	name := "uid " + uid
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return rtsandbox.Speaker{ID: uid, Name: name, PrincipalID: "console:" + uid}
}

// isTerminal reports whether w is a character device (a terminal), where
// a spinner makes sense.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// consolePoster prints research reports that arrive while the chat runs.
type consolePoster struct {
	mu  sync.Mutex
	out io.Writer
}

func (c *consolePoster) SendReply(_ context.Context, _ rtsandbox.ChannelKey, chunks []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintln(c.out)
	for _, chunk := range chunks {
		if _, err := fmt.Fprintln(c.out, "agent> "+console.Printable(chunk)); err != nil {
			return err
		}
	}
	return nil
}
