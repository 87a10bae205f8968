package worker

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the worker's side of the host compaction routes
// (docs/protocol.md, "Compaction"; docs/protocol.md, "The session protocol"). The wire shapes, their checks and the routes are the
// root package's (compaction.go), shared with the broker; here are the
// worker's own rules on top of them: the request built from the session
// file's messages, and the stricter acceptance of the answer (untrusted:
// parseCompactAnswer checks it all).

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
)

// reportTimeout bounds each report (docs/session.md, "Compaction in the worker").
const reportTimeout = 5 * time.Second

// compactRequest is the body of POST /compaction/compact (docs/protocol.md, "The session protocol"
// PiCompactRequest) for a cut before firstKept. The messages are the
// session file's message objects ({role, content, tool_calls?,
// tool_call_id?}, the chat shape), already projected for no reader
// (privateCompaction), written as JSON.stringify writes them. This worker
// never cuts inside a turn (isSplitTurn false, no turn prefix) and has no
// file tools (no read or modified files).
func compactRequest(reason string, before int, firstKept string, summarize, kept []message, previous string) (wire.CompactRequest, error) {
	req := wire.CompactRequest{
		Reason: reason, TokensBefore: int64(before), FirstKeptEntryID: firstKept, PreviousSummary: previous,
		TurnPrefixMessages: []json.RawMessage{}, ReadFiles: []string{}, ModifiedFiles: []string{},
	}
	var err error
	if req.MessagesToSummarize, err = rawMessages(summarize); err != nil {
		return req, err
	}
	req.KeptMessages, err = rawMessages(kept)
	return req, err
}

// rawMessages is msgs, each as JSON.stringify writes it.
func rawMessages(msgs []message) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		b, err := jsonjs.Marshal(m)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// hostSummary is a host compactor's summary as the worker accepts it.
type hostSummary struct {
	summary string
	details json.RawMessage // an object, with engine set by the broker
}

// errCompactAnswer marks an answer of /compaction/compact that is not the
// docs/protocol.md, "The session protocol" shape; its text is the fallback the worker logs.
var errCompactAnswer = errors.New("the compactor's result is invalid")

// parseCompactAnswer reads the answer of /compaction/compact: the shape of
// docs/protocol.md, "The session protocol" as wire.ParseCompactResponse checks it, and then the worker's
// own rules. A fallback is returned as an error carrying its text (cut
// for the log; an ok:false answer without a string reason is a fallback
// without one). An ok answer is accepted when its summary is at most
// maxSummary units, its firstKeptEntryId is firstKept, tokensBefore (and
// estimatedTokensAfter, when present) not negative, and details present,
// at most maxCompactDetails bytes as received, with engine (the broker
// sets it to the configured compactor's) equal to engine; anything else
// is errCompactAnswer.
func parseCompactAnswer(data []byte, firstKept, engine string) (hostSummary, error) {
	ans, err := wire.ParseCompactResponse(data)
	switch {
	case err != nil && declined(data):
		return hostSummary{}, compactFallback("")
	case err != nil:
		return hostSummary{}, errCompactAnswer
	case !ans.OK:
		return hostSummary{}, compactFallback(ans.Fallback)
	}
	c := ans.Compaction
	details := rawDetails(data)
	detailsEngine, _ := c.Details["engine"].(string)
	if rtsandbox.UTF16Len(c.Summary) > maxSummary || c.FirstKeptEntryID != firstKept || c.TokensBefore < 0 ||
		(c.EstimatedTokensAfter != nil && *c.EstimatedTokensAfter < 0) ||
		c.Details == nil || len(details) > maxCompactDetails || detailsEngine != engine {
		return hostSummary{}, errCompactAnswer
	}
	return hostSummary{summary: c.Summary, details: compact(details)}, nil
}

// declined reports whether data is an object whose ok is false.
func declined(data []byte) bool {
	var w struct {
		OK wire.Bool `json:"ok"`
	}
	return wire.Fill(data, &w) == nil && !bool(w.OK)
}

// rawDetails is compaction.details of an answer as received, so that the
// worker keeps its members in their order. parseCompactAnswer reads it
// of an answer wire.ParseCompactResponse accepted, so both are objects.
func rawDetails(data []byte) json.RawMessage {
	var w compactDetailsWire
	if wire.Fill(data, &w) != nil {
		return nil
	}
	return json.RawMessage(w.Compaction.Details)
}

// compactDetailsWire is the one member of a compactor's answer the
// worker reads again: compaction.details, raw.
type compactDetailsWire struct {
	Compaction detailsWire `json:"compaction"`
}

type detailsWire struct {
	Details wire.Object `json:"details"`
}

func (d *detailsWire) UnmarshalJSON(b []byte) error {
	type plain detailsWire
	return wire.Fill(b, (*plain)(d))
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

// int64p is n as an optional member of a report.
func int64p(n int) *int64 {
	v := int64(n)
	return &v
}
