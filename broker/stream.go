package broker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// Passing an answer on as it arrives (docs/protocol.md, "SSE"; docs/session.md,
// "Routes and statuses"). A model answer the worker asked to stream, and on the
// Anthropic routes any answer with an error status, is relayed piece by
// piece: each piece the upstream.StreamScanner releases is written and
// flushed before the next is read, so a worker that reads slowly slows the
// upstream read (backpressure), and nothing is buffered beyond one read and
// the scanner's held tail. The head is written with the first piece, so an
// answer whose first read already reflects the credential is still
// refused with the fixed 502. Once the head is out, a reflected
// credential, more upstream bytes than the turn's cap
// (rtsandbox.MaxStreamedAnswer, or a session's MaxResponseBytes), a
// silence of Config.StreamSilence, the worker or the upstream going away,
// or the call's deadline cut the answer off: ServeHTTP aborts the
// connection, so the worker's read fails and it never holds a complete
// answer or the credential.
//
// A streamed call keeps every bound of a whole one: it spent the call
// budget, holds its in-flight slot (the sealed turn's one, one of a session
// turn's MaxInFlight) until the answer ends (the reference frees its slot when
// streaming starts; holding it is stricter),
// runs under rtsandbox.BrokerCallTimeout and the turn, reserves and settles
// the daily token budget (from the answer's usage events, or the estimate),
// and leaves one audit record when it ends.

// acceptStream is the Accept header of a streamed upstream call.
const acceptStream = "application/json, text/event-stream"

// Stream errors, for the audit detail (content-free).
var (
	errSilence = errors.New("stream silence limit passed")
)

// passedHeaders are the upstream response headers a relayed answer keeps
// (docs/session.md, "Routes and statuses"), besides any anthropic-ratelimit-*; each
// only when short and free of the credential.
var passedHeaders = []string{"Content-Type", "Retry-After", "Request-Id", "X-Should-Retry"}

const (
	maxPassedHeader = 256
	ratelimitPrefix = "Anthropic-Ratelimit-"
	// maxLoggedEvent bounds the data of a logged stream error event.
	maxLoggedEvent = 2000
	// maxErrLogBody bounds what a session keeps of an error answer's body
	// for its failure log (docs/session.md, "Routes and statuses").
	maxErrLogBody = 64 << 10
)

// appendBounded appends p to b up to limit bytes in all.
func appendBounded(b, p []byte, limit int) []byte {
	if room := limit - len(b); room > 0 {
		b = append(b, p[:min(room, len(p))]...)
	}
	return b
}

// pass makes call with one attempt and answers with what the upstream
// sent. A 2xx answer not asked to stream is read whole (up to the turn's
// answer cap), checked with the whole-body scan and
// answered as JSON; a streamed one and any error status are relayed
// (relay). A status outside 200–599, or a 3xx, fails the call.
func (t *Turn) pass(ctx context.Context, w http.ResponseWriter, call upstream.Call, streamed bool) outcome {
	return t.passWith(ctx, w, call, streamed, nil)
}

// passWith is pass, passing on the upstream's headers named in extra too
// (the session's MCP route passes Mcp-Session-Id), under the same rule.
func (t *Turn) passWith(ctx context.Context, w http.ResponseWriter, call upstream.Call, streamed bool, extra []string) outcome {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := t.b.now()
	resp, err := t.b.client.Open(ctx, call)
	if err != nil {
		o := fail(err.Error())
		o.upstream = t.b.now().Sub(start)
		return o
	}
	defer resp.Close()
	var o outcome
	switch s := resp.Status; {
	case s < 200 || s > 599 || s >= 300 && s < 400:
		o = fail("upstream status refused")
	case s < 300 && !streamed:
		o = t.whole(resp, call.Key)
	default:
		o = t.relay(ctx, cancel, w, resp, call.Key, extra)
	}
	o.upstream = t.b.now().Sub(start)
	o.upstreamStatus = resp.Status
	return o
}

// whole reads a non-streamed 2xx answer and checks it as CheckJSON does
// for every whole answer, while it arrives (upstream.ReadJSON), finding
// its usage on the way.
func (t *Turn) whole(resp *upstream.Response, key rtsandbox.Secret) outcome {
	forms := t.keyForms(key)
	a, err := upstream.ReadJSONFor(resp.Body, forms, int(t.answerCap()), usageMember)
	switch {
	case errors.Is(err, upstream.ErrTooLarge), errors.Is(err, upstream.ErrReflect), errors.Is(err, upstream.ErrNotJSON):
		o := fail(err.Error())
		o.reflected = errors.Is(err, upstream.ErrReflect)
		return o
	case err != nil:
		return fail("upstream read failed")
	}
	o := okJSON(a.Body)
	o.usage, o.usageKnown = a.Member, a.MemberKnown
	o.status = resp.Status
	o.header = passHeaders(resp.Header, forms, nil)
	return o
}

// relay passes resp on piece by piece; see the file comment.
func (t *Turn) relay(ctx context.Context, cancel context.CancelCauseFunc, w http.ResponseWriter, resp *upstream.Response, key rtsandbox.Secret, extra []string) outcome {
	silence := t.b.cfg.StreamSilence
	timer := time.AfterFunc(silence, func() { cancel(errSilence) })
	defer timer.Stop()
	rc := http.NewResponseController(w)
	forms := t.keyForms(key) // one set for the body, the headers and the preview
	sc := upstream.NewStreamScannerFor(resp.Body, forms, t.answerCap())
	// A 2xx answer here is one the worker asked to stream, and its SDK
	// reads it as events whatever its Content-Type says (the official
	// SDKs' decoders fall back to server-sent events): it is checked as
	// events, so a missing or false type hides nothing. An error answer
	// is read as events when it says it is some.
	sse := resp.Status < 300 || strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream")
	if sse {
		sc.Events() // whole events, their JSON checked decoded too
	}
	var watch *streamWatch
	var tap *textTap
	if resp.Status < 300 {
		watch, tap = t.newStreamWatch(), t.newTextTap(forms)
		sc.KeepEvents() // the watch reads the events the checks read
		if tap != nil {
			sc.CollectText()
		}
	}
	o := outcome{status: resp.Status, written: true}
	head := func() {
		h := w.Header()
		for k, v := range passHeaders(resp.Header, forms, extra) {
			h[k] = v
		}
		h.Set("Connection", "close")
		w.WriteHeader(resp.Status)
	}
	headOut := false
	for {
		piece, err := sc.Next()
		if err != nil {
			if cleanEnd(ctx, err) {
				tap.flush()
			}
			return t.relayEnd(ctx, o, headOut, head, err, watch, rc)
		}
		if !headOut {
			head()
			headOut = true
		}
		_ = rc.SetWriteDeadline(time.Now().Add(silence)) // a worker that stops reading is cut off too
		n, werr := w.Write(piece)
		o.sent += int64(n)
		if werr == nil {
			werr = rc.Flush()
		}
		// The readers of the piece come after the flush, so the worker
		// has it without waiting for them. The watcher and the failure
		// log read what the upstream sent, the preview what the worker got;
		// the watcher and the preview read the events the scanner read.
		watch.events(sc.Parsed())
		if t.errLog && resp.Status >= 400 {
			o.errBody = appendBounded(o.errBody, piece, maxErrLogBody)
		}
		if werr != nil {
			o.abort, o.detail = true, "stream cut: worker write failed"
			return watch.settle(o)
		}
		tap.add(sc.Text())
		timer.Reset(silence)
	}
}

// relayEnd ends a relayed answer on err from the scanner: io.EOF ends it
// normally (an empty answer still gets its head), unless the call's ctx
// ended first (the silence limit, the deadline, the worker gone): a
// cancelled upstream read may surface as a clean EOF, and such an answer
// is cut, not complete. Any other error before the head is the fixed 502,
// after it an abort.
func (t *Turn) relayEnd(ctx context.Context, o outcome, headOut bool, head func(), err error, watch *streamWatch, rc *http.ResponseController) outcome {
	if cleanEnd(ctx, err) {
		if !headOut {
			head()
		}
		_ = rc.Flush()
		return watch.settle(o)
	}
	detail := streamDetail(ctx, err)
	reflected := errors.Is(err, upstream.ErrReflect)
	if !headOut {
		f := fail(detail)
		f.reflected = reflected
		return f
	}
	o.abort, o.detail, o.reflected = true, "stream cut: "+detail, reflected
	return watch.settle(o)
}

// cleanEnd reports whether the scanner's err ends a relayed answer
// normally: see relayEnd.
func cleanEnd(ctx context.Context, err error) bool {
	return errors.Is(err, io.EOF) && ctx.Err() == nil
}

// streamDetail names why a relayed answer ended early, content-free.
func streamDetail(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, upstream.ErrReflect), errors.Is(err, upstream.ErrTooLarge), errors.Is(err, upstream.ErrUncheckable):
		return err.Error()
	case errors.Is(context.Cause(ctx), errSilence):
		return errSilence.Error()
	case ctx.Err() != nil:
		return "call canceled or timed out"
	}
	return "upstream read failed"
}

// passHeaders returns the headers of h a relayed answer keeps: those of
// passedHeaders and extra (canonical names) and anthropic-ratelimit-*,
// each when at most 256 bytes and free of the credential (whose forms are
// forms) in any form.
func passHeaders(h http.Header, forms *upstream.KeyForms, extra []string) http.Header {
	out := make(http.Header, len(passedHeaders))
	var check *upstream.TextChecker // made once for all headers
	keep := func(name string, v []string) {
		if len(v) != 1 || len(v[0]) > maxPassedHeader {
			return
		}
		if check == nil {
			check = forms.TextChecker()
		}
		if check.Check(v[0]) != nil {
			return
		}
		out[name] = []string{v[0]}
	}
	for _, name := range append(passedHeaders[:len(passedHeaders):len(passedHeaders)], extra...) {
		if v, ok := h[name]; ok {
			keep(name, v)
		}
	}
	for name, v := range h {
		if strings.HasPrefix(name, ratelimitPrefix) {
			keep(name, v)
		}
	}
	return out
}

// streamWatch reads the events of a relayed 2xx event stream, as the
// relay's scanner read them for its checks (upstream.StreamEvent: each
// event is parsed once, for the relay, the reflection check, the preview
// and this watch), after they were passed on, so already free of the
// credential: it logs the first error event (docs/protocol.md, "SSE") and
// counts the usage the events report, for the budget. A nil *streamWatch
// does nothing. It never changes or stops the stream.
type streamWatch struct {
	t      *Turn
	logged bool
	usage  streamUsage
}

func (t *Turn) newStreamWatch() *streamWatch {
	return &streamWatch{t: t}
}

// events reads the events of a piece passed on. An event the body ended
// inside is not one: no client sees it.
func (w *streamWatch) events(evs []upstream.StreamEvent) {
	if w == nil {
		return
	}
	for i := range evs {
		if evs[i].Whole {
			w.event(&evs[i])
		}
	}
}

// event logs ev if it is the first error event, an "error" event or data
// whose "type" is "error", and counts its usage: that of a Messages
// usage event, or of an event with no type (an OpenAI chunk).
func (w *streamWatch) event(ev *upstream.StreamEvent) {
	if !w.logged && (string(ev.Name) == "error" || string(ev.Type) == "error") {
		w.logged = true
		w.t.b.log.Warn("sandbox upstream call failed", "channel", string(w.t.binding.Channel),
			"upstream", "model", "status", http.StatusOK, "body", "stream error event: "+logText(string(ev.Data)))
	}
	if (ev.Usage != nil || ev.MessageUsage != nil) && (ev.Type == nil || usageEvents[string(ev.Type)]) {
		w.usage.add(ev.Usage, ev.MessageUsage)
	}
}

// usageEvents are the Messages events that carry usage.
var usageEvents = map[string]bool{"message_start": true, "message_delta": true}

// settle records the counted usage in o.
func (w *streamWatch) settle(o outcome) outcome {
	if w != nil {
		o.tokens, o.counted = w.usage.total()
	}
	return o
}

// logText makes event data fit for the operator log: control characters
// become spaces and it is cut to maxLoggedEvent bytes at a rune boundary.
func logText(s string) string {
	if len(s) > maxLoggedEvent {
		s = strings.ToValidUTF8(s[:maxLoggedEvent], "")
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// streamUsage accumulates the usage events of either dialect: an OpenAI
// usage chunk, or the Messages API's message_start (input) and
// message_delta (cumulative output) events. The largest of each count
// seen wins, so a repeated or cumulative count is not added twice.
type streamUsage struct {
	in, out, sum int64
	seen         bool
}

// add counts the usage of one event: the raw values of its top-level
// "usage" and of its "message"."usage", the first that is an object
// winning, as the budget decodes a whole answer's.
func (u *streamUsage) add(top, message []byte) {
	var f *usageFields
	for _, raw := range [][]byte{top, message} {
		if f == nil && raw != nil && json.Unmarshal(raw, &f) != nil {
			return
		}
	}
	if f == nil {
		return
	}
	if f.Input != nil || f.Output != nil {
		in, out := f.messages()
		u.in, u.out, u.seen = max(u.in, in), max(u.out, out), true
		return
	}
	if n, ok := f.total(); ok {
		u.sum, u.seen = max(u.sum, n), true
	}
}

func (u *streamUsage) total() (int64, bool) {
	return max(u.sum, u.in+u.out), u.seen
}
