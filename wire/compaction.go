package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// The host compaction protocol (docs/protocol.md, "Compaction"; docs/protocol.md, "The session protocol"): the session
// worker asks the broker's optional host compactor for a summary of the
// conversation it is about to cut (POST /compaction/compact) and reports
// every compaction it ran (POST /compaction/report). Host and worker share
// these shapes and their checks, so a bound cannot drift between them.
// Lengths are UTF-16 code units like the reference's; numbers are
// JavaScript safe integers, read through json.Number so that nothing is
// rounded before it is checked.

// Compaction routes (docs/session.md, "Routes and statuses"). Both need a bound turn and take no query.
const (
	RouteCompactionCompact = "/compaction/compact"
	RouteCompactionReport  = "/compaction/report"
)

// Limits and defaults of host compaction (docs/session.md, "Routes and statuses"; docs/protocol.md, "Compaction"; docs/protocol.md, "The session protocol"; docs/session.md, "Compaction in the worker").
const (
	MaxCompactsPerTurn      = 3        // compact requests per bound turn
	MaxCompactionReports    = 16       // reports per bound turn (429 after)
	MaxCompactionReportBody = 64 << 10 // POST /compaction/report
	DefaultCompactorRequest = 32 << 20 // a compactor's default maxRequestBytes
	MaxCompactorRequest     = 96 << 20 // the largest maxRequestBytes
	DefaultCompactorTimeout = 120 * time.Second
	MinCompactorTimeout     = time.Second
	MaxCompactorTimeout     = 600 * time.Second
	// MinCompactorWait is the least time a compaction may have (docs/protocol.md, "Compaction"
	// step 5): less, and the worker summarises on its own.
	MinCompactorWait  = time.Second
	MaxCompactEntryID = 256   // firstKeptEntryId
	MaxReportReason   = 1000  // a bypass report's reason
	MaxReportError    = 10000 // an end report's error
	// CompactionCeiling is the hard tier of docs/session.md, "Compaction in the worker" in tokens: above it the
	// worker bypasses the host compactor; the bypass log names it.
	CompactionCeiling = 500000
)

// Why a compaction runs (docs/protocol.md, "The session protocol"): the guest or worker asked (manual, logged
// as trigger "self"), the context passed its threshold, or the model
// refused an overflowing request.
const (
	CompactManual    = "manual"
	CompactThreshold = "threshold"
	CompactOverflow  = "overflow"
)

// Report types and the engines an end report names (docs/protocol.md, "The session protocol").
const (
	ReportBypass = "bypass"
	ReportEnd    = "end"
	// EngineExtension: the host compactor wrote the summary; EnginePi:
	// the worker's own summary (the reference's Pi agent's, hence the
	// name on the wire).
	EngineExtension = "extension"
	EnginePi        = "pi"
)

// Errors of the compaction protocol. All wrap ErrInvalid.
var (
	ErrCompactRequest   = fmt.Errorf("%w: Invalid compact request", rtsandbox.ErrInvalid)
	ErrCompaction       = fmt.Errorf("%w: Invalid compaction", rtsandbox.ErrInvalid)
	ErrCompactResponse  = fmt.Errorf("%w: Invalid compact response", rtsandbox.ErrInvalid)
	ErrCompactionReport = fmt.Errorf("%w: Invalid report", rtsandbox.ErrInvalid)
)

// DefaultCompactorTimeoutFor is a host compactor's timeout when the
// operator names none (docs/protocol.md, "Compaction"): a third of the turn in whole
// milliseconds, at least 1 s and at most 120 s.
func DefaultCompactorTimeoutFor(turn time.Duration) time.Duration {
	return max(MinCompactorTimeout, min(DefaultCompactorTimeout, (turn/3).Truncate(time.Millisecond)))
}

// CompactorTimeoutFits is the runtime's rule "The compactor's timeout must
// leave half the turn" (docs/protocol.md, "Compaction"): timeout is at most half of turn.
func CompactorTimeoutFits(timeout, turn time.Duration) bool {
	return timeout <= turn/2
}

// CompactRequest is the body of POST /compaction/compact (docs/protocol.md, "The session protocol"). The
// messages are the worker's conversation entries as JSON objects with a
// string role, passed on as received; the compactor reads them as data.
// Field order is the wire order.
type CompactRequest struct {
	Reason              string            `json:"reason"`
	TokensBefore        int64             `json:"tokensBefore"`
	FirstKeptEntryID    string            `json:"firstKeptEntryId"`
	IsSplitTurn         bool              `json:"isSplitTurn"`
	MessagesToSummarize []json.RawMessage `json:"messagesToSummarize"`
	TurnPrefixMessages  []json.RawMessage `json:"turnPrefixMessages"`
	KeptMessages        []json.RawMessage `json:"keptMessages"`
	PreviousSummary     string            `json:"previousSummary,omitempty"`
	CustomInstructions  string            `json:"customInstructions,omitempty"`
	ReadFiles           []string          `json:"readFiles"`
	ModifiedFiles       []string          `json:"modifiedFiles"`
}

// MarshalJSON writes the request with [] for nil lists, as the wire wants,
// and <, > and & as they are (marshalWire).
func (r CompactRequest) MarshalJSON() ([]byte, error) {
	type plain CompactRequest
	p := plain(r)
	for _, l := range []*[]json.RawMessage{&p.MessagesToSummarize, &p.TurnPrefixMessages, &p.KeptMessages} {
		if *l == nil {
			*l = []json.RawMessage{}
		}
	}
	for _, l := range []*[]string{&p.ReadFiles, &p.ModifiedFiles} {
		if *l == nil {
			*l = []string{}
		}
	}
	return marshalWire(p)
}

// Validate applies the rules of docs/protocol.md, "The session protocol" to a request built in Go: a known
// reason, tokensBefore a safe integer ≥ 0, firstKeptEntryId 1–256 units,
// and every message a JSON object with a string role.
func (r CompactRequest) Validate() error {
	if !r.validScalars() {
		return ErrCompactRequest
	}
	for _, l := range [][]json.RawMessage{r.MessagesToSummarize, r.TurnPrefixMessages, r.KeptMessages} {
		for _, m := range l {
			if !validMessage(m) {
				return ErrCompactRequest
			}
		}
	}
	return nil
}

// ParseCompactRequest reads a compact request as the broker checks it
// (docs/protocol.md, "Compaction"): one JSON object whose reason is manual, threshold or
// overflow, tokensBefore a safe integer ≥ 0, firstKeptEntryId a string of
// 1–256 units, isSplitTurn a boolean, the three message lists arrays of
// objects with a string role, previousSummary and customInstructions
// absent or strings, and readFiles and modifiedFiles arrays of strings.
// Members are matched exactly (not case-folded) and unknown ones dropped.
// Anything else is ErrCompactRequest.
func ParseCompactRequest(data []byte) (CompactRequest, error) {
	var w compactRequestWire
	if !fill(data, &w) {
		return CompactRequest{}, ErrCompactRequest
	}
	r := CompactRequest{
		Reason: string(w.Reason), TokensBefore: int64(w.TokensBefore), FirstKeptEntryID: string(w.FirstKeptEntryID),
		IsSplitTurn: bool(w.IsSplitTurn), MessagesToSummarize: w.MessagesToSummarize, TurnPrefixMessages: w.TurnPrefixMessages,
		KeptMessages: w.KeptMessages, PreviousSummary: string(w.PreviousSummary), CustomInstructions: string(w.CustomInstructions),
		ReadFiles: w.ReadFiles, ModifiedFiles: w.ModifiedFiles,
	}
	if r.ValidateScalars() != nil { // the messages were checked as they were read
		return CompactRequest{}, ErrCompactRequest
	}
	return r, nil
}

// compactRequestWire is a compact request as it arrives (fill).
type compactRequestWire struct {
	Reason              String   `json:"reason"`
	TokensBefore        Int      `json:"tokensBefore"`
	FirstKeptEntryID    String   `json:"firstKeptEntryId"`
	IsSplitTurn         Bool     `json:"isSplitTurn"`
	MessagesToSummarize Messages `json:"messagesToSummarize"`
	TurnPrefixMessages  Messages `json:"turnPrefixMessages"`
	KeptMessages        Messages `json:"keptMessages"`
	PreviousSummary     String   `json:"previousSummary,omitempty"`
	CustomInstructions  String   `json:"customInstructions,omitempty"`
	ReadFiles           Strings  `json:"readFiles"`
	ModifiedFiles       Strings  `json:"modifiedFiles"`
}

// ValidateScalars applies the rules of docs/protocol.md, "The session protocol" to the request's scalar
// members, for a reader that checked the rest as it read them (the
// broker's, under its decoding budget): a known reason, tokensBefore a
// safe integer ≥ 0, firstKeptEntryId 1–256 units. Anything else is
// ErrCompactRequest.
func (r CompactRequest) ValidateScalars() error {
	if !r.validScalars() {
		return ErrCompactRequest
	}
	return nil
}

// validScalars checks the reason, tokensBefore and firstKeptEntryId.
func (r CompactRequest) validScalars() bool {
	return validReason(r.Reason) && safeInt(r.TokensBefore) && r.TokensBefore >= 0 && validEntryID(r.FirstKeptEntryID)
}

// Compaction is a host compactor's summary (docs/protocol.md, "The session protocol"): the text that replaces
// the conversation before FirstKeptEntryID, the token count before it and
// an estimate after, and details the compactor may add (the broker sets
// details.engine). Field order is the wire order.
type Compaction struct {
	Summary              string         `json:"summary"`
	FirstKeptEntryID     string         `json:"firstKeptEntryId"`
	TokensBefore         int64          `json:"tokensBefore"`
	EstimatedTokensAfter *int64         `json:"estimatedTokensAfter,omitempty"`
	Details              map[string]any `json:"details,omitempty"`
}

// Validate applies the result checks of docs/protocol.md, "Compaction": a non-empty
// summary, the request's firstKeptEntryId, tokensBefore and (if present)
// estimatedTokensAfter safe integers, and details absent or an object
// that encodes as JSON. Anything else is ErrCompaction.
func (c Compaction) Validate(firstKeptEntryID string) error {
	switch {
	case c.Summary == "", c.FirstKeptEntryID != firstKeptEntryID, !safeInt(c.TokensBefore),
		c.EstimatedTokensAfter != nil && !safeInt(*c.EstimatedTokensAfter):
		return ErrCompaction
	}
	if c.Details != nil {
		if _, err := json.Marshal(c.Details); err != nil {
			return ErrCompaction
		}
	}
	return nil
}

// CompactResponse is the broker's answer to a compact request (docs/protocol.md, "The session protocol"):
// ok with the compaction, or not ok with the fallback reason, upon which
// the worker writes its own summary.
type CompactResponse struct {
	OK         bool
	Compaction *Compaction
	Fallback   string
}

// MarshalJSON writes exactly one of the two shapes.
func (r CompactResponse) MarshalJSON() ([]byte, error) {
	if !r.OK || r.Compaction == nil {
		return json.Marshal(struct {
			OK       bool   `json:"ok"`
			Fallback string `json:"fallback"`
		}{false, r.Fallback})
	}
	return json.Marshal(struct {
		OK         bool        `json:"ok"`
		Compaction *Compaction `json:"compaction"`
	}{true, r.Compaction})
}

// ParseCompactResponse reads the broker's answer as the worker checks it:
// ok a boolean; for ok, compaction an object with a non-empty summary, a
// firstKeptEntryId of 1–256 units, tokensBefore and (if present)
// estimatedTokensAfter safe integers and details absent or an object
// (its numbers kept as json.Number); otherwise fallback a string.
// Anything else is ErrCompactResponse.
func ParseCompactResponse(data []byte) (CompactResponse, error) {
	obj, isObj := members(data)
	var w struct {
		OK Bool `json:"ok"`
	}
	if !isObj || !fillFrom(obj, &w) {
		return CompactResponse{}, ErrCompactResponse
	}
	if !w.OK {
		var f struct {
			Fallback String `json:"fallback"`
		}
		if !fillFrom(obj, &f) {
			return CompactResponse{}, ErrCompactResponse
		}
		return CompactResponse{Fallback: string(f.Fallback)}, nil
	}
	var c struct {
		Compaction compactionWire `json:"compaction"`
	}
	if !fillFrom(obj, &c) {
		return CompactResponse{}, ErrCompactResponse
	}
	comp, err := c.Compaction.compaction()
	if err != nil {
		return CompactResponse{}, ErrCompactResponse
	}
	return CompactResponse{OK: true, Compaction: &comp}, nil
}

// compactionWire is a compaction object of a compact response as it
// arrives: an object of its own, filled when the response's member is
// decoded.
type compactionWire struct {
	Summary              String `json:"summary"`
	FirstKeptEntryID     String `json:"firstKeptEntryId"`
	TokensBefore         Int    `json:"tokensBefore"`
	EstimatedTokensAfter *Int   `json:"estimatedTokensAfter,omitempty"`
	Details              Object `json:"details,omitempty"`
}

func (w *compactionWire) UnmarshalJSON(b []byte) error {
	type plain compactionWire // fill, not this method
	if !fill(b, (*plain)(w)) {
		return ErrCompaction
	}
	return nil
}

// compaction is the Compaction w holds, validated; its details' numbers
// are kept as json.Number.
func (w *compactionWire) compaction() (Compaction, error) {
	c := Compaction{Summary: string(w.Summary), FirstKeptEntryID: string(w.FirstKeptEntryID),
		TokensBefore: int64(w.TokensBefore), EstimatedTokensAfter: w.EstimatedTokensAfter.ptr()}
	if w.Details != nil {
		dec := json.NewDecoder(bytes.NewReader(w.Details))
		dec.UseNumber()
		if dec.Decode(&c.Details) != nil {
			return Compaction{}, ErrCompaction
		}
	}
	if !validEntryID(c.FirstKeptEntryID) || c.Validate(c.FirstKeptEntryID) != nil {
		return Compaction{}, ErrCompaction
	}
	return c, nil
}

// CompactionReport is the body of POST /compaction/report (docs/protocol.md, "The session protocol"), one of
// two shapes by Type:
//
//   - ReportBypass: {type, reason (≤ 1000 units), tokensBefore (≥ 0)},
//     sent when the worker skipped the host compactor;
//   - ReportEnd: {type, reason (manual|threshold|overflow), aborted,
//     willRetry, engine? (extension|pi), tokensBefore?, tokensAfter?,
//     contextAfter?, nextCompactionAt? (safe integers ≥ 0), error?
//     (≤ 10,000 units)}, sent after each compaction.
//
// The optional numbers are nil when absent; Engine and Error are "" when
// absent.
type CompactionReport struct {
	Type             string
	Reason           string
	TokensBefore     *int64
	Aborted          bool
	WillRetry        bool
	Engine           string
	TokensAfter      *int64
	ContextAfter     *int64
	NextCompactionAt *int64
	Error            string
}

// Validate applies the rules of docs/protocol.md, "The session protocol" to a report built in Go.
func (r CompactionReport) Validate() error {
	nonNeg := func(p *int64) bool { return p == nil || (safeInt(*p) && *p >= 0) }
	switch r.Type {
	case ReportBypass:
		if rtsandbox.UTF16Len(r.Reason) > MaxReportReason || r.TokensBefore == nil || !nonNeg(r.TokensBefore) {
			return ErrCompactionReport
		}
		return nil
	case ReportEnd:
		if !validReason(r.Reason) || (r.Engine != "" && r.Engine != EngineExtension && r.Engine != EnginePi) ||
			!nonNeg(r.TokensBefore) || !nonNeg(r.TokensAfter) || !nonNeg(r.ContextAfter) || !nonNeg(r.NextCompactionAt) ||
			rtsandbox.UTF16Len(r.Error) > MaxReportError {
			return ErrCompactionReport
		}
		return nil
	}
	return ErrCompactionReport
}

// MarshalJSON writes the report in its type's shape, optional members
// only when present, and <, > and & as they are (marshalWire).
func (r CompactionReport) MarshalJSON() ([]byte, error) {
	if r.Type == ReportBypass {
		var tokens int64
		if r.TokensBefore != nil {
			tokens = *r.TokensBefore
		}
		return marshalWire(struct {
			Type         string `json:"type"`
			Reason       string `json:"reason"`
			TokensBefore int64  `json:"tokensBefore"`
		}{r.Type, r.Reason, tokens})
	}
	return marshalWire(struct {
		Type             string `json:"type"`
		Reason           string `json:"reason"`
		Aborted          bool   `json:"aborted"`
		WillRetry        bool   `json:"willRetry"`
		Engine           string `json:"engine,omitempty"`
		TokensBefore     *int64 `json:"tokensBefore,omitempty"`
		TokensAfter      *int64 `json:"tokensAfter,omitempty"`
		ContextAfter     *int64 `json:"contextAfter,omitempty"`
		NextCompactionAt *int64 `json:"nextCompactionAt,omitempty"`
		Error            string `json:"error,omitempty"`
	}{r.Type, r.Reason, r.Aborted, r.WillRetry, r.Engine, r.TokensBefore, r.TokensAfter, r.ContextAfter, r.NextCompactionAt, r.Error})
}

// ParseCompactionReport reads a report as the broker checks it (docs/protocol.md, "Compaction"):
// one JSON object of either shape, members matched exactly, a present
// member of the wrong type (null included) refused. Anything else is
// ErrCompactionReport.
func ParseCompactionReport(data []byte) (CompactionReport, error) {
	obj, isObj := members(data)
	var head struct {
		Type   String `json:"type"`
		Reason String `json:"reason"`
	}
	if !isObj || !fillFrom(obj, &head) {
		return CompactionReport{}, ErrCompactionReport
	}
	r := CompactionReport{Type: string(head.Type), Reason: string(head.Reason)}
	switch r.Type {
	case ReportBypass:
		var w struct {
			TokensBefore Int `json:"tokensBefore"`
		}
		if !fillFrom(obj, &w) {
			return CompactionReport{}, ErrCompactionReport
		}
		r.TokensBefore = w.TokensBefore.ptr()
	case ReportEnd:
		var w reportEndWire
		if !fillFrom(obj, &w) || w.Engine != nil && *w.Engine == "" {
			return CompactionReport{}, ErrCompactionReport
		}
		r.Aborted, r.WillRetry, r.Error = bool(w.Aborted), bool(w.WillRetry), string(w.Error)
		if w.Engine != nil {
			r.Engine = string(*w.Engine)
		}
		r.TokensBefore, r.TokensAfter, r.ContextAfter, r.NextCompactionAt = w.TokensBefore.ptr(), w.TokensAfter.ptr(), w.ContextAfter.ptr(), w.NextCompactionAt.ptr()
	}
	if r.Validate() != nil {
		return CompactionReport{}, ErrCompactionReport
	}
	return r, nil
}

// reportEndWire is the rest of an end report as it arrives (fill); a
// present engine may not be empty.
type reportEndWire struct {
	Aborted          Bool    `json:"aborted"`
	WillRetry        Bool    `json:"willRetry"`
	Engine           *String `json:"engine,omitempty"`
	TokensBefore     *Int    `json:"tokensBefore,omitempty"`
	TokensAfter      *Int    `json:"tokensAfter,omitempty"`
	ContextAfter     *Int    `json:"contextAfter,omitempty"`
	NextCompactionAt *Int    `json:"nextCompactionAt,omitempty"`
	Error            String  `json:"error,omitempty"`
}

// marshalWire is json.Marshal without HTML escaping: the worker sends
// the request and its reports as JSON.stringify writes them (package
// jsonjs), which an encoder calling these methods cannot undo, so a
// body's size is the reference's.
func marshalWire(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// members decodes one JSON object (and nothing after it) into its
// members, matched exactly by name.
func members(data []byte) (map[string]json.RawMessage, bool) {
	// What decodeObjectStrict accepts (FuzzMembersAgreesWithDecoder),
	// without copying data into a decoder's buffer: json.Unmarshal
	// refuses what follows the object as the decoder's last Token does.
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, false
	}
	var obj map[string]json.RawMessage
	return obj, json.Unmarshal(data, &obj) == nil
}

// maxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER.
const maxSafeInteger = 1<<53 - 1

func safeInt(n int64) bool { return n >= -maxSafeInteger && n <= maxSafeInteger }

func validReason(r string) bool {
	return r == CompactManual || r == CompactThreshold || r == CompactOverflow
}

func validEntryID(id string) bool {
	n := rtsandbox.UTF16Len(id)
	return n >= 1 && n <= MaxCompactEntryID
}

// isJSONObject reports whether raw is a JSON object (not null, not an
// array).
func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// validMessage: a JSON object whose member "role" (exactly) is a string.
func validMessage(raw json.RawMessage) bool {
	var m map[string]json.RawMessage // a map on purpose: a conversation message, kept as received; only role is ours
	if !isJSONObject(raw) || json.Unmarshal(raw, &m) != nil {
		return false
	}
	_, ok := jsonString(m["role"])
	return ok
}

// jsonString reads a JSON string; absent, null and other types are not.
func jsonString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// SafeInteger is Number.isSafeInteger on a JSON value: a number whose
// value, read as JavaScript reads it (the nearest double), is an integer
// within ±(2^53−1). 1.0 and 1e3 are; 1.5, 2^53, 1e400 and "1" are not.
// Host and worker read the protocol's integers with it.
func SafeInteger(raw json.RawMessage) (int64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil || f != float64(int64(f)) || f > maxSafeInteger || f < -maxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

// jsonMessages reads an array of conversation messages (validMessage),
// each kept as received.
func jsonMessages(raw json.RawMessage) ([]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	var out []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &out) != nil {
		return nil, false
	}
	for _, m := range out {
		if !validMessage(m) {
			return nil, false
		}
	}
	return out, true
}

// jsonStrings reads an array of strings.
func jsonStrings(raw json.RawMessage) ([]string, bool) {
	raw = bytes.TrimSpace(raw)
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := jsonString(it)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
