package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the session worker's process (docs/session.md, "Process"): the
// long-lived agent of one channel, started as `rtsandbox-worker session`.
// It dials the broker socket directly (no loopback forwarder), learns its
// MCP servers and its profile, then loops forever: announce itself, long-
// poll for a turn, run it, post the result. See docs/session.md, "Session
// worker and conversation format".

// Client timeouts of the session worker's own routes (docs/session.md, "Process").
const (
	readyTimeout = 5 * time.Second
	// nextTimeout outlasts the broker's long poll, which answers 408
	// after rtsandbox.SessionNextWait (45 s): 55 s, as the reference.
	nextTimeout   = rtsandbox.SessionNextWait + 10*time.Second
	resultTimeout = 60 * time.Second
	// sessionTurnTimeout aborts a turn that runs longer, as the
	// reference's 10-minute timer does: the host's default turn deadline.
	sessionTurnTimeout = rtsandbox.SessionTurnTimeout
)

// Log messages of the session worker (one JSON line each, docs/session.md, "Process").
const (
	logWorkerFailed = "sandbox worker failed"
	logPollFailed   = "broker poll failed"
	logLoopFailed   = "sandbox worker loop failed"
	logTurnStarted  = "turn started"
	logTurnFinished = "turn finished"
	logToolFailed   = "tool failed"
	logModelFailed  = "model call failed"
	logModelRetry   = "model retry"
	logResultFailed = "result not accepted"
	logSessionFile  = "session file ignored"
	logLinesDropped = "session file lines dropped"
)

// SessionOptions are the session worker's inputs. The binary passes the
// fixed socket and workspace and its stdout; tests pass their own, with a
// clock and a sleep they control.
type SessionOptions struct {
	Socket string // "" means wire.SessionSocketPath
	// Hello, when set, is the run directory's broker hello file
	// (wire.SessionHelloPath in a Kubernetes Pod): the worker reaches the
	// broker's network listener it names instead of Socket
	// (sessionhello.go).
	Hello     string
	Workspace string    // "" means wire.SessionWorkspace
	Stdout    io.Writer // the JSON log lines; nil discards them
	// Now is the clock of the system prompt and of session file names;
	// nil means time.Now.
	Now func() time.Time
	// Sleep waits between loop rounds after a failure or a non-OK poll;
	// nil means a timer that ends with ctx.
	Sleep func(ctx context.Context, d time.Duration) error
	// TurnTimeout aborts a turn that runs longer; 0 means 10 minutes.
	TurnTimeout time.Duration
}

func (o SessionOptions) withDefaults() SessionOptions {
	if o.Socket == "" {
		o.Socket = wire.SessionSocketPath
	}
	if o.Workspace == "" {
		o.Workspace = wire.SessionWorkspace
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.TurnTimeout == 0 {
		o.TurnTimeout = sessionTurnTimeout
	}
	return o
}

// sessionWorker is the running worker.
type sessionWorker struct {
	o   SessionOptions
	log *slog.Logger
	// loop carries the worker's own routes (ready, next, result, config,
	// discovery); broker the turn's (model, tools, MCP, compaction). On a
	// socket they are one; on the network listener broker carries the
	// turn's own token (useTurnBroker).
	loop, broker *broker
	config       wire.SessionWorkerConfig
	tiers        tiers // the compaction tiers of the profile's window
	mcp          *mcpClient
	store        *sessionStore
	outage       bool // a poll failed and none has succeeded since
	// loadReported is set once a ready handshake carrying the store's
	// load report (sessionLoad) was accepted: the host logged it.
	loadReported bool

	// skills are the profile's skills (docs/session.md, "Skills"); nil when it has none.
	skills *sessionSkills
}

// RunSession runs the session worker until ctx ends, and returns the
// process exit code: 1 after a fatal startup error (logged as "sandbox
// worker failed"; the container's restart policy starts it again), 0 when
// ctx ended. The forever loop never ends on its own: every failure inside
// it is logged and retried after rtsandbox.SessionWorkerRetry.
func RunSession(ctx context.Context, o SessionOptions) int {
	o = o.withDefaults()
	w := &sessionWorker{o: o, log: newSessionLogger(o.Stdout), loop: loopBroker(o)}
	w.broker = w.loop
	if err := w.start(ctx); err != nil {
		if ctx.Err() != nil {
			return 0
		}
		w.log.Error(logWorkerFailed, "error", err.Error())
		return 1
	}
	for ctx.Err() == nil {
		w.round(ctx)
	}
	return 0
}

// start runs the startup order of docs/session.md, "Process": GET /mcp-tools (any failure is
// fatal), GET /worker/config (404 reads as an empty profile, which has no
// model and is fatal too), the skills (a tool claimed by a skill that is
// not among the worker's is fatal), then the conversation to continue.
func (w *sessionWorker) start(ctx context.Context) error {
	discovery, err := w.discover(ctx)
	if err != nil {
		return err
	}
	if w.config, err = w.workerConfig(ctx, discovery); err != nil {
		return err
	}
	if w.skills, err = loadSkills(w.config); err != nil {
		return err
	}
	w.config.Prompt = w.skills.prompt(w.config.Prompt) // the system prompt's skills block
	w.mcp = newMCPClient(w.broker)
	w.tiers = newTiers(w.config.ContextWindow, w.config.ReserveTokens)
	w.store = openSessionStore(sessionsDir(w.o.Workspace), sessionHistoryBudget, w.o.Now, func(name string, err error) {
		w.log.Warn(logSessionFile, "file", name, "error", err.Error())
	})
	if n := w.store.loaded.droppedLines; n > 0 {
		w.log.Warn(logLinesDropped, "file", filepath.Base(w.store.file), "lines", n)
	}
	return nil
}

// discover reads GET /mcp-tools.
func (w *sessionWorker) discover(ctx context.Context) (wire.MCPDiscovery, error) {
	ans, err := w.loop.get(ctx, wire.RouteMCPTools, readyTimeout, maxConfigBody)
	if err != nil {
		return wire.MCPDiscovery{}, err
	}
	if ans.status != http.StatusOK {
		return wire.MCPDiscovery{}, fmt.Errorf("GET %s: status %d", wire.RouteMCPTools, ans.status)
	}
	return parseDiscovery(ans.body)
}

// workerConfig reads GET /worker/config and keeps of its MCP servers and
// tools only those the discovery lists: the broker refuses the others.
func (w *sessionWorker) workerConfig(ctx context.Context, d wire.MCPDiscovery) (wire.SessionWorkerConfig, error) {
	ans, err := w.loop.get(ctx, wire.RouteWorkerConfig, readyTimeout, maxConfigBody)
	if err != nil {
		return wire.SessionWorkerConfig{}, err
	}
	body := ans.body
	switch ans.status {
	case http.StatusOK:
	case http.StatusNotFound: // an older broker: no profile
		body = []byte(`{}`)
	default:
		return wire.SessionWorkerConfig{}, fmt.Errorf("GET %s: status %d", wire.RouteWorkerConfig, ans.status)
	}
	cfg, err := parseWorkerConfig(body)
	if err != nil {
		return wire.SessionWorkerConfig{}, err
	}
	cfg.MCP = discoveredOnly(cfg.MCP, d)
	return cfg, nil
}

// round is one pass of the forever loop: ready, next, and the turn when
// one came. Failures, a panic included, are logged and followed by the
// retry pause.
func (w *sessionWorker) round(ctx context.Context) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error(logLoopFailed, "error", "recovered panic")
			_ = w.o.Sleep(ctx, rtsandbox.SessionWorkerRetry)
		}
	}()
	turnID, body, ok := w.poll(ctx)
	if !ok {
		_ = w.o.Sleep(ctx, rtsandbox.SessionWorkerRetry)
		return
	}
	result := w.runTurnSafe(ctx, turnID, body)
	if turnID == "" {
		_ = w.o.Sleep(ctx, rtsandbox.SessionWorkerRetry)
		return
	}
	if err := w.postResult(ctx, turnID, result); err != nil {
		w.log.Warn(logResultFailed, "turnId", turnID, "error", err.Error())
		_ = w.o.Sleep(ctx, rtsandbox.SessionWorkerRetry)
	}
}

// poll announces the worker and long-polls for a turn. ok is false when
// there is none to run: a failure (logged once per outage) or a non-OK
// answer such as 408 Retry. Otherwise body is the turn as delivered and
// turnID its id when that is a safe name, so that even a turn that does
// not validate can be answered; "" when there is none.
func (w *sessionWorker) poll(ctx context.Context) (turnID string, body []byte, ok bool) {
	ans, err := w.ready(ctx)
	if err == nil {
		ans, err = w.loop.get(ctx, wire.RouteWorkerNext, nextTimeout, rtsandbox.MaxSessionRequest)
	}
	if err != nil {
		if ctx.Err() == nil && !w.outage {
			w.log.Warn(logPollFailed, "error", err.Error())
		}
		w.outage = true
		return "", nil, false
	}
	w.outage = false
	if ans.status != http.StatusOK {
		return "", nil, false
	}
	return turnIDOf(ans.body), ans.body, true
}

// errReadyRefused marks a ready handshake the broker did not accept.
var errReadyRefused = errors.New("ready handshake refused")

// ready posts the capability body. The worker declares both capabilities
// because it implements them: it keeps each tool result's privateTo and
// writes a reader record per turn (sessionstore.go), and projects every
// model request for the turn's reader (sessionprivacy.go). privateHistory
// is whether the kept conversation hides anything from a reader-less view.
// Until one handshake is accepted, it carries what loading the
// conversation lost, when anything was (sessionLoad), so the host logs
// it once.
func (w *sessionWorker) ready(ctx context.Context) (*answer, error) {
	caps := &wire.WorkerCapabilities{PrivateTo: true, ReaderRecords: true}
	body := wire.WorkerReady{Capabilities: caps, PrivateHistory: w.store.privateHistory()}
	if l := w.store.loaded; !w.loadReported && (l.droppedLines > 0 || l.ignoredFiles > 0) {
		body.SessionLoad = &wire.SessionLoad{
			DroppedLines: min(l.droppedLines, wire.MaxSessionLoadCount),
			IgnoredFiles: min(l.ignoredFiles, wire.MaxSessionLoadCount),
		}
	}
	ans, err := w.loop.call(ctx, http.MethodPost, wire.RouteWorkerReady, body, nil, readyTimeout, maxConfigBody)
	if err == nil && ans.status != http.StatusOK {
		err = fmt.Errorf("%w: status %d", errReadyRefused, ans.status)
	}
	if err == nil {
		w.loadReported = true
	}
	return ans, err
}

// postResult posts the turn's result packet.
func (w *sessionWorker) postResult(ctx context.Context, turnID string, r wire.SessionResult) error {
	packet := wire.ResultPacket{TurnID: turnID, Result: r}
	ans, err := w.loop.call(ctx, http.MethodPost, wire.RouteWorkerResult, packet, nil, resultTimeout, maxConfigBody)
	if err == nil && ans.status != http.StatusOK {
		err = fmt.Errorf("status %d", ans.status)
	}
	return err
}

// runTurnSafe validates and runs a turn; a panic becomes the reference's
// "Worker output failed" result rather than the end of the process.
func (w *sessionWorker) runTurnSafe(ctx context.Context, turnID string, body []byte) (result wire.SessionResult) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error(logLoopFailed, "turnId", turnID, "error", "recovered panic")
			result = failedResult(errWorkerOutput)
		}
	}()
	turn, err := wire.ParseSessionTurn(body)
	if err != nil {
		w.log.Warn(logLoopFailed, "turnId", turnID, "error", err.Error())
		return failedResult(err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, w.o.TurnTimeout, errTurnTimeout)
	defer cancel()
	w.useTurnBroker(turn.BrokerToken)
	defer w.useTurnBroker("")
	return w.runTurn(ctx, turn)
}

// newSessionLogger writes one JSON object per line: {time, level, msg,
// app:"sandbox-worker", …}.
func newSessionLogger(out io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(out, nil)).With("app", "sandbox-worker")
}
