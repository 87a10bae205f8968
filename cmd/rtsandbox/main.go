// Command rtsandbox is the rtsandbox host: it serves sealed LLM turns for
// chat channels and offers operator tools around them. main only wires
// packages together; every subcommand is a function of (ctx, args, env,
// stdio) so tests drive it exactly as an operator would.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	_ "time/tzdata" // minimal hosts have no zoneinfo
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes shared by the subcommands.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// env is the process environment, read on every use so that rotated
// secrets take effect without a restart.
type env func(string) string

// command is one subcommand.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "serve chat surfaces (http, discord) with sealed turns until SIGTERM", runServe},
		{"doctor", "check Docker, the worker image, the state dir and the credentials serve needs", runDoctor},
		{"channels", "list or switch sandboxed channels while no server runs", runChannels},
		{"demo", "two sealed turns against a scripted stand-in model (no API key)", runDemo},
		{"standin-model", "serve the demo's scripted stand-in model on loopback (a test double, no API key)", runStandin},
		{"turn", "run one sealed turn and print the reply", runTurn},
		{"chat", "a terminal chat, each line a sealed turn", runChat},
		{"broker", "serve one turn's broker on a Unix socket", runBroker},
		{"image", "build the sealed worker image (image build)", runImage},
		{"reap", "remove this installation's leftover turn containers", runReap},
		{"fetch", "fetch one URL through the SSRF-safe fetcher and print a JSON line", runFetch},
		{"version", "print the version", runVersion},
	}
}

func run(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], getenv, stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "rtsandbox: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rtsandbox <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
}

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func runVersion(_ context.Context, _ []string, _ env, _ io.Reader, stdout, _ io.Writer) int {
	fmt.Fprintln(stdout, "rtsandbox", version)
	return exitOK
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
