package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os/user"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/router"
	"github.com/rtsandbox/rtsandbox/surface/httpapi"
)

// remoteFlags are chat --server's: a terminal chat with a running serve
// through its HTTP chat API, in a channel of the remote host.
type remoteFlags struct {
	server, channel, author, tokenEnv, ownerTokenEnv string
}

func (r *remoteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.server, "server", "", "talk to a running serve through its HTTP chat API at this URL (http://127.0.0.1:8787) instead of running turns here; no --config")
	fs.StringVar(&r.channel, "channel", "http:console", "with --server: the http: channel to talk in (the remote host must have it sandboxed)")
	fs.StringVar(&r.author, "author", loginName(), "with --server: the author id the messages carry (the remote access rules decide)")
	fs.StringVar(&r.tokenEnv, "token-env", "RTSANDBOX_HTTP_TOKEN", "with --server: the variable holding the guest token (the remote http.token_env's value)")
	fs.StringVar(&r.ownerTokenEnv, "owner-token-env", "RTSANDBOX_HTTP_OWNER_TOKEN", "with --server: the variable holding the owner token, for /fresh (optional)")
}

// check names the first remote flag at fault; the guest token's variable
// must be set, as serve's start checks require of its own.
func (r *remoteFlags) check(fs *flag.FlagSet, getenv env) error {
	if r.server == "" {
		for _, name := range []string{"channel", "author", "token-env", "owner-token-env"} {
			if cli.FlagSet(fs, name) {
				return fmt.Errorf("--%s: only with --server", name)
			}
		}
		return nil
	}
	if _, err := serverURL(r.server); err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	ch := rtsandbox.ChannelKey(r.channel)
	if !ch.Valid() || ch.Kind() != httpapi.Prefix {
		return fmt.Errorf("--channel: must be an http: channel key such as http:console (got %q)", r.channel)
	}
	if !router.ValidAuthorID(httpapi.Prefix, r.author) {
		return fmt.Errorf("--author: %q is not a valid http: author id", r.author)
	}
	if getenv(r.tokenEnv) == "" {
		return fmt.Errorf("--token-env: %s is unset or empty; set it to the remote serve's guest token (its http.token_env)", r.tokenEnv)
	}
	return nil
}

// serverURL accepts an http or https base URL with a host and nothing
// else; plain http only to a loopback host, so a token never crosses a
// network in the clear.
func serverURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, err
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return nil, fmt.Errorf("%q is not an http(s) URL with a host", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "":
		return nil, fmt.Errorf("%q: give the API's base only, such as http://127.0.0.1:8787", s)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return nil, fmt.Errorf("%q: plain http only to a loopback host; use https for another machine", s)
	}
	return u, nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsLoopback()
}

// loginName is the default author id: the login name, or "operator".
func loginName() string {
	if u, err := user.Current(); err == nil && router.ValidAuthorID(httpapi.Prefix, u.Username) {
		return u.Username
	}
	return "operator"
}

// runChat is a terminal chat: in console:local as the current user (its
// owner), each line a sealed turn run here (host.Chat); or, with
// --server, in a channel of a running serve through its HTTP chat API
// (host.RemoteChat), in whatever mode that channel runs.
func runChat(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	const name = "rtsandbox chat"
	var remote remoteFlags
	st := newSetup(name, stderr, cli.LogText)
	remote.register(st.FS)
	st.ConfigOptionalWith("server")
	cfg, log, code, ok := st.Load(args, getenv, stderr, stderr, slog.LevelWarn, func() error { return remote.check(st.FS, getenv) })
	if !ok {
		return code
	}
	if remote.server != "" {
		return runRemoteChat(ctx, remote, getenv, log, stdin, stdout, stderr)
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

func runRemoteChat(ctx context.Context, r remoteFlags, getenv env, log *slog.Logger, stdin io.Reader, stdout, stderr io.Writer) int {
	u, _ := serverURL(r.server) // checked
	err := host.RemoteChat(ctx, log, host.RemoteChatOptions{
		Server: u, Channel: rtsandbox.ChannelKey(r.channel), Author: router.Author{ID: r.author, Name: r.author},
		Token:      func() string { return getenv(r.tokenEnv) },
		OwnerToken: func() string { return getenv(r.ownerTokenEnv) },
		In:         stdin, Out: stdout,
	})
	if err != nil {
		return cli.Fail(stderr, "rtsandbox chat", exitFail, err)
	}
	return exitOK
}
