package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The host compaction routes (docs/protocol.md, "Compaction"). Both need the bound
// turn, captured when the request arrives (410 "Turn ended" without one,
// 404 for any method but POST), and carry no credential to the worker:
//
//   - POST /compaction/report logs one of the worker's compaction reports
//     (wire.CompactionReport) for the operator: at most 16 a turn
//     (429 "Report budget exhausted" after), a body of at most 64 KiB read
//     under the turn, 400 "Invalid report" for anything else, 200
//     "Accepted".
//   - POST /compaction/compact asks the host compactor (Compactor) for a
//     summary of the conversation the worker is about to cut. It never
//     fails hard: every problem is 200 {ok:false, fallback:<reason>}, upon
//     which the worker writes its own summary, and a warn log line.
//
// The log texts are the reference's, for operator parity: "Pi's summary"
// is the worker's own summary (the reference's worker is the Pi agent).

// Compactor is a host compactor (docs/protocol.md, "Compaction"): host code, trusted, that turns a
// worker's compact request into a summary, typically with a model call
// made on the host with the host's credential. CheckCompactor gives the
// rules of its three settings.
type Compactor interface {
	// Engine names the compactor, ^[a-zA-Z0-9@/._-]{1,100}$. The worker
	// learns it from GET /worker/config; the broker sets it as the
	// answer's details.engine.
	Engine() string
	// Timeout bounds one compaction, 1 s..600 s; a turn's compaction
	// gets at most half of the turn's remaining time.
	Timeout() time.Duration
	// MaxRequestBytes bounds a compact request body, 1 B..96 MiB.
	MaxRequestBytes() int64
	// Compact summarises req for channel, the host-bound turn's channel
	// (never one from the body). ctx ends at the timeout, at the turn's
	// end or when the worker goes away; a compactor that ignores it keeps
	// the broker's one compaction slot until it returns. A nil compaction
	// with a nil error declines (the worker summarises on its own). The
	// error's text may reach the worker, after the broker masked the
	// model credential and scrubbed it.
	Compact(ctx context.Context, req wire.CompactRequest, channel rtsandbox.ChannelKey) (*wire.Compaction, error)
}

// ErrCompactor refuses a compactor whose settings break the rules of
// docs/protocol.md, "Compaction" (CheckCompactor).
var ErrCompactor = fmt.Errorf("%w: invalid host compactor", rtsandbox.ErrInvalid)

// compactorEngineRE is the engine rule of docs/protocol.md, "Compaction".
var compactorEngineRE = regexp.MustCompile(`^[a-zA-Z0-9@/._-]{1,100}$`)

// CheckCompactor applies the constructor rules of docs/protocol.md, "Compaction": the engine name
// matches ^[a-zA-Z0-9@/._-]{1,100}$, the timeout is 1 s..600 s and
// maxRequestBytes 1 B..96 MiB. The error wraps ErrCompactor and names the
// rule.
func CheckCompactor(c Compactor) error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: none given", ErrCompactor)
	case !compactorEngineRE.MatchString(c.Engine()):
		return fmt.Errorf("%w: engine %q does not match %s", ErrCompactor, c.Engine(), compactorEngineRE)
	case c.Timeout() < wire.MinCompactorTimeout || c.Timeout() > wire.MaxCompactorTimeout:
		return fmt.Errorf("%w: timeout %v outside %v..%v", ErrCompactor, c.Timeout(), wire.MinCompactorTimeout, wire.MaxCompactorTimeout)
	case c.MaxRequestBytes() < 1 || c.MaxRequestBytes() > wire.MaxCompactorRequest:
		return fmt.Errorf("%w: request limit %d outside 1..%d bytes", ErrCompactor, c.MaxRequestBytes(), wire.MaxCompactorRequest)
	}
	return nil
}

// The fixed texts of the report route (docs/session.md, "Routes and statuses").
const (
	sessReportBudget  = "Report budget exhausted"
	sessInvalidReport = "Invalid report"
)

// The fallback reasons of docs/protocol.md, "Compaction", and the log messages.
const (
	fallbackNoCompactor = "the host has no compactor"
	fallbackRunning     = "a compaction is already running"
	fallbackAsked       = "the turn already asked for 3 compactions"
	fallbackLittleTime  = "the turn has too little time left for the host compactor"
	fallbackInvalid     = "the request is invalid"
	fallbackDeclined    = "the compactor declined"
	fallbackBadResult   = "the compactor's result is invalid"
	fallbackAborted     = "the compaction was aborted"

	logCompactFallback = "compaction falls back to Pi's summary"
	logCompactAnswered = "host compactor answered"
	logReportBypass    = "compaction skips the extension for Pi's summary"
	logReportFailed    = "compaction failed"
	logReportCompacted = "conversation compacted"

	// maxCompactorError bounds the scrubbed error text of a failed
	// compactor, in UTF-16 units.
	maxCompactorError = 2000
	// keyLookupTimeout bounds the model credential's lookup that masks
	// a compactor's error.
	keyLookupTimeout = 5 * time.Second
)

func fallbackOver(limit int64) string { return fmt.Sprintf("the request is over %d bytes", limit) }

func fallbackSlow(timeout time.Duration) string {
	return fmt.Sprintf("the compactor took over %d ms", timeout.Milliseconds())
}

// Causes of a compaction's end, told apart by context.Cause.
var (
	errCompactTimeout    = errors.New("host compactor timed out")
	errCompactAborted    = errors.New("turn ended during compaction")
	errCompactorPanicked = errors.New("host compactor panicked")
)

// serveCompaction serves /compaction/*: non-POST is 404; without a live
// bound turn 410; then the two routes, any other path 404.
func (s *Session) serveCompaction(w http.ResponseWriter, r *http.Request, path string) {
	if r.Method != http.MethodPost {
		writeText(w, http.StatusNotFound, sessNotFound)
		return
	}
	sc := s.boundTurn()
	if sc == nil {
		writeText(w, http.StatusGone, sessTurnEnded)
		return
	}
	switch path {
	case wire.RouteCompactionCompact:
		writeJSON(w, s.compact(w, r, sc))
	case wire.RouteCompactionReport:
		s.serveReport(w, r, sc)
	default:
		writeText(w, http.StatusNotFound, sessNotFound)
	}
}

// boundTurn returns the bound turn when it is live: not ended, not
// failed. The startup window is no turn.
func (s *Session) boundTurn() *scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc := s.bound; sc != nil && sc.ctx.Err() == nil && !sc.failed {
		return sc
	}
	return nil
}

// serveReport is POST /compaction/report: the turn's report budget is
// spent first (an invalid report spends it too), then the body is read
// under the turn, checked and logged.
func (s *Session) serveReport(w http.ResponseWriter, r *http.Request, sc *scope) {
	s.mu.Lock()
	spent := sc.reports >= wire.MaxCompactionReports
	if !spent {
		sc.reports++
	}
	s.mu.Unlock()
	if spent {
		writeText(w, http.StatusTooManyRequests, sessReportBudget)
		return
	}
	body, err := readBody(sc.ctx, w, r, wire.MaxCompactionReportBody)
	if err != nil {
		writeText(w, http.StatusBadRequest, sessInvalidReport)
		return
	}
	rep, err := wire.ParseCompactionReport(body)
	if err != nil {
		writeText(w, http.StatusBadRequest, sessInvalidReport)
		return
	}
	s.logReport(sc, rep)
	writeText(w, http.StatusOK, sessAccepted)
}

// logReport writes a report's log line (docs/protocol.md, "Compaction"): a bypass, a failed
// compaction (an end report naming no engine), or a compaction. The
// worker's texts are blanked of control characters and cut.
func (s *Session) logReport(sc *scope, rep wire.CompactionReport) {
	channel := string(sc.turn.binding.Channel)
	if rep.Type == wire.ReportBypass {
		s.b.log.Info(logReportBypass, "channel", channel, "reason", logText(rep.Reason),
			"tokensBefore", *rep.TokensBefore, "ceiling", wire.CompactionCeiling)
		return
	}
	trigger := rep.Reason
	if trigger == wire.CompactManual {
		trigger = "self"
	}
	if rep.Engine == "" {
		attrs := []any{"channel", channel, "trigger", trigger, "aborted", rep.Aborted}
		if rep.Error != "" {
			attrs = append(attrs, "error", logText(rep.Error))
		}
		s.b.log.Warn(logReportFailed, attrs...)
		return
	}
	attrs := []any{"channel", channel, "trigger", trigger, "engine", rep.Engine}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"tokensBefore", rep.TokensBefore}, {"tokensAfter", rep.TokensAfter}, {"contextAfter", rep.ContextAfter}, {"nextCompactionAt", rep.NextCompactionAt}} {
		if f.v != nil {
			attrs = append(attrs, f.name, *f.v)
		}
	}
	s.b.log.Info(logReportCompacted, attrs...)
}

// compact runs POST /compaction/compact, the steps of docs/protocol.md, "Compaction" in order, and
// returns the answer; every problem is a fallback, logged.
func (s *Session) compact(w http.ResponseWriter, r *http.Request, sc *scope) wire.CompactResponse {
	c := s.cfg.Compactor
	if c == nil { // step 1
		return s.fallback(sc, "", fallbackNoCompactor)
	}
	engine := c.Engine()
	if reason := s.takeCompaction(sc); reason != "" { // steps 2 and 3
		return s.fallback(sc, engine, reason)
	}
	held := true // the slot, until the compactor's goroutine owns it
	defer func() {
		if held {
			s.endCompaction()
		}
	}()
	limit := c.MaxRequestBytes()
	if r.ContentLength > limit { // step 4
		return s.fallback(sc, engine, fallbackOver(limit))
	}
	timeout, ok := compactTimeout(c.Timeout(), sc.ctx, time.Now()) // step 5
	if !ok {
		return s.fallback(sc, engine, fallbackLittleTime)
	}
	ctx, cancel := compactContext(r.Context(), sc.ctx, timeout)
	defer cancel()
	h, err := s.hold(ctx, declared(r, int(limit)))
	if err != nil {
		return s.fallback(sc, engine, abortText(ctx, timeout))
	}
	defer h.release()
	body, err := readBody(ctx, w, r, int(limit)) // step 6
	switch {
	case ctx.Err() != nil:
		return s.fallback(sc, engine, abortText(ctx, timeout))
	case errors.Is(err, errTooLarge):
		return s.fallback(sc, engine, fallbackOver(limit))
	case err != nil:
		return s.fallback(sc, engine, fallbackInvalid)
	}
	h.shrink(int64(len(body)))
	req, err := parseCompactRequest(jsontree.NewBudget(ctx, jsontree.NodesFor(len(body))), body)
	switch {
	case ctx.Err() != nil:
		return s.fallback(sc, engine, abortText(ctx, timeout))
	case err != nil:
		return s.fallback(sc, engine, fallbackInvalid)
	}
	h.shrink(sentBytes(len(body)))
	held = false
	start := time.Now()
	res, err := s.callCompactor(ctx, c, req, sc.turn.binding.Channel) // step 7
	switch {
	case ctx.Err() != nil: // step 11, whatever the compactor answered
		return s.fallback(sc, engine, abortText(ctx, timeout))
	case err != nil:
		return s.fallback(sc, engine, "the compactor failed: "+s.compactorError(sc, err))
	case res == nil: // step 8
		return s.fallback(sc, engine, fallbackDeclined)
	case res.Validate(req.FirstKeptEntryID) != nil: // step 9
		return s.fallback(sc, engine, fallbackBadResult)
	}
	out := *res // step 10
	out.Details = make(map[string]any, len(res.Details)+1)
	maps.Copy(out.Details, res.Details)
	out.Details["engine"] = engine
	attrs := []any{"channel", string(sc.turn.binding.Channel), "engine", engine, "tokensBefore", out.TokensBefore}
	if out.EstimatedTokensAfter != nil {
		attrs = append(attrs, "tokensAfter", *out.EstimatedTokensAfter)
	}
	s.b.log.Info(logCompactAnswered, append(attrs, "latencyMs", time.Since(start).Milliseconds())...)
	return wire.CompactResponse{OK: true, Compaction: &out}
}

// takeCompaction takes the broker's one compaction slot and counts the
// turn's compaction (steps 2 and 3); it returns the fallback reason when
// it cannot. A refusal for a running compaction does not count.
func (s *Session) takeCompaction(sc *scope) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.compacting:
		return fallbackRunning
	case sc.compacts >= wire.MaxCompactsPerTurn:
		return fallbackAsked
	}
	s.compacting = true
	sc.compacts++
	return ""
}

// endCompaction frees the broker's compaction slot.
func (s *Session) endCompaction() {
	s.mu.Lock()
	s.compacting = false
	s.mu.Unlock()
}

// compactTimeout is step 5: the compactor's timeout, or half the turn's
// remaining time when that is less, in whole milliseconds; ok is false
// below wire.MinCompactorWait.
func compactTimeout(limit time.Duration, turn context.Context, now time.Time) (time.Duration, bool) {
	ms := limit.Milliseconds()
	if d, ok := turn.Deadline(); ok {
		ms = min(ms, d.Sub(now).Milliseconds()/2)
	}
	return time.Duration(ms) * time.Millisecond, ms >= wire.MinCompactorWait.Milliseconds()
}

// compactContext is the signal of steps 6–7: the request, the turn (its
// end is errCompactAborted) and the timeout (errCompactTimeout).
func compactContext(req, turn context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	base, cancelBase := context.WithCancelCause(req)
	stop := context.AfterFunc(turn, func() { cancelBase(errCompactAborted) })
	ctx, cancel := context.WithTimeoutCause(base, timeout, errCompactTimeout)
	return ctx, func() {
		cancel()
		stop()
		cancelBase(nil)
	}
}

// abortText is step 11 for an ended signal: the timeout, or any other
// abort (the turn ended, the worker went away).
func abortText(ctx context.Context, timeout time.Duration) string {
	if errors.Is(context.Cause(ctx), errCompactTimeout) {
		return fallbackSlow(timeout)
	}
	return fallbackAborted
}

type compactResult struct {
	res *wire.Compaction
	err error
}

// callCompactor runs the compactor on its own goroutine, which holds the
// broker's compaction slot until the compactor returns, and waits for it
// or for ctx: a compactor that ignores its signal cannot hold the worker,
// only the slot.
func (s *Session) callCompactor(ctx context.Context, c Compactor, req wire.CompactRequest, ch rtsandbox.ChannelKey) (*wire.Compaction, error) {
	done := make(chan compactResult, 1)
	go func() {
		// The slot is freed before the answer is handed over (runCompactor
		// contains a panic), so the worker's next compaction, which may
		// follow the answer at once, finds it free.
		res, err := s.runCompactor(ctx, c, req, ch)
		s.endCompaction()
		done <- compactResult{res, err}
	}()
	select {
	case d := <-done:
		return d.res, d.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// runCompactor calls the compactor; a panic is contained as a failure and
// its stack logged, as a host tool's is.
func (s *Session) runCompactor(ctx context.Context, c Compactor, req wire.CompactRequest, ch rtsandbox.ChannelKey) (res *wire.Compaction, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.b.log.Error("host compactor panicked", "channel", string(ch), "engine", c.Engine(),
				"panic_type", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
			res, err = nil, errCompactorPanicked
		}
	}()
	return c.Compact(ctx, req, ch)
}

// fallback is a compact answer {ok:false, fallback}, logged as warn with
// the channel and the engine (absent without a compactor).
func (s *Session) fallback(sc *scope, engine, reason string) wire.CompactResponse {
	attrs := []any{"channel", string(sc.turn.binding.Channel)}
	if engine != "" {
		attrs = append(attrs, "engine", engine)
	}
	s.b.log.Warn(logCompactFallback, append(attrs, "fallback", reason)...)
	return wire.CompactResponse{Fallback: reason}
}

// compactorError is a failed compactor's error chain as the worker and
// the log may see it: every form of the profile's model credential (read
// for this, never kept) masked, then SessionConfig.Scrub, then cut to
// 2,000 units.
func (s *Session) compactorError(sc *scope, err error) string {
	text := err.Error()
	ctx, cancel := context.WithTimeout(context.Background(), keyLookupTimeout)
	key, kerr := s.b.cfg.APIKey(ctx, sc.turn.binding)
	cancel()
	if kerr == nil && key != "" {
		text = maskForms(text, key.Reveal())
	}
	return rtsandbox.PrefixUTF16(s.scrub(text), maxCompactorError)
}

// scrub applies SessionConfig.Scrub, or blanks control characters.
func (s *Session) scrub(text string) string {
	if s.cfg.Scrub != nil {
		return s.cfg.Scrub(text)
	}
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, text))
}

// maskForms replaces every form of key that the reflection scan looks for
// (upstream.Forms), longest first, with "[redacted]".
func maskForms(text, key string) string {
	forms := upstream.Forms(key)
	slices.SortFunc(forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, f := range forms {
		if f != "" {
			text = strings.ReplaceAll(text, f, "[redacted]")
		}
	}
	return text
}

// compactFields are the members of a compact request (docs/protocol.md, "The session protocol"), in the
// order parseCompactRequest reads them.
var compactFields = []string{"reason", "tokensBefore", "firstKeptEntryId", "isSplitTurn",
	"messagesToSummarize", "turnPrefixMessages", "keptMessages", "previousSummary",
	"customInstructions", "readFiles", "modifiedFiles"}

// parseCompactRequest reads a compact request under b as
// wire.ParseCompactRequest does (one JSON object, members matched
// exactly, unknown ones dropped, each message an object with a string
// role kept as received), but through views once the body is checked:
// nothing is decoded but the scalars, the roles and the file names, each
// kept message and file name counts one of the budget's values, and the
// read stops with the call.
func parseCompactRequest(b *jsontree.Budget, body []byte) (wire.CompactRequest, error) {
	var m [11]json.RawMessage
	if !isObject(body) || !b.Valid(body) {
		return wire.CompactRequest{}, wire.ErrCompactRequest
	}
	if _, _, ok := b.Fields(body, compactFields, m[:]); !ok {
		return wire.CompactRequest{}, wire.ErrCompactRequest
	}
	var r wire.CompactRequest
	var ok [11]bool
	r.Reason, ok[0] = jsonString(b, m[0])
	r.TokensBefore, ok[1] = wire.SafeInteger(m[1])
	r.FirstKeptEntryID, ok[2] = jsonString(b, m[2])
	r.IsSplitTurn, ok[3] = jsonBoolean(m[3])
	r.MessagesToSummarize, ok[4] = compactMessages(b, m[4])
	r.TurnPrefixMessages, ok[5] = compactMessages(b, m[5])
	r.KeptMessages, ok[6] = compactMessages(b, m[6])
	r.PreviousSummary, ok[7] = optString(b, m[7])
	r.CustomInstructions, ok[8] = optString(b, m[8])
	r.ReadFiles, ok[9] = compactStrings(b, m[9])
	r.ModifiedFiles, ok[10] = compactStrings(b, m[10])
	if slices.Contains(ok[:], false) || b.Err() != nil {
		return wire.CompactRequest{}, wire.ErrCompactRequest
	}
	return r, r.ValidateScalars()
}

// jsonBoolean reads a required JSON boolean.
func jsonBoolean(raw json.RawMessage) (value, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// optString reads a member that is absent or a string.
func optString(b *jsontree.Budget, raw json.RawMessage) (string, bool) {
	if raw == nil {
		return "", true
	}
	return jsonString(b, raw)
}

// roleField is the one member of a message the request's rule reads.
var roleField = []string{"role"}

// compactMessages reads an array of messages, each an object whose role
// is a string, kept as received.
func compactMessages(b *jsontree.Budget, raw json.RawMessage) ([]json.RawMessage, bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	items, ok := counted(b, raw)
	if !ok {
		return nil, false
	}
	for _, m := range items {
		var role [1]json.RawMessage
		if !isObject(m) {
			return nil, false
		}
		if _, _, ok := b.Fields(m, roleField, role[:]); !ok {
			return nil, false
		}
		if _, ok := jsonString(b, role[0]); !ok {
			return nil, false
		}
	}
	return items, true
}

// counted reads the elements of an array that has no count rule, each a
// value it keeps: no more than its bytes pay for (jsontree.NodesFor), and
// no more than b has left.
func counted(b *jsontree.Budget, raw json.RawMessage) ([]json.RawMessage, bool) {
	limit := jsontree.NodesFor(len(raw))
	items, n, ok := b.Array(raw, limit)
	if !ok || n > limit || b.Take(n) != nil {
		return nil, false
	}
	return items, true
}

// compactStrings reads an array of strings.
func compactStrings(b *jsontree.Budget, raw json.RawMessage) ([]string, bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	items, ok := counted(b, raw)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, ok := jsonString(b, it)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
