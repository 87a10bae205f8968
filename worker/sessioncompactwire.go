package worker

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// This file is the worker's side of the host compaction routes (session
// spec §2.11, §4.5): the request it posts to /compaction/compact, the
// answer it reads back (untrusted: parseCompactAnswer checks it all), and
// the reports it posts to /compaction/report.

// The host compaction routes (§2.11).
const (
	routeCompactionCompact = "/compaction/compact"
	routeCompactionReport  = "/compaction/report"
)

// Bounds of the compaction exchange with the broker.
const (
	// maxSummary bounds a summary in UTF-16 units, the host compactor's
	// (longer is invalid) and the worker's own (longer is cut): it rides
	// in front of every later request.
	maxSummary = 100_000
	// maxCompactAnswer bounds the answer of /compaction/compact as the
	// worker reads it: a summary at its bound and details.
	maxCompactAnswer = 1 << 20
	// maxCompactDetails bounds the details the worker keeps with a host
	// summary; bigger details make the answer invalid.
	maxCompactDetails = 64 << 10
	// maxFallbackLog bounds the fallback reason the worker logs.
	maxFallbackLog = 2000
	// maxReportError bounds a report's error text (§4.5).
	maxReportError = 10_000
)

// reportTimeout bounds each report (§5.6).
const reportTimeout = 5 * time.Second

// compactRequest is the body of POST /compaction/compact (§4.5
// PiCompactRequest). The messages are the session file's message
// objects ({role, content, tool_calls?, tool_call_id?}, the chat shape),
// projected for no reader (privateCompaction). This worker never cuts
// inside a turn (isSplitTurn false, no turn prefix) and has no file
// tools (no read or modified files).
type compactRequest struct {
	Reason              string    `json:"reason"`
	TokensBefore        int       `json:"tokensBefore"`
	FirstKeptEntryID    string    `json:"firstKeptEntryId"`
	IsSplitTurn         bool      `json:"isSplitTurn"`
	MessagesToSummarize []message `json:"messagesToSummarize"`
	TurnPrefixMessages  []message `json:"turnPrefixMessages"`
	KeptMessages        []message `json:"keptMessages"`
	PreviousSummary     string    `json:"previousSummary,omitempty"`
	CustomInstructions  string    `json:"customInstructions,omitempty"`
	ReadFiles           []string  `json:"readFiles"`
	ModifiedFiles       []string  `json:"modifiedFiles"`
}

// hostSummary is a host compactor's summary as the worker accepts it.
type hostSummary struct {
	summary string
	details json.RawMessage // an object, with engine set by the broker
}

// errCompactAnswer marks an answer of /compaction/compact that is not the
// §4.5 shape; its text is the fallback the worker logs.
var errCompactAnswer = errors.New("the compactor's result is invalid")

// parseCompactAnswer reads the answer of /compaction/compact (§4.5):
// {ok:true, compaction:{summary, firstKeptEntryId, tokensBefore,
// estimatedTokensAfter?, details?}} or {ok:false, fallback}. A fallback
// is returned as an error carrying its text (cut for the log). An ok
// answer is accepted when its summary is a string of 1–maxSummary units,
// its firstKeptEntryId is firstKept, tokensBefore (and
// estimatedTokensAfter, when present) a safe integer, and details an
// object of at most maxCompactDetails bytes whose engine is engine (the
// broker sets it to the configured compactor's); anything else is
// errCompactAnswer.
func parseCompactAnswer(data []byte, firstKept, engine string) (hostSummary, error) {
	obj, ok := object(data)
	if !ok {
		return hostSummary{}, errCompactAnswer
	}
	okAnswer, isBool := boolean(obj["ok"])
	switch {
	case !isBool:
		return hostSummary{}, errCompactAnswer
	case !okAnswer:
		text, _ := str(obj["fallback"])
		return hostSummary{}, compactFallback(text)
	}
	c, ok := object(obj["compaction"])
	if !ok {
		return hostSummary{}, errCompactAnswer
	}
	summary, okSummary := str(c["summary"])
	kept, okKept := str(c["firstKeptEntryId"])
	_, okBefore := safeInt(c["tokensBefore"])
	okAfter := true
	if raw, present := c["estimatedTokensAfter"]; present {
		_, okAfter = safeInt(raw)
	}
	details, okDetails := object(c["details"])
	detailsEngine, _ := str(details["engine"])
	if !okSummary || summary == "" || rtsandbox.UTF16Len(summary) > maxSummary || !okKept || kept != firstKept ||
		!okBefore || !okAfter || !okDetails || len(c["details"]) > maxCompactDetails || detailsEngine != engine {
		return hostSummary{}, errCompactAnswer
	}
	return hostSummary{summary: summary, details: compact(c["details"])}, nil
}

// compactFallback is a broker's fallback reason as an error.
type compactFallback string

func (f compactFallback) Error() string {
	if f == "" {
		return "the broker gave no reason"
	}
	return rtsandbox.PrefixUTF16(string(f), maxFallbackLog)
}

// statusFallback is the fallback of a non-OK answer.
func statusFallback(status int) error {
	return compactFallback("the broker answered " + strconv.Itoa(status))
}

// bypassReport is a report of §4.5: the host compactor skipped.
type bypassReport struct {
	Type         string `json:"type"` // "bypass"
	Reason       string `json:"reason"`
	TokensBefore int    `json:"tokensBefore"`
}

// endReport is a report of §4.5: a compaction ended. The sizes are there
// when it succeeded, error when it did not.
type endReport struct {
	Type             string `json:"type"` // "end"
	Reason           string `json:"reason"`
	Aborted          bool   `json:"aborted"`
	WillRetry        bool   `json:"willRetry"`
	Engine           string `json:"engine,omitempty"`
	TokensBefore     *int   `json:"tokensBefore,omitempty"`
	TokensAfter      *int   `json:"tokensAfter,omitempty"`
	ContextAfter     *int   `json:"contextAfter,omitempty"`
	NextCompactionAt *int   `json:"nextCompactionAt,omitempty"`
	Error            string `json:"error,omitempty"`
}
