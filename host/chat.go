package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/user"
	"strconv"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/console"
	"github.com/rtsandbox/rtsandbox/surface/httpapi"
)

// The terminal chat's channel key and its kind.
const (
	ConsoleKind                         = "console"
	ConsoleChannel rtsandbox.ChannelKey = ConsoleKind + ":local"
)

// ChatOptions are the terminal chat's ends.
type ChatOptions struct {
	In  io.Reader
	Out io.Writer
	// Say tells the operator what the start did (an image rebuilt).
	Say func(string)
}

// Chat runs a terminal chat in console:local until In ends or ctx does:
// the console is a router surface like any other, on a router whose only
// sandboxed channel is console:local and whose owner is the local user, so
// /fresh is the owner command and research reports arrive as deliveries.
func Chat(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, o ChatOptions) error {
	if err := sealedOnly(cfg, ConsoleChannel); err != nil {
		return setupError{err}
	}
	reports := newReportPipe()
	s, err := NewSealedRuntime(cfg, getenv, SealedOptions{Logger: log, Reports: reports})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := TurnChecks(ctx, cfg, getenv, log, o.Say); err != nil {
		return err
	}
	c, r, err := consoleChat(s.Runtime, newDoor(cfg, getenv), log, o.In, o.Out)
	if err != nil {
		return err
	}
	// Before s.Close. An interrupt (ctx ended) aborts a running turn; /quit
	// finds none.
	defer r.Close(ctx)
	defer reports.pipe(r)()
	if err := c.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// Turn runs one sealed turn of b with text, as `rtsandbox turn` does: the
// sealed runtime built from cfg (an error there matches ErrSetup), the
// worker image refreshed when it is missing or stale (say reports it).
func Turn(ctx context.Context, cfg *config.Config, getenv env, log *slog.Logger, b rtsandbox.Binding, text string, say func(string)) (rtsandbox.Reply, error) {
	if err := sealedOnly(cfg, b.Channel); err != nil {
		return rtsandbox.Reply{}, setupError{err}
	}
	s, err := NewSealedRuntime(cfg, getenv, SealedOptions{Logger: log})
	if err != nil {
		return rtsandbox.Reply{}, setupError{err}
	}
	defer s.Close()
	if err := TurnChecks(ctx, cfg, getenv, log, say); err != nil {
		return rtsandbox.Reply{}, err
	}
	return s.Runtime.RunTurn(ctx, b, text)
}

// sealedOnly refuses a channel whose profile is a session one: turn and
// chat run sealed turns in their own process, and a session channel's
// worker, workspace and conversation belong to serve. Running it sealed
// instead would answer from another mode without saying so.
func sealedOnly(cfg *config.Config, ch rtsandbox.ChannelKey) error {
	name, p := cfg.ProfileFor(ch)
	if p.Mode != config.ModeSession {
		return nil
	}
	key := "default_profile"
	if _, ok := cfg.ChannelProfiles[ch]; ok {
		key = fmt.Sprintf("channels_profile[%q]", string(ch))
	}
	return fmt.Errorf("%s: %s gets the session profile %q, and turn and chat run sealed turns only; "+
		"talk to a session channel through rtsandbox serve and its HTTP API (README, \"Talking to a running serve\"): %w",
		key, ch, name, rtsandbox.ErrInvalid)
}

// consoleChat wires the terminal chat as a router surface.
func consoleChat(rt rtsandbox.Runtime, door router.Door, log *slog.Logger, in io.Reader, out io.Writer) (*console.Chat, *router.Router, error) {
	me := localSpeaker()
	owner, err := access.User(ConsoleKind, me.ID)
	if err != nil {
		return nil, nil, err
	}
	policy, err := access.New(access.Rules{Owners: []access.Identity{owner}})
	if err != nil {
		return nil, nil, err
	}
	r, err := router.New(router.Options{Channels: consoleChannels{}, Runtime: rt, Access: policy, Logger: log, Door: door})
	if err != nil {
		return nil, nil, err
	}
	c := &console.Chat{Router: r, Channel: ConsoleChannel, Author: router.Author{ID: me.ID, Name: me.Name},
		In: in, Out: out, Spinner: isTerminal(out), Logger: log}
	if err := r.AddSurface(ConsoleKind, c); err != nil {
		r.Close(context.Background())
		return nil, nil, err
	}
	return c, r, nil
}

// consoleChannels is the chat's channel set: console:local, always
// sandboxed.
type consoleChannels struct{}

func (consoleChannels) Enabled(k rtsandbox.ChannelKey) bool { return k == ConsoleChannel }
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

// RemoteChatOptions are a terminal chat with a running serve (chat
// --server): the API's base, the channel and author the messages carry,
// and the tokens, read on every request.
type RemoteChatOptions struct {
	Server            *url.URL
	Channel           rtsandbox.ChannelKey
	Author            router.Author
	Token, OwnerToken func() string
	In                io.Reader
	Out               io.Writer
}

// RemoteChat runs a terminal chat against serve's HTTP chat API until In
// ends or ctx does: the same console as Chat, whose messages travel to
// the running host (httpapi.Client) instead of a router here. The remote
// host runs the turns in the channel's own mode, sealed or session, and
// keeps its state directory to itself.
func RemoteChat(ctx context.Context, log *slog.Logger, o RemoteChatOptions) error {
	client := httpapi.NewClient(o.Server, o.Token, o.OwnerToken)
	c := &console.Chat{Router: client, Channel: o.Channel, Author: o.Author, In: o.In, Out: o.Out,
		Spinner: isTerminal(o.Out), Logger: log}
	client.Surface = c
	if err := c.Run(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
