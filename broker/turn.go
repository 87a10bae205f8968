package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// Turn is a Broker bound to one admitted turn: its channel and speaker, its
// context and its call budget. It is the http.Handler a Server serves.
type Turn struct {
	b       *Broker
	ctx     context.Context
	binding rtsandbox.Binding

	mu       sync.Mutex
	budget   int
	inFlight bool
	// overBudget records that a call was refused for a daily budget.
	overBudget atomic.Bool
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
func (t *Turn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := t.b.now()
	route, o := t.handle(r)
	writeOutcome(w, o)
	d := t.b.now().Sub(start)
	t.audit(r.Context(), route, o, d)
	if t.b.cfg.Observe != nil {
		t.b.observe(r.RequestURI, route, o, d)
	}
}

func writeOutcome(w http.ResponseWriter, o outcome) {
	h := w.Header()
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

// handle is the pipeline of spec §2.2, in its exact order. It returns the
// matched route ("" when none) for the audit record.
func (t *Turn) handle(r *http.Request) (string, outcome) {
	path, ref, ok := checkTarget(r)
	if !ok {
		return "", refuse(ref)
	}
	if ref, ok := checkHeaders(r); !ok {
		return "", refuse(ref)
	}
	dispatch, ok := t.route(path)
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

	body, err := readBody(r.Body)
	if err != nil {
		o := fail("request body too large or unreadable")
		o.bytesIn = len(body)
		return path, o
	}
	o := t.call(ctx, body, dispatch)
	o.bytesIn = len(body)
	return path, o
}

// call runs steps 11–14 once the budget is spent: parse, shape, liveness,
// dispatch.
func (t *Turn) call(ctx context.Context, body []byte, dispatch routeFunc) outcome {
	// One decode in the common case; json.Valid only tells a broken body
	// (502) from a JSON value that is not an object (400).
	obj, ok := decodeObject(body)
	if !ok {
		if !json.Valid(body) {
			return fail("request body is not JSON")
		}
		return refuse(refInvalidInput)
	}
	if ctx.Err() != nil {
		return fail("call canceled")
	}
	return dispatch(ctx, t, request{raw: body, obj: obj})
}

// checkTarget applies steps 1–2: an origin-form target (absolute-form and
// "*" are refused, a deliberate deviation from the reference), POST, no
// query, not even an empty one, and no fragment. It returns the escaped
// path that routing matches on.
func checkTarget(r *http.Request) (string, refusal, bool) {
	target := r.RequestURI
	if target == "" || target[0] != '/' || r.URL == nil {
		return "", refInvalidURL, false
	}
	if r.Method != http.MethodPost || strings.ContainsAny(target, "?#") {
		return "", refNotFound, false
	}
	return target, refusal{}, true
}

// acquire implements steps 8–9: one call in flight, and the budget is spent
// before the body is read, so refused and failed calls count too.
func (t *Turn) acquire() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inFlight || t.budget <= 0 {
		return false
	}
	t.inFlight = true
	t.budget--
	return true
}

func (t *Turn) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight = false
}

// readBody reads at most rtsandbox.MaxBrokerRequest; more is an error.
func readBody(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, rtsandbox.MaxBrokerRequest+1))
	if err != nil {
		return data, err
	}
	if len(data) > rtsandbox.MaxBrokerRequest {
		return data, errTooLarge
	}
	return data, nil
}

// decodeObject decodes a JSON object into its members, keeping each value
// raw so that absent and null stay different and numbers are not
// rewritten.
func decodeObject(body []byte) (map[string]json.RawMessage, bool) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return nil, false
	}
	return obj, true
}

// marshal encodes v the way the reference's JSON.stringify does.
func marshal(v any) ([]byte, error) { return jsonjs.Marshal(v) }
