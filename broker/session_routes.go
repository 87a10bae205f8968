package broker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The fixed texts of the session error table (docs/session.md, "Routes and statuses"). The
// worker matches on some of them; they are exact.
const (
	sessNotFound         = "Not found"
	sessTurnEnded        = "Turn ended"
	sessBudget           = "Broker budget exhausted"
	sessInvalidInput     = "Invalid input"
	sessInvalidToolInput = "Invalid tool input"
	sessMCPRefused       = "MCP method refused"
	sessBrokerFailed     = "Broker call failed"
	sessUpstreamRefused  = "Upstream refused"
	sessAlreadyWaiting   = "Already waiting"
	sessRetry            = "Retry"
	sessNoMatchingTurn   = "No matching turn"
	sessAlreadyReceiving = "Already receiving"
	sessInvalidResult    = "Invalid result"
	sessInvalidReady     = "Invalid ready handshake"
	sessReady            = "Ready"
	sessAccepted         = "Accepted"
)

// sessRefuse is a session refusal with its audit class.
func sessRefuse(status int, text, class string) outcome {
	return outcome{status: status, body: []byte(text), class: class}
}

func sessFail(detail string) outcome {
	o := sessRefuse(http.StatusBadGateway, sessBrokerFailed, refFailed.class)
	o.detail = detail
	return o
}

// sessionRoute serves one matched credential route under its scope.
type sessionRoute func(ctx context.Context, sc *scope, req request) outcome

// ServeHTTP applies the URL hygiene of docs/session.md, "Routes and statuses" and serves the worker routes,
// /mcp-tools, the compaction routes and the credential pipeline.
func (s *Session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.RequestURI
	if target == "" || target[0] != '/' || strings.Contains(target, "#") {
		writeText(w, http.StatusNotFound, sessNotFound)
		return
	}
	path, query, hasQuery := strings.Cut(target, "?")
	if hasQuery && query != betaQuery {
		writeText(w, http.StatusNotFound, sessNotFound)
		return
	}
	if !hasQuery && s.serveLocal(w, r, path) {
		return
	}
	s.serveCall(w, r, path, hasQuery)
}

// serveLocal serves the routes that carry no credential (docs/session.md, "Routes and statuses"; docs/protocol.md, "The session protocol"),
// reporting whether path was one of them.
func (s *Session) serveLocal(w http.ResponseWriter, r *http.Request, path string) bool {
	get, post := r.Method == http.MethodGet, r.Method == http.MethodPost
	switch {
	case path == wire.RouteWorkerReady && post:
		s.serveReady(w, r)
	case path == wire.RouteWorkerConfig && get:
		writeJSON(w, s.cfg.Worker)
	case path == wire.RouteWorkerNext && get:
		s.serveNext(w, r)
	case path == wire.RouteWorkerResult && post:
		s.serveResult(w, r)
	case strings.HasPrefix(path, "/worker/"):
		writeText(w, http.StatusNotFound, sessNotFound)
	case path == wire.RouteMCPTools && get:
		s.rearm()
		writeJSON(w, s.discovery())
	case path == wire.RouteMCPTools:
		writeText(w, http.StatusNotFound, sessNotFound)
	case strings.HasPrefix(path, compactionPrefix):
		s.serveCompaction(w, r, path)
	default:
		return false
	}
	return true
}

// compactionPrefix is the prefix of the host compaction routes of docs/protocol.md, "Compaction"
// (session_compaction.go).
const compactionPrefix = "/compaction/"

// discovery is the answer of GET /mcp-tools: the profile's servers with
// their allowed tool names, in configuration order; never an endpoint.
func (s *Session) discovery() wire.MCPDiscovery {
	d := wire.MCPDiscovery{Servers: make([]wire.MCPDiscoveryServer, 0, len(s.b.cfg.MCP))}
	for _, m := range s.b.cfg.MCP {
		names := make([]string, 0, len(m.Tools))
		for _, t := range m.Tools {
			names = append(names, t.Name)
		}
		d.Servers = append(d.Servers, wire.MCPDiscoveryServer{Name: m.Name, Tools: names})
	}
	return d
}

// serveCall is the credential pipeline of docs/session.md, "Routes and statuses", steps 1–9, in its order;
// the routes do the rest.
func (s *Session) serveCall(w http.ResponseWriter, r *http.Request, path string, beta bool) {
	start := s.b.now()
	sc := s.capture() // step 1: the scope is fixed here, at arrival
	if sc == nil {
		writeText(w, http.StatusGone, sessTurnEnded)
		return
	}
	if problem, ok := s.privacyGate(); !ok { // step 2
		s.finish(w, r, sc, "", sessRefuse(http.StatusGone, problem, "privacy"), start)
		return
	}
	route, isMCP := s.route(path, beta) // step 3
	matched := ""                       // the audit names a matched route only, never a guest's path
	if route != nil {
		matched = path
	}
	var o outcome
	switch {
	case sc.startup && !isMCP: // step 4
		o = sessRefuse(http.StatusGone, sessTurnEnded, refTurnEnded.class)
	case r.Method != http.MethodPost || route == nil: // step 5
		o = sessRefuse(http.StatusNotFound, sessNotFound, refNotFound.class)
	case !sc.turn.acquire(): // step 6
		o = sessRefuse(http.StatusTooManyRequests, sessBudget, refBusy.class)
	default:
		o = s.spent(w, r, sc, path, beta, route)
		sc.turn.release()
	}
	s.finish(w, r, sc, matched, o, start)
}

// spent runs steps 7–9 of a call that holds a slot and spent its budget:
// the startup window's daily quota, the daily ledger (a turn's calls are
// charged to its speaker, channel and installation, the window's to its
// channel and installation), the effective context (turn and request),
// the body.
func (s *Session) spent(w http.ResponseWriter, r *http.Request, sc *scope, path string, beta bool, route sessionRoute) outcome {
	if sc.startup {
		if o, ok := s.openWindow(sc); !ok {
			return o
		}
	}
	settle, o, ok := s.chargeCall(r, sc)
	if !ok {
		return o
	}
	if settle != nil {
		defer settle()
	}
	ctx, cancel := context.WithCancel(r.Context())
	if d, ok := sc.ctx.Deadline(); ok {
		ctx, cancel = context.WithDeadline(r.Context(), d) // so that a tool sees the turn's deadline
	}
	defer cancel()
	stop := context.AfterFunc(sc.ctx, cancel)
	defer stop()

	limit := int(s.cfg.MaxRequestBytes)
	h, err := s.hold(ctx, declared(r, limit))
	if err == nil && sc.ctx.Err() != nil {
		// The turn ended while the call waited, and ctx hears of it only
		// when the AfterFunc above has run: the share its ended body let
		// go of may reach this call first.
		h.release()
		err = sc.ctx.Err()
	}
	if err != nil {
		return sessFail("call canceled while waiting to read its body")
	}
	defer h.release()
	body, err := readBody(ctx, w, r, limit)
	switch {
	case errors.Is(err, errSilenceBody):
		o := sessFail(err.Error())
		o.abort = true
		return o
	case err != nil:
		return sessFail("request body too large or unreadable")
	}
	h.shrink(int64(len(body)))
	budget := jsontree.NewBudget(ctx, jsontree.NodesFor(len(body)))
	obj, o, ok := decodeBody(budget, body) // sessionWords puts its answer in the session's texts
	if !ok {
		return o
	}
	if ctx.Err() != nil {
		return sessFail("call canceled")
	}
	o = route(ctx, sc, request{raw: body, obj: obj, w: w, header: r.Header, path: path, beta: beta, budget: budget, hold: h})
	o.bytesIn = len(body)
	return o
}

// privacyGate applies docs/session.md, "Routes and statuses": with privacy required and a worker
// lacking a capability, the bound turn fails and the call gets the problem.
func (s *Session) privacyGate() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	problem, ok := s.privacyProblemLocked()
	if !ok {
		s.failTurnLocked(problem)
	}
	return problem, ok
}

// route classifies a credential path (docs/session.md, "Routes and statuses"): the model routes of
// the broker's dialect (?beta=true on the Anthropic ones only), a declared
// host tool, a declared MCP server of this profile. isMCP is true for a
// declared server even with a query, so that the startup window's step 4
// does not turn its 404 into a 410.
func (s *Session) route(path string, beta bool) (route sessionRoute, isMCP bool) {
	if name, ok := strings.CutPrefix(path, wire.RouteMCPPrefix); ok {
		if srv := s.b.mcp[name]; srv != nil {
			if beta {
				return nil, true
			}
			return s.mcpRoute(srv), true
		}
		return nil, false
	}
	if s.b.anthropicRoute(path) {
		return func(ctx context.Context, sc *scope, req request) outcome { return serveMessages(ctx, sc.turn, req) }, false
	}
	if beta {
		return nil, false
	}
	if path == wire.RouteModel && !s.b.anthropic() {
		return func(ctx context.Context, sc *scope, req request) outcome {
			return serveChat(ctx, sc.turn, req, modelapi.ChatOptions{ImageParts: true}) // the turn's images (docs/protocol.md, "Images and files")
		}, false
	}
	if name, ok := strings.CutPrefix(path, wire.RouteToolPrefix); ok {
		if h := s.b.tools[name]; h != nil {
			return s.toolRoute(h), false
		}
	}
	return nil, false
}

// finish writes o in the session's words, logs a failed upstream call,
// emits the audit record and tells the observer; an answer cut off after
// its head aborts the connection. path is the matched route, "" when none
// matched.
func (s *Session) finish(w http.ResponseWriter, r *http.Request, sc *scope, path string, o outcome, start time.Time) {
	o = sessionWords(o)
	if !o.written {
		writeOutcome(w, o)
	}
	d := s.b.now().Sub(start)
	if failedUpstream(o) {
		s.logFailure(sc, s.upstreamName(path), o, d)
	}
	sc.turn.audit(r.Context(), path, o, d)
	if s.b.cfg.Observe != nil {
		s.b.observe(r.RequestURI, path, o, d)
	}
	if o.abort {
		panic(http.ErrAbortHandler)
	}
}

// sessionWords puts a refusal of the shared routes (model) into the
// session's texts (docs/session.md, "Routes and statuses"): a failed call is "Broker call failed", or
// "Upstream refused" for an upstream status outside 200–599, and a body
// that is not an object "Invalid input". JSON answers and relayed ones
// stay as they are.
func sessionWords(o outcome) outcome {
	if o.json || o.written {
		return o
	}
	switch o.class {
	case refFailed.class:
		o.body = []byte(sessBrokerFailed)
		if o.upstreamStatus != 0 && (o.upstreamStatus < 200 || o.upstreamStatus > 599) {
			o.body = []byte(sessUpstreamRefused)
		}
	case refInvalidInput.class:
		o.body = []byte(sessInvalidInput)
	}
	return o
}

// failedUpstream reports whether o is a call the failure log of docs/protocol.md, "SSE"
// records: a refused model request, a failed call, an upstream error
// status, or an answer cut off mid-stream.
func failedUpstream(o outcome) bool {
	return o.class == refModelPayload.class || o.class == refFailed.class ||
		o.upstreamStatus >= 400 || o.abort
}

// upstreamName names a call's upstream for the failure log: model,
// tool:<name> or mcp:<server>, with declared names only.
func (s *Session) upstreamName(path string) string {
	switch route, name := s.b.classify(path, path); route {
	case RouteTools:
		return "tool:" + name
	case RouteMCP:
		return "mcp:" + name
	}
	return "model"
}

// readLimited reads at most limit bytes; more is errTooLarge.
func readLimited(r io.Reader, limit int) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, errTooLarge
	}
	return data, nil
}
