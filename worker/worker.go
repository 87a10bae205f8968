package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Options are the worker's inputs. The binary passes the process streams
// and the fixed broker socket path; tests pass their own.
type Options struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer // failure details; nil discards them
	Socket string    // broker socket; "" means wire.BrokerSocketPath
	// Network, when set, is the broker's network listener and the turn's
	// token (read from the hello line: ReadHello), used instead of Socket.
	Network *brokerclient.Network
	// HelloFirst makes Run read a wire.BrokerHello line from Stdin before
	// the turn and set Network from it: the Kubernetes engine's worker
	// (`rtsandbox-worker --broker-from-stdin`), which shares no socket
	// with the host.
	HelloFirst bool
	Now        func() time.Time // clock for the system prompt; nil means time.Now
}

// Run executes one turn: it reads the turn from Stdin, runs the agent loop
// and writes the reply JSON to Stdout followed by wire.ReplyEnd. It
// returns the process exit code: 0 when a reply was produced (ok may still
// be false, at the model-call limit), 1 after printing the fixed failure
// reply. A failure, a recovered panic included, also writes exactly one
// line to Stderr: {"error_class":…,"detail":…}, a class word and a fixed
// detail, never guest text or model content (see failureLine). Nothing
// internal reaches the chat.
func Run(ctx context.Context, o Options) (code int) {
	o = o.withDefaults()
	defer func() {
		if p := recover(); p != nil {
			// The panic value may hold guest text: only the class leaves.
			code = fail(o, errPanic)
		}
	}()
	if o.HelloFirst {
		in := bufio.NewReader(o.Stdin)
		n, err := readHello(in)
		if err != nil {
			return fail(o, errors.Join(errHello, err))
		}
		o.Network, o.Stdin = n, in
	}
	turn, err := readTurn(o.Stdin)
	if err != nil {
		if !errors.Is(err, errInvalidTurn) {
			err = errors.Join(errStdin, err) // unreadable or over the limit
		}
		return fail(o, err)
	}
	reply, err := runTurn(ctx, turn, o)
	if err != nil {
		return fail(o, err)
	}
	out, err := jsonjs.Marshal(reply)
	if err != nil {
		return fail(o, errors.Join(errEncode, err))
	}
	// One write, the end mark last: the host takes the reply at the mark
	// and removes the container without waiting for the exit.
	if _, err := o.Stdout.Write(append(out, wire.ReplyEnd)); err != nil {
		// Stdout is broken: the failure reply could not go there either.
		writeFailureLine(o.Stderr, errWrite)
		return 1
	}
	return 0
}

func (o Options) withDefaults() Options {
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Socket == "" {
		o.Socket = wire.BrokerSocketPath
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// failedReply is printed, with exit code 1, after any failure.
var failedReply = `{"ok":false,"text":"` + rtsandbox.WorkerFailedText + `"}`

func fail(o Options, err error) int {
	writeFailureLine(o.Stderr, err)
	io.WriteString(o.Stdout, failedReply)
	return 1
}

// Failure classes: the "error_class" word of the failure line. The host
// (container.ParseWorkerFailure) knows the same list and ignores a class
// it does not know; add, never rename.
const (
	classInvalidTurn       = "invalid_turn"
	classBrokerUnreachable = "broker_unreachable"
	classBrokerRefused     = "broker_refused"
	classBudgetExhausted   = "budget_exhausted" // the broker answered 429
	classUpstreamFailed    = "upstream_failed"  // the broker answered 502
	classModelResponse     = "model_response"
	classNoFinalText       = "no_final_text"
	classContextBudget     = "context_budget"
	classToolListBudget    = "tool_list_budget"
	classWriteFailed       = "write_failed"
	classPanic             = "panic"
	classInternal          = "internal"
	classModelOverloaded   = "model_overloaded" // 429 or 529 upstream, retries spent
	classModelStream       = "model_stream"     // a streamed answer broke or carried an error event
)

// failure is a worker error of a known class. Its detail is a fixed text
// that may reach the operator log; wrap it (fmt.Errorf("%w: %w", …)) to
// keep a cause for tests, which the failure line never shows.
type failure struct{ class, detail string }

func (f *failure) Error() string { return f.detail }

// The worker's failures. Each detail is a fixed text.
var (
	errStdin             = &failure{classInvalidTurn, "stdin unreadable or over its limit"}
	errHello             = &failure{classInvalidTurn, "broker hello unreadable or invalid"}
	errTimeZone          = &failure{classInvalidTurn, "invalid time zone"}
	errBrokerUnreachable = &failure{classBrokerUnreachable, "broker call failed"}
	errModelResponse     = &failure{classModelResponse, "invalid model response"}
	errTooManyCalls      = &failure{classModelResponse, "too many tool calls"}
	errBrokerJSON        = &failure{classModelResponse, "broker returned no JSON"}
	errNoContent         = &failure{classNoFinalText, "model content is not a string"}
	errBlankContent      = &failure{classNoFinalText, "model content is blank"}
	errContextBudget     = &failure{classContextBudget, "model context exceeds request budget"}
	errToolListBudget    = &failure{classToolListBudget, "tool descriptions exceed context budget"}
	errEncode            = &failure{classInternal, "reply not encodable"}
	errWrite             = &failure{classWriteFailed, "stdout write failed"}
	errPanic             = &failure{classPanic, "recovered panic"}

	errModelOverloaded      = &failure{classModelOverloaded, "model rate limited or overloaded"}
	errModelStream          = &failure{classModelStream, "model stream cut or unreadable"}
	errModelStreamMalformed = &failure{classModelStream, "model stream malformed"}
	errModelStreamLimit     = &failure{classModelStream, "model stream over its limit"}
	errStreamErrorEvent     = &failure{classModelStream, "error event in the model stream"}
)

// classify maps an error to its class and fixed detail. The texts of
// errInvalidTurn errors are fixed words ("invalid turn: memory"); broker
// refusals carry only their status.
func classify(err error) (class, detail string) {
	var f *failure
	var status *brokerclient.StatusError
	switch {
	case errors.As(err, &f):
		return f.class, f.detail
	case errors.As(err, &status):
		detail = "status " + strconv.Itoa(status.Status)
		switch status.Status {
		case 429:
			return classBudgetExhausted, detail
		case 502:
			return classUpstreamFailed, detail
		}
		return classBrokerRefused, detail
	case errors.Is(err, brokerclient.ErrTooLarge):
		return classModelResponse, "broker answer over its limit"
	case errors.Is(err, errInvalidTurn):
		return classInvalidTurn, err.Error()
	}
	return classInternal, "unclassified error"
}

// writeFailureLine writes the one failure line: {"error_class":…,"detail":…}
// and a newline.
func writeFailureLine(w io.Writer, err error) {
	class, detail := classify(err)
	line, _ := json.Marshal(struct {
		Class  string `json:"error_class"`
		Detail string `json:"detail"`
	}{class, detail})
	_, _ = w.Write(append(line, '\n'))
}
