package worker

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// Options are the worker's inputs. The binary passes the process streams
// and the fixed broker socket path; tests pass their own.
type Options struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer        // failure details; nil discards them
	Socket string           // broker socket; "" means rtsandbox.BrokerSocketPath
	Now    func() time.Time // clock for the system prompt; nil means time.Now
}

// Run executes one turn: it reads the turn from Stdin, runs the agent loop
// and writes the reply JSON to Stdout without a trailing newline. It
// returns the process exit code: 0 when a reply was produced (ok may still
// be false, at the model-call limit), 1 after printing the fixed failure
// reply. Error details, including recovered panics, go to Stderr only, so
// nothing internal reaches the chat.
func Run(ctx context.Context, o Options) (code int) {
	o = o.withDefaults()
	defer func() {
		if p := recover(); p != nil {
			code = fail(o, fmt.Errorf("panic: %v", p))
		}
	}()
	turn, err := readTurn(o.Stdin)
	if err != nil {
		return fail(o, err)
	}
	reply, err := runTurn(ctx, turn, o)
	if err != nil {
		return fail(o, err)
	}
	out, err := jsonjs.Marshal(reply)
	if err != nil {
		return fail(o, err)
	}
	if _, err := o.Stdout.Write(out); err != nil {
		fmt.Fprintf(o.Stderr, "rtsandbox-worker: write reply: %v\n", err)
		return 1
	}
	return 0
}

func (o Options) withDefaults() Options {
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Socket == "" {
		o.Socket = rtsandbox.BrokerSocketPath
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// failedReply is printed, with exit code 1, after any failure.
var failedReply = `{"ok":false,"text":"` + rtsandbox.WorkerFailedText + `"}`

func fail(o Options, err error) int {
	fmt.Fprintf(o.Stderr, "rtsandbox-worker: %v\n", err)
	io.WriteString(o.Stdout, failedReply)
	return 1
}
