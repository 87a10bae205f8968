// `rtsandbox standin-model`: the demo's scripted model on a fixed loopback
// port, so an operator can try serve, chat and the HTTP API with no key.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// standinPath is the only path the stand-in serves: the OpenAI
// chat-completions wire. Another wire (Anthropic Messages) is not served.
const standinPath = "/v1/chat/completions"

// standinShutdown bounds the wait for requests in flight at SIGTERM.
const standinShutdown = 5 * time.Second

const standinHelp = `usage: rtsandbox standin-model --listen 127.0.0.1:PORT [--key-env VAR]

Serves a SCRIPTED STAND-IN model, not a real LLM: the memory demo of
` + "`rtsandbox demo`" + ` played in a loop ("remember that I drink tea", then
"what do I drink?"; anything else gets a short hint). It is a test double
for trying serve, chat and the HTTP chat API without an API key.

It speaks the OpenAI chat-completions wire only, on POST ` + standinPath + `
(non-streaming). The Anthropic Messages wire is not served yet.

--listen must be a loopback address (127.0.0.0/8, [::1] or localhost):
other addresses are refused, because a stand-in must never face a network.

Key: without --key-env any request is answered, with any bearer key or
none. With --key-env VAR, VAR must be set when the stand-in starts (it is
read once) and every request must carry "Authorization: Bearer $VAR"
(others get 401): point model.api_key_env of the rtsandbox config at a
variable with the same value to see the broker supply the key.

It runs until SIGINT or SIGTERM and then exits 0.

flags:
`

// runStandin is `rtsandbox standin-model`.
func runStandin(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox standin-model", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, standinHelp); fs.PrintDefaults() }
	listen := fs.String("listen", "", "loopback host:port to listen on (required)")
	keyEnv := fs.String("key-env", "", "variable holding the one bearer key to accept (default: accept any)")
	if code, ok := cli.ParseFlags(fs, args, stderr); !ok {
		return code
	}
	opts, err := standinOptions(*listen, config.EnvVar(*keyEnv), getenv)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox standin-model", exitUsage, err)
	}
	s, err := fakemodel.Listen(opts, fakemodel.MemoryDemo())
	if err != nil {
		return cli.Fail(stderr, "rtsandbox standin-model", exitFail, err)
	}
	fmt.Fprintf(stdout, "rtsandbox standin-model: listening on %s%s: a SCRIPTED STAND-IN, not a real LLM (%s)\n",
		s.URL(), standinPath, keyNote(*keyEnv))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), standinShutdown)
	defer cancel()
	_ = s.Shutdown(sctx) // past the bound it closes the connections; either way it stopped
	return exitOK
}

// standinOptions checks the flags: a loopback --listen and, with
// --key-env, a variable that is set.
func standinOptions(listen string, keyEnv config.EnvVar, getenv env) (fakemodel.Options, error) {
	opts := fakemodel.Options{Addr: listen, Path: standinPath, Loop: true, NoRecord: true}
	switch {
	case listen == "":
		return opts, errors.New("--listen is required, such as --listen 127.0.0.1:8788")
	case !fakemodel.LoopbackAddr(listen):
		return opts, fmt.Errorf("--listen %q: not a loopback host:port; the stand-in is a test double and listens on loopback only", listen)
	}
	if keyEnv != "" {
		if opts.Key = keyEnv.Lookup(getenv); opts.Key == "" {
			return opts, fmt.Errorf("--key-env %s: the variable is not set", keyEnv)
		}
	}
	return opts, nil
}

func keyNote(keyEnv string) string {
	if keyEnv == "" {
		return "any bearer key accepted"
	}
	return "bearer key from " + keyEnv + " required"
}
