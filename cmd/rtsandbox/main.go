// Command rtsandbox is the rtsandbox host: it serves sealed LLM turns for
// chat channels and offers operator tools around them. main only wires
// packages together; every subcommand is a function of (ctx, args, env,
// stdio) so tests drive it exactly as an operator would.
//
// Conventions every subcommand keeps (tested in cli_test.go):
//
//   - Help goes to stdout and exits 0: `rtsandbox help`, `-h`, `--help`,
//     `rtsandbox help CMD` and `rtsandbox CMD -h`. Misuse goes to stderr
//     and exits 2; a flag error names the one flag at fault.
//   - `rtsandbox version` and `rtsandbox --version` print the module
//     version, the VCS revision and whether the tree was modified, from the
//     binary's build information ("devel" when there is none).
//   - Commands that log take --log-format json|text (json for serve and
//     broker, text for the interactive turn, chat and demo); LOG_LEVEL is
//     debug, info, warn or error, anything else exits 2 naming it.
//   - A closed stdout (`rtsandbox demo | head -1`) fails writes instead of
//     killing the process, so a command stops and removes its containers.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	_ "time/tzdata" // minimal hosts have no zoneinfo

	"github.com/rtsandbox/rtsandbox/internal/cli"
)

func main() {
	// Without this a write to a closed stdout (a pipe whose reader
	// exited) kills the process with SIGPIPE before any deferred cleanup,
	// leaving the turn's container behind; ignored, the write fails with
	// EPIPE and the command stops on its own.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is the process environment (cli.Env).
type env = cli.Env

// Exit codes shared by the subcommands (cli's).
const (
	exitOK    = cli.ExitOK
	exitFail  = cli.ExitFail
	exitUsage = cli.ExitUsage
)

// run is the whole program on (args, env, stdio): what main and the tests
// call.
func run(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.App{Name: "rtsandbox", Commands: commands(), Version: runVersion}.Run(ctx, args, getenv, stdin, stdout, stderr)
}

func commands() []cli.Command {
	return []cli.Command{
		{Name: "serve", Summary: "serve chat surfaces (http, discord) with sealed turns until SIGTERM", Run: runServe},
		{Name: "doctor", Summary: "check Docker, the worker image, the state dir and the credentials serve needs", Run: runDoctor},
		{Name: "channels", Summary: "list or switch sandboxed channels while no server runs", Run: runChannels},
		{Name: "demo", Summary: "two sealed turns against a scripted stand-in model (no API key)", Run: runDemo},
		{Name: "standin-model", Summary: "serve the demo's scripted stand-in model on loopback (a test double, no API key)", Run: runStandin},
		{Name: "turn", Summary: "run one sealed turn and print the reply", Run: runTurn},
		{Name: "chat", Summary: "a terminal chat, each line a sealed turn", Run: runChat},
		{Name: "broker", Summary: "serve one turn's broker on a Unix socket", Run: runBroker},
		{Name: "image", Summary: "build the sealed worker image (image build)", Run: runImage},
		{Name: "reap", Summary: "remove this installation's leftover turn containers", Run: runReap},
		{Name: "fetch", Summary: "fetch one URL through the SSRF-safe fetcher and print a JSON line", Run: runFetch},
		{Name: "version", Summary: "print the version, the VCS revision and the Go version", Run: runVersion},
		{Name: "help", Summary: "show the commands, or one command's flags (help CMD)", Run: nil},
	}
}

// versionHelp is `rtsandbox version -h`.
const versionHelp = `usage: rtsandbox version

Prints the module version, the VCS revision the binary was built from (and
"modified" when the tree had uncommitted changes), the commit time and the
Go version, from the binary's build information. "devel" stands for a
version or revision the build did not record.
`

// runVersion is `rtsandbox version` and `rtsandbox --version`.
func runVersion(_ context.Context, args []string, _ env, _ io.Reader, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("rtsandbox version", stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), versionHelp) }
	if code, ok := cli.ParseFlags(fs, args, stderr); !ok {
		return code
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, cli.VersionLine(info, ok))
	return exitOK
}
