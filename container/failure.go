package container

import (
	"bytes"
	"slices"

	"github.com/rtsandbox/rtsandbox/wire"
)

// The worker's failure classes: on a failure the worker writes one JSON line
// {"error_class": <class>, "detail": <short fixed text>} to stderr, after
// which it prints the fixed failure reply and exits 1. The list is
// append-only: a class is a word of the worker↔host protocol.
const (
	// WorkerInvalidTurn: the turn JSON on stdin was unreadable, over its
	// limit or invalid (a field of the wrong type, a bad time zone).
	WorkerInvalidTurn = "invalid_turn"
	// WorkerBrokerUnreachable: a model call got no answer from the broker
	// socket (connect, read or write failed).
	WorkerBrokerUnreachable = "broker_unreachable"
	// WorkerBrokerRefused: the broker refused a model call (a status other
	// than 200, 429 and 502; 410 once the turn has ended).
	WorkerBrokerRefused = "broker_refused"
	// WorkerBudgetExhausted: the broker answered 429 (call budget spent or
	// a call already in flight).
	WorkerBudgetExhausted = "budget_exhausted"
	// WorkerUpstreamFailed: the broker answered 502 (the model endpoint
	// failed, timed out or echoed a credential).
	WorkerUpstreamFailed = "upstream_failed"
	// WorkerModelResponse: the model's answer was unusable (not JSON, no
	// choices or message, too many tool calls, over the size limit).
	WorkerModelResponse = "model_response"
	// WorkerNoFinalText: the final answer's content was missing, not a
	// string (null) or blank.
	WorkerNoFinalText = "no_final_text"
	// WorkerContextBudget: the model request could not be cut down to
	// its size budget.
	WorkerContextBudget = "context_budget"
	// WorkerToolListBudget: the tool descriptions alone exceed their
	// budget (an operator configuration problem).
	WorkerToolListBudget = "tool_list_budget"
	// WorkerWriteFailed: the reply could not be written to stdout.
	WorkerWriteFailed = "write_failed"
	// WorkerPanic: the worker recovered from a panic.
	WorkerPanic = "panic"
	// WorkerInternal: any other failure.
	WorkerInternal = "internal"
	// WorkerModelOverloaded: the model's upstream answered 429 (its rate
	// limit) or 529 (overloaded) and the worker's bounded retries, which
	// honour retry-after, were spent.
	WorkerModelOverloaded = "model_overloaded"
	// WorkerModelStream: a streamed model answer carried an error event,
	// was cut before its end, broke its limits or was malformed.
	WorkerModelStream = "model_stream"
)

// workerClasses lists every known worker failure class, in the order above.
var workerClasses = []string{
	WorkerInvalidTurn, WorkerBrokerUnreachable, WorkerBrokerRefused, WorkerBudgetExhausted,
	WorkerUpstreamFailed, WorkerModelResponse, WorkerNoFinalText, WorkerContextBudget,
	WorkerToolListBudget, WorkerWriteFailed, WorkerPanic, WorkerInternal,
	WorkerModelOverloaded, WorkerModelStream,
}

// WorkerClasses returns the known worker failure classes.
func WorkerClasses() []string { return slices.Clone(workerClasses) }

// MaxFailureDetail bounds WorkerFailure.Detail in bytes.
const MaxFailureDetail = 200

// maxFailureLine bounds the line ParseWorkerFailure looks at; the worker's
// own lines are far shorter.
const maxFailureLine = 1024

// WorkerFailure is the worker's account of its failure, reduced to what may
// reach the operator log: a known class and a detail of at most
// MaxFailureDetail bytes of [A-Za-z0-9 _.:-].
type WorkerFailure struct {
	Class  string
	Detail string
}

// ParseWorkerFailure reads the worker's failure line from the end of its
// stderr (Result.StderrTail): the last non-empty line must be a JSON object
// whose "error_class" is a known class. The detail is reduced to the safe
// characters and bounded; a missing or non-string detail is empty. Anything
// else in the tail is ignored, because a compromised worker controls all
// of it: nothing but a known class word and the filtered detail ever leaves
// this function. ok is false when no such line ends the tail.
func ParseWorkerFailure(tail []byte) (f WorkerFailure, ok bool) {
	line := bytes.TrimRight(tail, " \t\r\n")
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if len(line) == 0 || len(line) > maxFailureLine {
		return WorkerFailure{}, false
	}
	var w failureWire
	if wire.Fill(line, &w) != nil || !slices.Contains(workerClasses, string(w.Class)) {
		return WorkerFailure{}, false
	}
	return WorkerFailure{Class: string(w.Class), Detail: safeDetail(w.Detail.Value)}, true
}

// failureWire is the failure line as wire.Fill reads it: error_class a
// string (null is none), detail a string or else nothing.
type failureWire struct {
	Class  wire.String    `json:"error_class"`
	Detail wire.OptString `json:"detail,omitempty"`
}

// safeDetail keeps only [A-Za-z0-9 _.:-], at most MaxFailureDetail bytes.
func safeDetail(s string) string {
	out := make([]byte, 0, min(len(s), MaxFailureDetail))
	for i := 0; i < len(s) && len(out) < MaxFailureDetail; i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || bytes.IndexByte([]byte(" _.:-"), c) >= 0 {
			out = append(out, c)
		}
	}
	return string(out)
}
