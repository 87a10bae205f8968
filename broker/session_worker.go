package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/wire"
)

// The worker transport routes (docs/protocol.md, "The session protocol"). They carry no
// credential and spend no budget.

// serveReady is POST /worker/ready: at most 16 KiB, parsed by
// wire.ParseWorkerReady; a bad body leaves ready unset. privateHistory
// makes privacy required for the broker's life; a capability problem then
// fails the bound turn and rejects the pending one. A pending turn that
// was already delivered fails with ErrWorkerRestarted: a worker
// announces itself once per process, so the one that took the turn is
// gone. Then ready is set and the startup window re-armed (docs/session-mode.md, "Between turns: the startup window"). A sessionLoad report is logged
// (logLoad) before the answer, so a worker that hears 200 knows it was.
func (s *Session) serveReady(w http.ResponseWriter, r *http.Request) {
	body, err := readLimited(r.Body, rtsandbox.MaxReadyBody)
	if err != nil {
		writeText(w, http.StatusBadRequest, sessInvalidReady)
		return
	}
	ready, err := wire.ParseWorkerReady(body)
	if err != nil {
		writeText(w, http.StatusBadRequest, sessInvalidReady)
		return
	}
	s.mu.Lock()
	s.caps = ready.Capabilities
	if ready.PrivateHistory {
		s.private = true
	}
	if problem, ok := s.privacyProblemLocked(); !ok && s.pending != nil {
		s.failTurnLocked(problem)
	}
	if p := s.pending; p != nil && p.delivered {
		s.settleLocked(p, pendingDone{err: ErrWorkerRestarted})
		s.b.log.Warn("sandbox worker announced itself again during its turn: the turn failed", "channel", string(s.cfg.Channel))
	}
	s.ready = true
	logLoad := ready.SessionLoad != nil && *ready.SessionLoad != (wire.SessionLoad{}) && s.loadReports < maxLoadReports
	if logLoad {
		s.loadReports++
	}
	s.mu.Unlock()
	if logLoad {
		s.logLoad(*ready.SessionLoad)
	}
	s.rearm()
	writeText(w, http.StatusOK, sessReady)
}

// maxLoadReports bounds the load reports a Session logs: a worker sends
// one per process start (its container restarting), so a worker that
// sends one with every handshake cannot flood the log.
const maxLoadReports = 16

// logLoad writes the operator's line for a worker's load report
// (wire.SessionLoad): what its conversation lost when it was
// loaded, with the channel.
func (s *Session) logLoad(l wire.SessionLoad) {
	s.b.log.Warn("session conversation lost lines on load; see docs/session.md",
		"channel", string(s.cfg.Channel), "dropped_lines", l.DroppedLines, "ignored_files", l.IgnoredFiles)
}

// serveNext is GET /worker/next: one waiter at a time; a queued turn not
// yet delivered is delivered at once, else the poll waits up to
// rtsandbox.SessionNextWait for Execute and answers 408 "Retry" when the
// wait ends, the worker goes away or the broker closes. A turn handed to
// a poll whose worker went away is put back, undelivered, for the next.
func (s *Session) serveNext(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.waiter != nil {
		s.mu.Unlock()
		writeText(w, http.StatusTooManyRequests, sessAlreadyWaiting)
		return
	}
	if p := s.pending; p != nil && !p.delivered {
		p.delivered = true
		s.mu.Unlock()
		writeJSON(w, p.turn)
		return
	}
	ch := make(chan *pendingTurn, 1)
	s.waiter = ch
	s.mu.Unlock()

	timer := time.NewTimer(rtsandbox.SessionNextWait)
	defer timer.Stop()
	var p *pendingTurn
	select {
	case p = <-ch:
	case <-timer.C:
	case <-r.Context().Done():
	case <-s.closed:
	}
	s.mu.Lock()
	if p == nil {
		if s.waiter == ch {
			s.waiter = nil
		} else {
			p = <-ch // delivered while the wait ended
		}
	}
	if p != nil && r.Context().Err() != nil && s.pending == p {
		p.delivered, p = false, nil
	}
	s.mu.Unlock()
	if p == nil {
		writeText(w, http.StatusRequestTimeout, sessRetry)
		return
	}
	writeJSON(w, p.turn)
}

// serveResult is POST /worker/result, its checks in the order of docs/protocol.md, "The session protocol": a
// result for no delivered, live pending turn is refused before its body
// is read; one reader at a time; the body is read (at most 72 MiB) under
// the request and the pending turn; then its match and its bounds.
func (s *Session) serveResult(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	p := s.pending
	switch {
	case p == nil || !p.delivered || p.ctx.Err() != nil:
		s.mu.Unlock()
		writeText(w, http.StatusConflict, sessNoMatchingTurn)
		return
	case s.receiving:
		s.mu.Unlock()
		writeText(w, http.StatusTooManyRequests, sessAlreadyReceiving)
		return
	}
	s.receiving = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.receiving = false
		s.mu.Unlock()
	}()

	body, h, err := s.readResult(w, r, p)
	defer h.release()
	if err != nil {
		writeText(w, http.StatusBadRequest, sessInvalidResult)
		return
	}
	status, text := s.accept(p, body)
	writeText(w, status, text)
}

// accept applies steps 4–6 of /worker/result to a body read for p and
// resolves p's Execute with a valid result. The answer is written by the
// caller, outside the lock. The body is read under a jsontree.Budget of
// its size that stops when p's turn ends.
func (s *Session) accept(p *pendingTurn, body []byte) (int, string) {
	b := jsontree.NewBudget(p.ctx, jsontree.NodesFor(len(body)))
	turnID, raw, ok := parseResultPacket(b, body)
	var result wire.SessionResult
	var err error
	if ok {
		result, err = parseResult(b, raw)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || s.pending != p || !p.delivered || p.ctx.Err() != nil || turnID != p.turn.TurnID {
		return http.StatusConflict, sessNoMatchingTurn
	}
	if err != nil {
		return http.StatusBadRequest, sessInvalidResult
	}
	s.settleLocked(p, pendingDone{result: result})
	return http.StatusOK, sessAccepted
}

// readResult reads a result body under its share of the decoding budgets,
// cut off when the pending turn ends: a worker that streams a body
// forever cannot hold the reader past its turn. The hold (nil on error)
// lasts until the result is accepted.
func (s *Session) readResult(w http.ResponseWriter, r *http.Request, p *pendingTurn) ([]byte, *hold, error) {
	h, err := s.hold(p.ctx, declared(r, rtsandbox.MaxResultBody))
	if err != nil {
		return nil, nil, err
	}
	body, err := readBody(p.ctx, w, r, rtsandbox.MaxResultBody)
	h.shrink(int64(len(body)))
	return body, h, err
}

// ParseResultPacket reads the envelope of a result packet (docs/protocol.md, "The session protocol"):
// a JSON object whose turnId is a string and whose result is an object
// with a boolean ok. It returns the turn id and the raw result, which
// wire.SessionResult then checks for its bounds (step 5–6). ok is
// false for anything else, answered 409 "No matching turn".
func ParseResultPacket(body []byte) (turnID string, result json.RawMessage, ok bool) {
	return parseResultPacket(jsontree.NewBudget(context.Background(), jsontree.NodesFor(len(body))), body)
}

// parseResultPacket is ParseResultPacket under b.
func parseResultPacket(b *jsontree.Budget, body []byte) (turnID string, result json.RawMessage, ok bool) {
	obj, isObj := decodeObject(b, body)
	if !isObj {
		return "", nil, false
	}
	if turnID, ok = jsonString(b, obj["turnId"]); !ok {
		return "", nil, false
	}
	var res [1]json.RawMessage
	if !isObject(obj["result"]) {
		return "", nil, false
	}
	if _, _, ok := b.Fields(obj["result"], resultOKField, res[:]); !ok {
		return "", nil, false
	}
	switch string(res[0]) {
	case "true", "false":
		return turnID, obj["result"], true
	}
	return "", nil, false
}

// The members of a result the broker reads; others are ignored.
var (
	resultOKField = []string{"ok"}
	resultFields  = []string{"ok", "text", "files", "error"}
	fileFields    = []string{"name", "data"}
)

// parseResult reads a result object under b (docs/protocol.md, "The session protocol"): its members
// matched exactly, as JSON.parse's reader does, and the reply files
// counted before any is decoded, so that a files array of millions of
// entries is refused at its eleventh. wire.NewSessionResult applies
// the bounds.
func parseResult(b *jsontree.Budget, raw json.RawMessage) (wire.SessionResult, error) {
	var m [4]json.RawMessage
	if _, _, ok := b.Fields(raw, resultFields, m[:]); !ok {
		return wire.SessionResult{}, wire.ErrResult
	}
	text, hasText := jsonString(b, m[1])
	errText, hasErr := jsonString(b, m[3])
	files, filesOK := replyFiles(b, m[2])
	if err := b.Err(); err != nil {
		return wire.SessionResult{}, err
	}
	return wire.NewSessionResult(string(m[0]) == "true", ptrIf(text, hasText), ptrIf(errText, hasErr), files, filesOK)
}

// replyFiles reads a result's files: an array of {name, data} objects.
// More than rtsandbox.MaxReplyFiles are refused unread (filesOK with too
// many files, which the bounds refuse).
func replyFiles(b *jsontree.Budget, raw json.RawMessage) (files []wire.ReplyFile, ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	items, n, ok := b.Array(raw, rtsandbox.MaxReplyFiles)
	if !ok {
		return nil, false
	}
	if n > rtsandbox.MaxReplyFiles {
		return make([]wire.ReplyFile, n), true
	}
	for _, item := range items {
		var f [2]json.RawMessage
		if !isObject(item) {
			return nil, false
		}
		if _, _, ok := b.Fields(item, fileFields, f[:]); !ok {
			return nil, false
		}
		name, okName := jsonString(b, f[0])
		data, okData := jsonString(b, f[1])
		if !okName && f[0] != nil && string(f[0]) != "null" || !okData && f[1] != nil && string(f[1]) != "null" {
			return nil, false // a member of another type; null reads as "" (a refused file)
		}
		files = append(files, wire.ReplyFile{Name: name, Data: data})
	}
	return files, true
}

// ptrIf is &s when ok, else nil.
func ptrIf(s string, ok bool) *string {
	if !ok {
		return nil
	}
	return &s
}
