// `rtsandbox doctor`: the checks of host.Checks, printed one a line with
// their fixes; exit 0 when no check failed, 1 when one did, 2 for usage and
// config errors. See docs/operations.md.

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/rtsandbox/rtsandbox/host"
)

// runDoctor is `rtsandbox doctor`.
func runDoctor(ctx context.Context, args []string, getenv env, _ io.Reader, stdout, stderr io.Writer) int {
	st := newSetup("rtsandbox doctor", stderr, "")
	st.FS.Usage = func() { fmt.Fprint(stderr, host.DoctorHelp); st.FS.PrintDefaults() }
	online := st.FS.Bool("online", false, "also reach the model and MCP endpoints (no tokens spent)")
	cfg, _, code, ok := st.Load(args, getenv, stderr, nil, 0)
	if !ok {
		return code
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
