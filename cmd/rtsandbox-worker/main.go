// Command rtsandbox-worker is the sealed in-container agent: it reads one
// turn as JSON on stdin, talks only to the broker socket, and prints one
// reply as JSON on stdout. See package worker for the protocol.
//
// Build it static: CGO_ENABLED=0 go build ./cmd/rtsandbox-worker
package main

import (
	"context"
	"os"
	"runtime"
	_ "time/tzdata" // a minimal image has no zoneinfo; the system prompt needs the turn's zone

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/worker"
)

func main() {
	// The worker is sequential and runs under a 64-PID limit; one P keeps
	// the runtime's thread count low.
	runtime.GOMAXPROCS(1)
	os.Exit(worker.Run(context.Background(), worker.Options{
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Socket: rtsandbox.BrokerSocketPath,
	}))
}
