package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/console"
)

// The terminal chat's channel key and its kind.
const (
	consoleKind                         = "console"
	consoleChannel rtsandbox.ChannelKey = consoleKind + ":local"
)

// runChat is a terminal chat in console:local as the current user, each
// line a sealed turn.
func runChat(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("rtsandbox chat", stderr)
	configPath := fs.String("config", "", "config file (required)")
	logFormat := logFormatFlag(fs, logText)
	if code, ok := parseOpsFlags(fs, args, stderr); !ok {
		return code
	}
	if err := missingFlag(fs, "config"); err != nil {
		fmt.Fprintln(stderr, "rtsandbox chat:", err)
		return exitUsage
	}
	log, err := newLogger(stderr, *logFormat, getenv, slog.LevelWarn)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox chat:", err)
		return exitUsage
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox chat:", err)
		return exitUsage
	}
	reports := &latePoster{}
	s, err := newSealedRuntime(cfg, getenv, sealedOptions{log: log, poster: reports})
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox chat:", err)
		return exitUsage
	}
	defer s.close()
	if err := refreshImage(ctx, imageTag(cfg), func(msg string) { fmt.Fprintln(stderr, "rtsandbox chat:", msg) }); err != nil {
		fmt.Fprintln(stderr, "rtsandbox chat:", err)
		return exitFail
	}
	c, r, err := consoleChat(s.rt, log, stdin, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "rtsandbox chat:", err)
		return exitFail
	}
	// Before s.close. An interrupt (ctx ended) aborts a running turn, as it
	// did when the chat called the runtime itself; /quit finds none.
	defer r.Close(ctx)
	reports.bind(routerReports{r})
	if err := c.Run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, "rtsandbox chat:", err)
		return exitFail
	}
	return exitOK
}

// consoleChat wires the terminal chat as a router surface: a router whose
// only sandboxed channel is console:local and whose owner is the local
// user, with the chat registered for the console kind.
func consoleChat(rt router.Runtime, log *slog.Logger, stdin io.Reader, stdout io.Writer) (*console.Chat, *router.Router, error) {
	me := localSpeaker()
	owner, err := access.User(consoleKind, me.ID)
	if err != nil {
		return nil, nil, err
	}
	policy, err := access.New(access.Rules{Owners: []access.Identity{owner}})
	if err != nil {
		return nil, nil, err
	}
	r, err := router.New(router.Options{Channels: consoleChannels{}, Runtime: rt, Access: policy, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c := &console.Chat{Router: r, Channel: consoleChannel, Author: router.Author{ID: me.ID, Name: me.Name},
		In: stdin, Out: stdout, Spinner: isTerminal(stdout), Logger: log}
	if err := r.AddSurface(consoleKind, c); err != nil {
		return nil, nil, err
	}
	return c, r, nil
}

// consoleChannels is the chat's channel set: console:local, always
// sandboxed.
type consoleChannels struct{}

func (consoleChannels) Enabled(k rtsandbox.ChannelKey) bool { return k == consoleChannel }
func (consoleChannels) Enable(rtsandbox.ChannelKey) error   { return nil }
func (consoleChannels) Disable(rtsandbox.ChannelKey) error {
	return fmt.Errorf("the terminal chat is always sandboxed: %w", rtsandbox.ErrRefused)
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
