package broker

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// The worker transport routes (session spec §2.3). They carry no
// credential and spend no budget.

// serveReady is POST /worker/ready: at most 16 KiB, parsed by
// rtsandbox.ParseWorkerReady; a bad body leaves ready unset. privateHistory
// makes privacy required for the broker's life; a capability problem then
// fails the bound turn and rejects the pending one. Then ready is set and
// the startup window re-armed (§2.7).
func (s *Session) serveReady(w http.ResponseWriter, r *http.Request) {
	body, err := readLimited(r.Body, rtsandbox.MaxReadyBody)
	if err != nil {
		writeText(w, http.StatusBadRequest, sessInvalidReady)
		return
	}
	ready, err := rtsandbox.ParseWorkerReady(body)
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
	s.ready = true
	s.mu.Unlock()
	s.rearm()
	writeText(w, http.StatusOK, sessReady)
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

// serveResult is POST /worker/result, its checks in the order of §2.3: a
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

	body, err := s.readResult(w, r, p)
	if err != nil {
		writeText(w, http.StatusBadRequest, sessInvalidResult)
		return
	}
	status, text := s.accept(p, body)
	writeText(w, status, text)
}

// accept applies steps 4–6 of /worker/result to a body read for p and
// resolves p's Execute with a valid result. The answer is written by the
// caller, outside the lock.
func (s *Session) accept(p *pendingTurn, body []byte) (int, string) {
	turnID, raw, ok := ParseResultPacket(body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || s.pending != p || !p.delivered || p.ctx.Err() != nil || turnID != p.turn.TurnID {
		return http.StatusConflict, sessNoMatchingTurn
	}
	var result rtsandbox.SessionResult
	if err := json.Unmarshal(raw, &result); err != nil {
		return http.StatusBadRequest, sessInvalidResult
	}
	s.settleLocked(p, pendingDone{result: result})
	return http.StatusOK, sessAccepted
}

// readResult reads a result body, cut off when the pending turn ends: its
// read deadline is moved to now, so a worker that streams a body forever
// cannot hold the reader past its turn.
func (s *Session) readResult(w http.ResponseWriter, r *http.Request, p *pendingTurn) ([]byte, error) {
	return readUnder(p.ctx, w, r, rtsandbox.MaxResultBody)
}

// ParseResultPacket reads the envelope of a result packet (§2.3 step 4):
// a JSON object whose turnId is a string and whose result is an object
// with a boolean ok. It returns the turn id and the raw result, which
// rtsandbox.SessionResult then checks for its bounds (step 5–6). ok is
// false for anything else, answered 409 "No matching turn".
func ParseResultPacket(body []byte) (turnID string, result json.RawMessage, ok bool) {
	obj, isObj := decodeObject(body)
	if !isObj {
		return "", nil, false
	}
	if json.Unmarshal(obj["turnId"], &turnID) != nil || len(bytes.TrimSpace(obj["turnId"])) == 0 || obj["turnId"][0] != '"' {
		return "", nil, false
	}
	res, isObj := decodeObject(obj["result"])
	if !isObj {
		return "", nil, false
	}
	switch string(bytes.TrimSpace(res["ok"])) {
	case "true", "false":
		return turnID, obj["result"], true
	}
	return "", nil, false
}
