// Command rtsandbox-worker is the in-container agent. With no argument it
// is the sealed worker: it reads one turn as JSON on stdin, talks only to
// the broker socket, and prints one reply as JSON on stdout. With the
// argument "session" it is the long-lived session worker of a channel
// (`/rtsandbox-worker session`): it long-polls the broker socket at
// /run/sandbox/broker.sock for turns and keeps its conversation under
// /workspace/sessions, logging one JSON line per event on stdout. See
// package worker for both protocols.
//
// With --broker-from-stdin it is the sealed worker of the Kubernetes
// engine: the first line of its stdin is the broker's network address and
// the turn's token (wire.BrokerHello), the turn follows. With "session
// --broker-from-file" it is the session worker of a Kubernetes Pod: the
// broker's address and the channel's token are in
// /run/sandbox/broker.hello, which the host rewrites (wire.SessionHelloPath).
//
// Build it static: CGO_ENABLED=0 go build ./cmd/rtsandbox-worker
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	_ "time/tzdata" // a minimal image has no zoneinfo; the system prompt needs the turn's zone

	"github.com/rtsandbox/rtsandbox/wire"
	"github.com/rtsandbox/rtsandbox/worker"
)

func main() {
	// The worker is sequential and runs under a PID limit; one P keeps
	// the runtime's thread count low.
	runtime.GOMAXPROCS(1)
	if len(os.Args) > 1 && os.Args[1] == "session" {
		// docker stop's SIGTERM ends the loop cleanly (exit 0); the
		// worker is PID 1, so nothing would end it otherwise but the
		// runtime's fallback exit.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		o := worker.SessionOptions{
			Socket:    wire.SessionSocketPath,
			Workspace: wire.SessionWorkspace,
			Stdout:    os.Stdout,
		}
		if len(os.Args) > 2 && os.Args[2] == wire.SessionHelloArg {
			// A Kubernetes Pod's: the broker's network listener, from the
			// hello file the host writes into the run directory.
			o.Hello = wire.SessionHelloPath
		}
		code := worker.RunSession(ctx, o)
		stop()
		os.Exit(code)
	}
	// --broker-from-stdin: the Kubernetes engine's sealed worker, which
	// shares no socket with the host, reads the broker's network address
	// and the turn's token from its stdin's first line (wire.BrokerHello).
	helloFirst := len(os.Args) > 1 && os.Args[1] == "--broker-from-stdin"
	os.Exit(worker.Run(context.Background(), worker.Options{
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		Socket:     wire.BrokerSocketPath,
		HelloFirst: helloFirst,
	}))
}
