package broker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// Turn is a Broker bound to one admitted turn: its channel and speaker, its
// context and its call budget. It is the http.Handler a Server serves.
type Turn struct {
	b       *Broker
	ctx     context.Context
	binding rtsandbox.Binding

	mu     sync.Mutex
	budget int
	// inFlight counts the calls running; maxInFlight is 1 for a sealed
	// turn and the session's SessionConfig.MaxInFlight for a session turn.
	inFlight    int
	maxInFlight int
	// maxAnswer caps the upstream bytes of one answer: 0 (a sealed turn)
	// means rtsandbox.MaxStreamedAnswer; a session turn has its
	// SessionConfig.MaxResponseBytes.
	maxAnswer int64
	// level is the thinking level of a session turn, bound per turn;
	// "" takes Config.Thinking (session.go).
	level modelapi.ThinkingLevel
	// errLog asks a relayed error answer to keep the start of its body
	// for the session's failure log (outcome.errBody).
	errLog bool
	// scopes are the daily budget scopes the turn's calls are charged
	// to; nil means its binding's (budget.Scopes: speaker, channel,
	// installation).
	scopes []string
	// overBudget records that a call was refused for a daily budget.
	overBudget atomic.Bool
	// onText receives the text of streamed answers (preview.go); answers
	// numbers them.
	onText  TextFunc
	answers atomic.Int64
	// forms are the model key's forms made ready for the checks of the
	// turn's answers (keyForms), kept for the turn only.
	forms atomic.Pointer[upstream.KeyForms]
}

// keyForms returns key's forms made ready for the checks of an answer:
// those the turn made for an earlier call when the key is the same (a
// turn's calls use one key, and making them costs about what scanning a
// 16 KiB answer does), else new ones, kept for the next call. They go
// with the turn.
func (t *Turn) keyForms(key rtsandbox.Secret) *upstream.KeyForms {
	if k := t.forms.Load(); k != nil && k.For(key.Reveal()) {
		return k
	}
	k := upstream.NewKeyForms(key.Reveal())
	t.forms.Store(k)
	return k
}

// OverBudget reports whether any call of the turn was refused because a
// daily budget was spent, so that the runtime can tell the guest so.
func (t *Turn) OverBudget() bool { return t.overBudget.Load() }

// Remaining returns the calls left in the turn's budget.
func (t *Turn) Remaining() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.budget
}

// ServeHTTP runs the request pipeline, writes the outcome with
// Connection: close, emits one audit record and tells the observer.
//
// A streamed answer was written by its route already. One cut off after
// its head (a reflected credential, the size cap, the silence limit, the
// worker or the upstream gone) aborts the connection once the audit record
// is out, so the worker sees a broken body and never a complete answer.
func (t *Turn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := t.b.now()
	route, o := t.handle(w, r)
	if o.release != nil {
		defer o.release()
	}
	if !o.written {
		writeOutcome(w, o)
	}
	d := t.b.now().Sub(start)
	t.audit(r.Context(), route, o, d)
	if t.b.cfg.Observe != nil {
		t.b.observe(r.RequestURI, route, o, d)
	}
	if o.abort {
		panic(http.ErrAbortHandler)
	}
}

func writeOutcome(w http.ResponseWriter, o outcome) {
	h := w.Header()
	for k, v := range o.header {
		h[k] = v
	}
	if o.json {
		h.Set("Content-Type", "application/json")
	} else {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
	h.Set("Connection", "close")
	h.Set("Content-Length", strconv.Itoa(len(o.body)))
	w.WriteHeader(o.status)
	_, _ = w.Write(o.body)
}

// handle is the pipeline of docs/broker.md, "The pipeline, in order", in its exact order. It returns the
// matched route ("" when none) for the audit record.
func (t *Turn) handle(w http.ResponseWriter, r *http.Request) (string, outcome) {
	path, beta, ref, ok := checkTarget(r)
	if !ok {
		return "", refuse(ref)
	}
	if ref, ok := checkHeaders(r, t.b.sdkRoute(path)); !ok {
		return "", refuse(ref)
	}
	dispatch, ok := t.route(path, beta)
	if !ok {
		return "", refuse(refNotFound)
	}
	if t.ctx.Err() != nil {
		return path, refuse(refTurnEnded)
	}
	if !t.acquire() {
		return path, refuse(refBusy)
	}
	defer t.release()
	if t.b.cfg.Budget != nil {
		r, o, ok := t.reserve(r.Context(), budget.Calls, 1)
		if !ok {
			return path, o
		}
		defer t.settle(r, 1)
	}

	ctx, cancel := context.WithTimeout(r.Context(), rtsandbox.BrokerCallTimeout)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()

	h, err := newHold(ctx, declared(r, rtsandbox.MaxBrokerRequest), t.b.cfg.Intake.pool())
	if err != nil {
		return path, fail("call canceled while waiting to read its body")
	}
	defer h.release()
	body, err := readBody(ctx, w, r, rtsandbox.MaxBrokerRequest)
	if err != nil {
		o := fail("request body too large or unreadable")
		o.bytesIn = len(body)
		return path, o
	}
	h.shrink(int64(len(body)))
	o := t.call(ctx, request{raw: body, w: w, header: r.Header, path: path, beta: beta, hold: h}, dispatch)
	o.bytesIn = len(body)
	return path, o
}

// call runs steps 11–14 once the budget is spent: parse, shape, liveness,
// dispatch. The body is decoded under a jsontree.Budget of its size that
// stops with ctx, which every route reads it under.
func (t *Turn) call(ctx context.Context, req request, dispatch routeFunc) outcome {
	req.budget = jsontree.NewBudget(ctx, jsontree.NodesFor(len(req.raw)))
	obj, o, ok := decodeBody(req.budget, req.raw)
	if !ok {
		return o
	}
	if ctx.Err() != nil {
		return fail("call canceled")
	}
	req.obj = obj
	return dispatch(ctx, t, req)
}

// decodeBody splits a body into its members under b, or answers: a body
// that is not JSON fails (502), a JSON value that is not an object or
// has more members than its size pays for is refused (400), and a call
// that ended meanwhile fails.
func decodeBody(b *jsontree.Budget, body []byte) (map[string]json.RawMessage, outcome, bool) {
	obj, err := b.Split(body) // a map on purpose: a body the broker rebuilds and forwards, split under the budget (the seal issue's memory bound); each route reads its members by its rules
	switch {
	case err == nil:
		return obj, outcome{}, true
	case errors.Is(err, jsontree.ErrStopped):
		return nil, fail("call canceled"), false
	case errors.Is(err, jsontree.ErrSyntax):
		return nil, fail("request body is not JSON"), false
	}
	o := refuse(refInvalidInput)
	if errors.Is(err, jsontree.ErrBudget) {
		o.detail = "request body has more members than its size pays for"
	}
	return nil, o, false
}

// declared is the body size a call waits for: its Content-Length, limit
// when it has none (a chunked body), nothing when it declares more
// (readBody drops it unkept).
func declared(r *http.Request, limit int) int64 {
	switch {
	case r.ContentLength > int64(limit):
		return 0
	case r.ContentLength >= 0:
		return r.ContentLength
	}
	return int64(limit)
}

// checkTarget applies steps 1–2: an origin-form target (absolute-form and
// "*" are refused, a deliberate deviation from the reference), POST, no
// fragment, and no query, not even an empty one, except exactly
// "?beta=true", which only the Anthropic routes accept (docs/session.md, "Routes and statuses";
// route refuses it elsewhere). It returns the escaped path that routing
// matches on and whether the beta query was sent.
func checkTarget(r *http.Request) (path string, beta bool, ref refusal, ok bool) {
	target := r.RequestURI
	if target == "" || target[0] != '/' || r.URL == nil {
		return "", false, refInvalidURL, false
	}
	if r.Method != http.MethodPost || strings.Contains(target, "#") {
		return "", false, refNotFound, false
	}
	path, query, hasQuery := strings.Cut(target, "?")
	if hasQuery && query != betaQuery {
		return "", false, refNotFound, false
	}
	return path, hasQuery, refusal{}, true
}

// betaQuery is the one query the broker accepts, on the Anthropic routes
// only, and forwards.
const betaQuery = "beta=true"

// acquire implements steps 8–9: at most maxInFlight calls in flight (one
// for a sealed turn), and the budget is spent before the body is read, so
// refused and failed calls count too.
func (t *Turn) acquire() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inFlight >= t.maxInFlight || t.budget <= 0 {
		return false
	}
	t.inFlight++
	t.budget--
	return true
}

// answerCap is the turn's cap on the upstream bytes of one answer.
func (t *Turn) answerCap() int64 {
	if t.maxAnswer > 0 {
		return t.maxAnswer
	}
	return rtsandbox.MaxStreamedAnswer
}

func (t *Turn) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight--
}

// thinking is the level that caps the turn's Anthropic calls: the bound
// session turn's, or the broker's.
func (t *Turn) thinking() modelapi.ThinkingLevel {
	if t.level != "" {
		return t.level
	}
	return t.b.cfg.Thinking
}

// decodeObject decodes a JSON object under b into its members, keeping
// each value raw (aliasing raw) so that absent and null stay different and
// numbers are not rewritten.
func decodeObject(b *jsontree.Budget, raw []byte) (map[string]json.RawMessage, bool) {
	obj, err := b.Split(raw) // a map on purpose: an object of a forwarded body, read under the budget by its route's rules
	return obj, err == nil
}

// marshal encodes v the way the reference's JSON.stringify does.
func marshal(v any) ([]byte, error) { return jsonjs.Marshal(v) }
