// `rtsandbox standin-model`: the demo's scripted model on a fixed loopback
// port, so an operator can try serve, chat and the HTTP API with no key.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/internal/cli"
	"github.com/rtsandbox/rtsandbox/internal/fakemodel"
)

// runStandin is `rtsandbox standin-model`.
func runStandin(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	const name = "rtsandbox standin-model"
	fs := cli.NewFlagSet(name, stderr)
	fs.Usage = func() { fmt.Fprint(stderr, fakemodel.StandInHelp); fs.PrintDefaults() }
	listen := fs.String("listen", "", "loopback host:port to listen on (required)")
	keyEnv := fs.String("key-env", "", "variable holding the one bearer key to accept (default: accept any)")
	if code, ok := cli.ParseFlags(fs, args, stderr); !ok {
		return code
	}
	key := func() (string, error) {
		if *keyEnv == "" {
			return "", nil
		}
		if k := config.EnvVar(*keyEnv).Lookup(getenv); k != "" {
			return k, nil
		}
		return "", fakemodel.UsageError(fmt.Sprintf("--key-env %s: the variable is not set", *keyEnv))
	}
	err := fakemodel.StandIn(ctx, *listen, key, func(url string) {
		fmt.Fprintf(stdout, "%s: listening on %s: a SCRIPTED STAND-IN, not a real LLM (%s)\n", name, url, keyNote(*keyEnv))
	})
	if err != nil {
		code := exitFail
		if errors.Is(err, fakemodel.ErrUsage) {
			code = exitUsage
		}
		return cli.Fail(stderr, name, code, err)
	}
	return exitOK
}

func keyNote(keyEnv string) string {
	if keyEnv == "" {
		return "any bearer key accepted"
	}
	return "bearer key from " + keyEnv + " required"
}
