package broker

import (
	"context"

	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/wire"
)

// SessionWaiting reports whether a long poll waits on s (tests only).
func SessionWaiting(s *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiter != nil
}

// SessionInFlight returns the calls in flight of the bound turn (tests
// only).
func SessionInFlight(s *Session) int {
	s.mu.Lock()
	sc := s.bound
	s.mu.Unlock()
	if sc == nil {
		return 0
	}
	sc.turn.mu.Lock()
	defer sc.turn.mu.Unlock()
	return sc.turn.inFlight
}

// SessionPending reports whether a turn is pending (tests only).
func SessionPending(s *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending != nil
}

// IntakeWaiting returns the calls waiting for in's share (tests only).
func IntakeWaiting(in *Intake) int { return int(in.p.waiting.Load()) }

// SessionIntakeWaiting returns the calls waiting for s's own share of
// the decoding budget (tests only); 0 without an Intake.
func SessionIntakeWaiting(s *Session) int {
	if s.intake == nil {
		return 0
	}
	return int(s.intake.waiting.Load())
}

// IntakeHeld returns the bytes in's holds have (tests only).
func IntakeHeld(in *Intake) int64 { return in.p.held.Load() }

// ParseResult reads a result object as POST /worker/result does (tests
// only).
func ParseResult(raw []byte) (wire.SessionResult, error) {
	return parseResult(jsontree.NewBudget(context.Background(), jsontree.NodesFor(len(raw))), raw)
}

// ParseCompactRequest reads a compact request as POST
// /compaction/compact does (tests only).
func ParseCompactRequest(body []byte) (wire.CompactRequest, error) {
	return parseCompactRequest(jsontree.NewBudget(context.Background(), jsontree.NodesFor(len(body))), body)
}

// MaxLoadReports is maxLoadReports (tests only).
const MaxLoadReports = maxLoadReports
