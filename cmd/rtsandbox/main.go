// Command rtsandbox is the rtsandbox host: it serves sealed LLM turns for
// chat channels and offers operator tools around them. It is flags,
// config → options and wiring only: the host's lifecycle and builders are
// package host, the command-line conventions (help, version, log format,
// exit codes; tested in cli_test.go) package internal/cli. Every
// subcommand is a function of (ctx, args, env, stdio), so tests drive it
// exactly as an operator would. json logs are the default of serve and
// broker, text of the interactive turn, chat and demo.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	_ "time/tzdata" // minimal hosts have no zoneinfo

	"github.com/rtsandbox/rtsandbox/config"
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
	return cli.App{Name: "rtsandbox", Commands: commands()}.Run(ctx, args, getenv, stdin, stdout, stderr)
}

func commands() []cli.Command {
	return []cli.Command{
		{Name: "serve", Summary: "serve chat surfaces (http, discord) with sealed or session turns until SIGTERM", Run: runServe},
		{Name: "doctor", Summary: "check Docker, the worker image, the state dir and the credentials serve needs", Run: runDoctor},
		{Name: "repair", Summary: "with serve stopped, move a damaged memory or usage database aside so the next start begins a fresh one", Run: runRepair},
		{Name: "backup", Summary: "copy the state (memory, usage, channels, session conversations) into a new directory, beside a running serve", Run: runBackup},
		{Name: "restore", Summary: "with serve stopped, check a backup whole and write it into the state dir", Run: runRestore},
		{Name: "channels", Summary: "list or switch sandboxed channels while no server runs", Run: runChannels},
		{Name: "demo", Summary: "two sealed turns against a scripted stand-in model (no API key)", Run: runDemo},
		{Name: "standin-model", Summary: "serve the demo's scripted stand-in model on loopback (a test double, no API key)", Run: runStandin},
		{Name: "turn", Summary: "run one sealed turn and print the reply", Run: runTurn},
		{Name: "chat", Summary: "a terminal chat: each line a sealed turn here, or with --server a turn of a running serve", Run: runChat},
		{Name: "broker", Summary: "serve one turn's broker on a Unix socket", Run: runBroker},
		{Name: "image", Summary: "build the worker image both modes run (image build)", Run: runImage},
		{Name: "reap", Summary: "remove this installation's leftover turn containers and its session containers, then old untagged worker images no container uses", Run: runReap},
		{Name: "fetch", Summary: "fetch one URL through the SSRF-safe fetcher and print a JSON line", Run: runFetch},
	}
}

// newSetup starts a command with a config (cli.Setup, loading with
// config.Load); logDefault "" means the command does not log.
func newSetup(name string, stderr io.Writer, logDefault string) *cli.Setup[*config.Config] {
	return cli.NewSetup(name, stderr, logDefault, config.Load)
}
