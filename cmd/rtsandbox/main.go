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
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "time/tzdata" // minimal hosts have no zoneinfo
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
		{"version", "print the version, the VCS revision and the Go version", runVersion},
		{"help", "show the commands, or one command's flags (help CMD)", nil},
	}
}

func run(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "help":
		return runHelp(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "-version", "--version":
		return runVersion(ctx, args[1:], getenv, stdin, stdout, stderr)
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "rtsandbox: unknown command %q; run \"rtsandbox help\" for the list\n", args[0])
		return exitUsage
	}
	if wantsHelp(args[1:]) {
		return help(ctx, c, args[1:], getenv, stdin, stdout, stderr)
	}
	return c.run(ctx, args[1:], getenv, stdin, stdout, stderr)
}

// lookup finds a runnable subcommand by name.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			return c, true
		}
	}
	return command{}, false
}

// runHelp is `rtsandbox help [CMD [SUBCMD]]`.
func runHelp(ctx context.Context, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return exitOK
	}
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "rtsandbox help: unknown command %q; run \"rtsandbox help\" for the list\n", args[0])
		return exitUsage
	}
	return help(ctx, c, append(args[1:len(args):len(args)], "-h"), getenv, stdin, stdout, stderr)
}

// help runs c with a help flag among args. A flag set writes its usage to
// the stderr it was given; help sends it to stdout when the command
// answered help (exit 0) and to stderr when it found an error first (a
// flag it does not know, exit 2).
func help(ctx context.Context, c command, args []string, getenv env, stdin io.Reader, stdout, stderr io.Writer) int {
	var held bytes.Buffer
	code := c.run(ctx, args, getenv, stdin, stdout, &held)
	out := stderr
	if code == exitOK {
		out = stdout
	}
	_, _ = out.Write(held.Bytes())
	return code
}

// wantsHelp reports whether args ask for help: a help flag before "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--h", "-help", "--help":
			return true
		}
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rtsandbox <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nrtsandbox help <command> (or rtsandbox <command> -h) shows a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// missingFlag returns an error naming the first of names (flags of fs, in
// the order given) whose value is empty, or nil.
func missingFlag(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && f.Value.String() == "" {
			return fmt.Errorf("--%s is required", n)
		}
	}
	return nil
}

// errUnexpectedArg refuses a positional argument a command does not take.
var errUnexpectedArg = errors.New("unexpected argument")

// noArgs refuses positional arguments, naming the first.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w %q", errUnexpectedArg, fs.Arg(0))
	}
	return nil
}

// positiveFlag returns an error naming the duration flag of fs called name
// when its value is not positive, or nil.
func positiveFlag(fs *flag.FlagSet, name string) error {
	f := fs.Lookup(name)
	if f == nil {
		return nil
	}
	if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d <= 0 {
		return fmt.Errorf("--%s must be positive (got %s)", name, d)
	}
	return nil
}

// firstError returns the first non-nil error: flag checks in flag order,
// so an error names the one flag at fault.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
