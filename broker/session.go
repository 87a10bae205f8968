package broker

// Session mode (docs/protocol.md, "The session protocol"): the broker of one channel's long-lived
// worker. Where a sealed Turn serves one turn and dies with it, a Session
// lives as long as the channel's container and its listener; the host binds
// one turn at a time to it (Bind), queues the turn for the worker's long
// poll (Execute) and revokes the binding when the turn ends (the release
// func). Between turns only the metadata-only startup window (docs/session-mode.md, "Between turns: the startup window") lets
// the worker reach its MCP servers, for initialize, ping and tools/list.
//
// Routes (session_routes.go), with the exact statuses and texts of docs/session.md, "Routes and statuses":
//
//	POST /worker/ready      handshake: capabilities, privateHistory; sets ready
//	GET  /worker/config     the profile's wire.SessionWorkerConfig
//	GET  /worker/next       long poll (45 s) for the queued turn
//	POST /worker/result     the turn's wire.ResultPacket
//	GET  /mcp-tools         wire.MCPDiscovery of this broker's servers
//	POST /anthropic/v1/messages[/count_tokens][?beta=true], or POST /model
//	                        the model, rebuilt (anthropic.go) under the bound
//	                        turn's thinking level
//	POST /tools/<name>      a host tool with {input:{…}} → SessionToolResponse
//	POST /mcp/<server>      MCP JSON-RPC, rebuilt and passed through
//	POST /compaction/compact the host compactor (session_compaction.go)
//	POST /compaction/report the worker's compaction reports, logged
//
// Decisions of this Go port (docs/session.md, "Session broker"):
//   - A credential call holds one of the turn's slots (SessionConfig.
//     MaxInFlight, four by default) until its answer has been passed on
//     completely, not only until streaming starts as the reference does
//     (docs/session.md, "Decisions (Go port)": stricter).
//   - The sealed header checks (the dummy bearer, Host: broker, the header
//     allow-list) do not apply: the session worker need not send any of
//     them. Like the reference (docs/session.md, "Decisions (Go port)"), the session broker ignores the
//     worker's Authorization, cookies and every other header and forwards
//     only the few named in docs/session.md, "Routes and statuses". Any Host is accepted.
//   - Each call's scope (budget, slots, credential scope, thinking level,
//     log channel) is the bound turn captured when the request arrives,
//     before its body is read (docs/session.md, "Decisions (Go port)").
//   - A call is bounded by the bound turn's context, which carries its
//     deadline, not by the sealed 60 s per-call timeout; the listener adds
//     the 120 s silence limit (session_listener.go).
//   - The model credential is sent as the broker's Anthropic routes send
//     it (x-api-key), and only anthropic-version and anthropic-beta of the
//     worker's headers are forwarded on those routes.
//   - An MCP server without a key getter is called without Authorization;
//     a getter that fails or returns "" fails the call with 502 before any
//     upstream contact.
//   - The startup window's calls are charged to the daily call budgets
//     of SessionConfig.Channel and the installation, and the windows the
//     worker re-arms are capped per channel per UTC day (WindowQuota);
//     the reference counts neither (session_window.go, issue 21).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/wire"
)

// SessionConfig configures a Session.
type SessionConfig struct {
	// Broker is the checked broker of the channel's profile: its model
	// route, host tools, MCP servers, upstream client and logger.
	Broker *Broker
	// Channel is the channel whose worker this broker serves. The
	// startup window's calls are charged to its daily call budgets (and
	// the installation's), and its re-armed windows count against
	// Windows. Required with a budget ledger (Broker's Config.Budget).
	Channel rtsandbox.ChannelKey
	// Windows caps the re-armed startup windows of Channel per day; the
	// host shares one among all its session brokers. nil means a quota
	// of this Session's own (rtsandbox.StartupWindowsPerDay, on Now),
	// which a new broker would start afresh.
	Windows *WindowQuota
	// WorkerImage names the worker image in the privacy problem text; ""
	// reads "(configured image)".
	WorkerImage string
	// MaxCalls is each bound turn's call budget: 0 means
	// rtsandbox.SessionMaxCalls, otherwise 1..rtsandbox.MaxCallsLimit.
	MaxCalls int
	// MaxInFlight bounds a bound turn's credential calls at once (docs/session.md, "Routes and statuses"
	// step 6): 0 means rtsandbox.SessionMaxInFlight (at most
	// MaxConnections−1), otherwise 1..MaxConnections−1, since one
	// connection is the worker's long poll. The startup window's slots
	// are the lower of it and rtsandbox.SessionMaxInFlight: a lowered
	// bound applies there too, a raised one never widens the
	// metadata-only window.
	MaxInFlight int
	// MaxConnections caps the listener's connections at once (docs/session.md, "Session broker"): 0
	// means rtsandbox.SessionMaxConns, otherwise
	// MinSessionConns..MaxSessionConns.
	MaxConnections int
	// MaxRequestBytes bounds a credential call's request body (docs/session.md, "Routes and statuses"
	// step 9; one byte more is 502 "Broker call failed"): 0 means
	// rtsandbox.MaxSessionRequest, otherwise 1..that.
	MaxRequestBytes int64
	// MaxResponseBytes caps the upstream bytes of one call's answer
	// (docs/protocol.md, "SSE"; more cuts the answer off): 0 means
	// rtsandbox.MaxStreamedAnswer, otherwise 1..that.
	MaxResponseBytes int64
	// Worker is the answer of GET /worker/config. Its Compaction is set
	// from Compactor: the engine's name with one, absent without.
	Worker wire.SessionWorkerConfig
	// Compactor is the host compactor of docs/protocol.md, "Compaction" (CheckCompactor); nil
	// means none, and every compact request falls back.
	Compactor Compactor
	// Scrub cleans a failed compactor's error text before the worker
	// and the log see it, after the broker masked every form of the
	// model credential in it; nil blanks control characters only. The
	// host wires its diagnostic scrubber.
	Scrub func(string) string
	// Now is the clock of the startup window (its 90 s and the 10 s
	// re-arm gap); nil means time.Now.
	Now func() time.Time
	// Silence is the listener's per-request silence limit (docs/session.md, "Session broker") and
	// HeaderTimeout its header deadline; 0 means
	// rtsandbox.StreamSilence and rtsandbox.SessionHeaderTimeout. Tests
	// shorten them.
	Silence       time.Duration
	HeaderTimeout time.Duration
}

// Session errors. Their texts are the reference's.
var (
	// ErrTurnActive: Bind while another turn is bound.
	ErrTurnActive = fmt.Errorf("%w: Broker turn already active", rtsandbox.ErrBusy)
	// ErrWorkerBusy: Execute while a turn is pending.
	ErrWorkerBusy = fmt.Errorf("%w: Worker is busy", rtsandbox.ErrBusy)
	// ErrTurnCancelled: Execute's context ended before the result came.
	ErrTurnCancelled = fmt.Errorf("%w: Turn cancelled", rtsandbox.ErrEndedEarly)
	// ErrWorkerCapability: the worker lacks a privacy capability the turn
	// needs (docs/protocol.md, "Privacy"); the error's text is the problem text.
	ErrWorkerCapability = fmt.Errorf("%w: worker capability missing", rtsandbox.ErrRefused)
	// ErrWorkerRestarted: the worker announced itself again (POST
	// /worker/ready) after it took the pending turn: the process that had
	// the turn is gone (its container restarted), so the turn fails at
	// once rather than at its deadline. A turn not yet delivered stays
	// queued for the new worker's poll.
	ErrWorkerRestarted = fmt.Errorf("%w: worker announced itself again during its turn", rtsandbox.ErrSandboxStopped)
	// ErrSessionClosed: the Session was closed.
	ErrSessionClosed = fmt.Errorf("%w: session broker closed", rtsandbox.ErrEndedEarly)
)

// startupChannel is the startup window's scope (docs/session-mode.md, "Between turns: the startup window"): no channel, no
// speaker, no profile.
const startupChannel rtsandbox.ChannelKey = "sandbox:startup"

// Session is the broker of one channel's long-lived worker: an
// http.Handler (session_routes.go) and, after Listen, its Unix-socket
// server. It is safe for concurrent use.
type Session struct {
	b   *Broker
	cfg SessionConfig
	now func() time.Time
	// intake is the channel's decoding budget (one largest body's worth,
	// intake.go), taken before the host's; nil without a host Intake.
	intake   *pool
	closed   chan struct{}
	closeMu  sync.Mutex
	server   *Server
	isClosed bool
	windows  *WindowQuota

	mu sync.Mutex
	// bound is the bound turn, nil between turns; startup the metadata
	// window, nil once revoked; armedAt when it was last armed.
	bound   *scope
	startup *scope
	armedAt time.Time
	// ready is set by the first valid /worker/ready; caps is the last
	// one's capabilities (nil: an old worker declaring none).
	ready bool
	caps  *wire.WorkerCapabilities
	// private is the sticky "privacy required" of docs/protocol.md, "Privacy".
	private bool
	// loadReports counts the worker load reports logged (logLoad).
	loadReports int
	// pending is the turn queued by Execute; waiter the one long poll
	// waiting; receiving is set while a result body is read.
	pending   *pendingTurn
	waiter    chan *pendingTurn
	receiving bool
	// compacting is the broker's one host compaction slot (docs/session.md, "Routes and statuses"), held
	// until the compactor truly returns.
	compacting bool
}

// scope is what a credential call runs under: a bound turn or the startup
// window. It is captured when a request arrives and kept to its end.
type scope struct {
	turn    *Turn
	ctx     context.Context
	cancel  context.CancelFunc
	startup bool
	expires time.Time // startup only: the window's end on the Session clock
	profile string
	failed  bool // guarded by Session.mu
	// rearmed marks a startup window re-armed by the worker, which
	// counts against the window quota; opened is set at its first call
	// and capped when the quota refused it (session_window.go). Guarded
	// by Session.mu.
	rearmed, opened, capped bool
	// compacts and reports count the turn's compact requests and
	// reports (docs/protocol.md, "Compaction"); guarded by Session.mu.
	compacts, reports int
}

// pendingTurn is a turn queued by Execute.
type pendingTurn struct {
	turn      wire.SessionTurn
	ctx       context.Context
	delivered bool
	done      chan pendingDone // buffered: one send, under Session.mu
	settled   bool
}

type pendingDone struct {
	result wire.SessionResult
	err    error
}

// NewSession checks cfg and returns a Session with a fresh startup
// window. It does not listen yet (Listen).
func NewSession(cfg SessionConfig) (*Session, error) {
	if cfg.Broker == nil {
		return nil, fmt.Errorf("%w: session broker needs a broker", rtsandbox.ErrInvalid)
	}
	if cfg.MaxCalls == 0 {
		cfg.MaxCalls = rtsandbox.SessionMaxCalls
	}
	if cfg.MaxCalls < 1 || cfg.MaxCalls > rtsandbox.MaxCallsLimit {
		return nil, ErrBudget
	}
	if err := cfg.checkChannel(); err != nil {
		return nil, err
	}
	if err := cfg.limits(); err != nil {
		return nil, err
	}
	if cfg.Silence < 0 || cfg.HeaderTimeout < 0 {
		return nil, fmt.Errorf("%w: negative listener limit", rtsandbox.ErrInvalid)
	}
	if cfg.Silence == 0 {
		cfg.Silence = rtsandbox.StreamSilence
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = rtsandbox.SessionHeaderTimeout
	}
	if cfg.Worker.Tools == nil {
		cfg.Worker.Tools = []rtsandbox.ToolSpec{} // [] on the wire, never null
	}
	if cfg.Worker.MCP == nil {
		cfg.Worker.MCP = []wire.MCPServerTools{}
	}
	cfg.Worker.Compaction = nil
	if cfg.Compactor != nil {
		if err := CheckCompactor(cfg.Compactor); err != nil {
			return nil, err
		}
		cfg.Worker.Compaction = &wire.SessionCompactionID{Engine: cfg.Compactor.Engine()}
	}
	s := &Session{b: cfg.Broker, cfg: cfg, now: cfg.Now, closed: make(chan struct{}), windows: cfg.Windows}
	if s.now == nil {
		s.now = time.Now
	}
	if s.windows == nil {
		s.windows = NewWindowQuota(rtsandbox.StartupWindowsPerDay, s.now)
	}
	if cfg.Broker.cfg.Intake != nil {
		s.intake = newPool(weight(s.largestBody()))
	}
	s.mu.Lock()
	s.armLocked(false)
	s.mu.Unlock()
	return s, nil
}

// checkChannel refuses an invalid channel, and a missing one when the
// broker keeps daily budgets: the startup window's calls would be
// charged to no channel.
func (c *SessionConfig) checkChannel() error {
	switch {
	case c.Channel != "" && !c.Channel.Valid():
		return fmt.Errorf("%w: session broker channel %q", rtsandbox.ErrInvalid, c.Channel)
	case c.Channel == "" && c.Broker.cfg.Budget != nil:
		return fmt.Errorf("%w: a session broker with daily budgets needs its channel", rtsandbox.ErrInvalid)
	}
	return nil
}

// largestBody is the largest body the channel's worker may send: a
// credential call's, a result's or a compact request's.
func (s *Session) largestBody() int64 {
	n := max(s.cfg.MaxRequestBytes, rtsandbox.MaxResultBody)
	if s.cfg.Compactor != nil {
		n = max(n, s.cfg.Compactor.MaxRequestBytes())
	}
	return n
}

// hold waits for a body of bytes's share of the channel's and the host's
// decoding budgets (intake.go).
func (s *Session) hold(ctx context.Context, bytes int64) (*hold, error) {
	return newHold(ctx, bytes, s.intake, s.b.cfg.Intake.pool())
}

// The range of SessionConfig.MaxConnections: the long poll plus one call,
// and at most config's session.max_connections bound.
const (
	MinSessionConns = 2
	MaxSessionConns = 64
)

// limits applies the defaults of the connection, slot and byte limits
// and refuses values out of range.
func (c *SessionConfig) limits() error {
	if c.MaxConnections == 0 {
		c.MaxConnections = rtsandbox.SessionMaxConns
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = min(rtsandbox.SessionMaxInFlight, c.MaxConnections-1)
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = rtsandbox.MaxSessionRequest
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = rtsandbox.MaxStreamedAnswer
	}
	switch {
	case c.MaxConnections < MinSessionConns || c.MaxConnections > MaxSessionConns:
		return fmt.Errorf("%w: session broker connections %d outside %d..%d", rtsandbox.ErrInvalid, c.MaxConnections, MinSessionConns, MaxSessionConns)
	case c.MaxInFlight < 1 || c.MaxInFlight >= c.MaxConnections:
		return fmt.Errorf("%w: session broker calls in flight %d outside 1..%d", rtsandbox.ErrInvalid, c.MaxInFlight, c.MaxConnections-1)
	case c.MaxRequestBytes < 1 || c.MaxRequestBytes > rtsandbox.MaxSessionRequest:
		return fmt.Errorf("%w: session broker request limit %d outside 1..%d bytes", rtsandbox.ErrInvalid, c.MaxRequestBytes, rtsandbox.MaxSessionRequest)
	case c.MaxResponseBytes < 1 || c.MaxResponseBytes > rtsandbox.MaxStreamedAnswer:
		return fmt.Errorf("%w: session broker answer cap %d outside 1..%d bytes", rtsandbox.ErrInvalid, c.MaxResponseBytes, rtsandbox.MaxStreamedAnswer)
	}
	return nil
}

// armLocked opens a fresh startup window (docs/session-mode.md, "Between turns: the startup window"): 32 calls, 4 slots (fewer
// when MaxInFlight is lower), 90 s, thinking low (unused: the model is
// refused in it), its calls charged to the channel's and the
// installation's daily budgets. rearmed marks one the worker re-armed,
// which counts against the window quota.
func (s *Session) armLocked(rearmed bool) {
	if s.startup != nil {
		s.startup.cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), rtsandbox.StartupWindowTTL)
	t := s.b.Turn(ctx, rtsandbox.Binding{Channel: startupChannel})
	t.budget, t.maxInFlight, t.level, t.errLog = rtsandbox.StartupWindowCalls, min(s.cfg.MaxInFlight, rtsandbox.SessionMaxInFlight), modelapi.LevelLow, true
	t.maxAnswer = s.cfg.MaxResponseBytes
	t.scopes = budget.ChannelScopes(s.cfg.Channel)
	now := s.now()
	s.startup = &scope{turn: t, ctx: ctx, cancel: cancel, startup: true, expires: now.Add(rtsandbox.StartupWindowTTL), rearmed: rearmed}
	s.armedAt = now
}

// rearm re-arms the startup window for /worker/ready and /mcp-tools: only
// when no turn is bound, the window is missing, expired or spent, and more
// than 10 s have passed since it was last armed (the rate limit against a
// worker looping it). The window counts against the channel's quota of
// the day once it is used (openWindow).
func (s *Session) rearm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bound != nil || s.windowLive() || !s.now().After(s.armedAt.Add(rtsandbox.StartupRearmGap)) {
		return
	}
	s.armLocked(true)
}

// windowLive reports whether the startup window exists, has time left and
// calls left.
func (s *Session) windowLive() bool {
	w := s.startup
	return w != nil && w.ctx.Err() == nil && s.now().Before(w.expires) && w.turn.Remaining() > 0
}

// Bind binds one admitted turn (docs/protocol.md, "Privacy"): its channel, speaker and tier, its
// profile, the host-judged thinking level and the deadline. ctx is the
// turn signal: when it ends (or the deadline passes), the turn's calls get
// 410 and those in flight are cancelled. Binding revokes the startup
// window for good (ready and /mcp-tools re-arm it between turns). release
// un-binds, only if this binding is still the current one, and is safe to
// call more than once; it does not end ctx: a call that arrived under the
// turn keeps its scope (the reference's tests) until ctx ends, which the runtime does as
// it finishes the turn, just before release (docs/architecture.md, "The request path"). ctx must end
// eventually.
func (s *Session) Bind(ctx context.Context, b wire.SessionBinding) (release func(), err error) {
	level := modelapi.ThinkingLevel(b.Thinking)
	if !level.Valid() {
		return nil, fmt.Errorf("%w: thinking level %q", rtsandbox.ErrInvalid, b.Thinking)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bound != nil {
		return nil, ErrTurnActive
	}
	var tctx context.Context
	var cancel context.CancelFunc
	if b.Deadline.IsZero() {
		tctx, cancel = context.WithCancel(ctx)
	} else {
		tctx, cancel = context.WithDeadline(ctx, b.Deadline)
	}
	t := s.b.Turn(tctx, b.Binding)
	t.budget, t.maxInFlight, t.level, t.errLog = s.cfg.MaxCalls, s.cfg.MaxInFlight, level, true
	t.maxAnswer = s.cfg.MaxResponseBytes
	sc := &scope{turn: t, ctx: tctx, cancel: cancel, profile: b.Profile}
	s.bound = sc
	if s.startup != nil {
		s.startup.cancel()
		s.startup = nil
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.bound == sc {
			s.bound = nil
		}
	}, nil
}

// Execute queues turn for the worker (docs/protocol.md, "The session protocol") and waits for its result: the
// worker's long poll gets it at once if one waits, else the next one does.
// It refuses a second pending turn (ErrWorkerBusy) and, before queueing, a
// turn whose private memory the worker cannot keep private
// (ErrWorkerCapability, docs/protocol.md, "Privacy"). When ctx ends first, the turn is dropped
// (a later result gets 409) and Execute returns ErrTurnCancelled, which
// also wraps wire.ErrTurnUndelivered when no worker had taken it. A
// worker's ok:false result is a result, not an error, except after the
// bound turn had a call refused for a daily budget: then the result comes
// with an error wrapping rtsandbox.ErrOverBudget, so the guest gets the
// budget text as in sealed mode.
func (s *Session) Execute(ctx context.Context, turn wire.SessionTurn) (wire.SessionResult, error) {
	if err := turn.Validate(); err != nil {
		return wire.SessionResult{}, err
	}
	s.mu.Lock()
	bound := s.bound
	s.mu.Unlock()
	if turn.Images == nil {
		turn.Images = []wire.Image{}
	}
	p := &pendingTurn{turn: turn, ctx: ctx, done: make(chan pendingDone, 1)}
	if err := s.queue(p); err != nil {
		return wire.SessionResult{}, err
	}
	select {
	case d := <-p.done:
		return d.result, overBudget(bound, d)
	case <-ctx.Done():
	case <-s.closed:
	}
	s.mu.Lock()
	err := ErrTurnCancelled
	if !p.delivered {
		err = fmt.Errorf("%w: %w", ErrTurnCancelled, wire.ErrTurnUndelivered)
	}
	s.settleLocked(p, pendingDone{err: err})
	s.mu.Unlock()
	d := <-p.done
	return d.result, d.err
}

// queue makes p the pending turn and hands it to a waiting long poll.
func (s *Session) queue(p *pendingTurn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.isClosedLocked():
		return ErrSessionClosed
	case s.pending != nil:
		return ErrWorkerBusy
	}
	if p.turn.PrivateMemory() {
		s.private = true
	}
	if problem, ok := s.privacyProblemLocked(); !ok {
		return fmt.Errorf("%w: %s", ErrWorkerCapability, problem)
	}
	s.pending = p
	if s.waiter != nil {
		p.delivered = true
		s.waiter <- p
		s.waiter = nil
	}
	return nil
}

// settleLocked ends p with d, once, and clears it if it is pending.
func (s *Session) settleLocked(p *pendingTurn, d pendingDone) {
	if s.pending == p {
		s.pending = nil
	}
	if !p.settled {
		p.settled = true
		p.done <- d
	}
}

// Ready reports whether a worker has completed the ready handshake.
func (s *Session) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// Close stops the listener (force-closing its connections, which ends a
// long poll), cancels the startup window and fails a pending Execute with
// ErrTurnCancelled. A bound turn stays bound until its release; its calls
// end with their connections. Later calls return the first's result.
func (s *Session) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.isClosed {
		return nil
	}
	s.isClosed = true
	close(s.closed)
	s.mu.Lock()
	if s.startup != nil {
		s.startup.cancel()
		s.startup = nil
	}
	s.mu.Unlock()
	if s.server != nil {
		return s.server.Close()
	}
	return nil
}

func (s *Session) isClosedLocked() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// capableLocked reports whether the worker declared both privacy
// capabilities, and lists the missing ones.
func (s *Session) capableLocked() (missing []string) {
	if s.caps == nil || !s.caps.PrivateTo {
		missing = append(missing, "privateTo")
	}
	if s.caps == nil || !s.caps.ReaderRecords {
		missing = append(missing, "readerRecords")
	}
	return missing
}

// privacyProblemLocked returns the problem text of docs/protocol.md, "Privacy" when privacy is
// required and the worker lacks a capability; ok when there is none.
func (s *Session) privacyProblemLocked() (problem string, ok bool) {
	if !s.private {
		return "", true
	}
	missing := s.capableLocked()
	if len(missing) == 0 {
		return "", true
	}
	image := s.cfg.WorkerImage
	if image == "" {
		image = "(configured image)"
	}
	return "Sandbox worker image " + image + " lacks " + strings.Join(missing, ", ") +
		"; rebuild this image with the installed core and sandbox packages", false
}

// failTurnLocked applies a privacy problem (docs/protocol.md, "Privacy"): the bound turn is marked
// failed, so its later calls get 410, and the pending Execute is rejected
// with the problem.
func (s *Session) failTurnLocked(problem string) {
	if s.bound != nil {
		s.bound.failed = true
	}
	if s.pending != nil {
		s.settleLocked(s.pending, pendingDone{err: fmt.Errorf("%w: %s", ErrWorkerCapability, problem)})
	}
	s.b.log.Warn("sandbox worker lacks a privacy capability", "problem", problem)
}

// capture returns the scope a credential request runs under (docs/session.md, "Routes and statuses" step
// 1): the bound turn, else the live startup window; nil when neither or
// when it ended or failed.
func (s *Session) capture() *scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.bound
	if sc == nil {
		if s.startup == nil || s.startup.ctx.Err() != nil || !s.now().Before(s.startup.expires) {
			return nil
		}
		sc = s.startup
	}
	if sc.ctx.Err() != nil || sc.failed {
		return nil
	}
	return sc
}

// SessionHostTool is a host tool that answers session mode's richer
// wire.SessionToolResponse: an error text, an image, and privateTo
// naming the only reader who may see the result (the seam for the private
// memory tools). A Tool.Impl that implements it is called through it in
// session mode; one that does not answers {ok:true, text} with Run's text.
// b is the host-bound turn; nothing of the request body can change it.
type SessionHostTool interface {
	RunSession(ctx context.Context, input json.RawMessage, b wire.SessionBinding) (wire.SessionToolResponse, error)
}

// logFailure writes the failure log line of docs/protocol.md, "SSE": channel, upstream,
// status, latency and, for an upstream error answer, the start of its body
// as passed on (already free of the credential), cut to 2,000 bytes with
// control characters blanked.
func (s *Session) logFailure(sc *scope, upstreamName string, o outcome, latency time.Duration) {
	attrs := []any{"channel", string(sc.turn.binding.Channel), "upstream", upstreamName,
		"status", o.status, "latencyMs", latency.Milliseconds()}
	if len(o.errBody) > 0 {
		attrs = append(attrs, "body", logText(string(o.errBody)))
	}
	if o.detail != "" {
		attrs = append(attrs, "error", o.detail)
	}
	s.b.log.Warn("sandbox upstream call failed", attrs...)
}

// writeText answers status with a plain-text body and Connection: close.
func writeText(w http.ResponseWriter, status int, text string) {
	writeOutcome(w, outcome{status: status, body: []byte(text)})
}

// writeJSON answers 200 with v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	body, err := marshal(v)
	if err != nil {
		writeText(w, http.StatusBadGateway, sessBrokerFailed)
		return
	}
	writeOutcome(w, okJSON(body))
}

var errSilenceBody = errors.New("request body silence limit passed")
