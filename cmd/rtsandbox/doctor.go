// `rtsandbox doctor`: the checks of host.Checks, printed one a line with
// their fixes; exit 0 when no check failed, 1 when one did, 2 for usage and
// config errors. See docs/operations.md.

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/rtsandbox/rtsandbox/config"
	"github.com/rtsandbox/rtsandbox/host"
	"github.com/rtsandbox/rtsandbox/internal/cli"
)

// doctorHelp is the usage line of doctor.
const doctorHelp = `usage: rtsandbox doctor --config FILE [--online]

Checks what serve needs: Docker and its version, the worker image built
from this binary's worker, the state directory (0700, owned by you), the
worker user, every credential variable the config names, distinct guest
and owner tokens, the Discord token. --online also asks the model and MCP
endpoints one request each, without spending tokens. Exit 0 when no
check fails, 1 otherwise. serve runs the same checks at start.

flags:
`

// runDoctor is `rtsandbox doctor`.
func runDoctor(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox doctor", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorHelp); fs.PrintDefaults() }
	configPath := fs.String("config", "", "config file (required)")
	online := fs.Bool("online", false, "also reach the model and MCP endpoints (no tokens spent)")
	if code, ok := cli.ParseFlags(fs, args, stderr); !ok {
		return code
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "rtsandbox doctor: --config is required")
		return exitUsage
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return cli.Fail(stderr, "rtsandbox doctor", exitUsage, err)
	}
	checks := host.Checks(ctx, cfg, getenv, *online)
	for _, c := range checks {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintln(stdout, host.Summary(checks))
	if host.Failed(checks) != nil {
		return exitFail
	}
	return exitOK
}
