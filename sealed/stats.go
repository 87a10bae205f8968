package sealed

import (
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/container"
)

// TurnStats are the phase timestamps of one admitted turn, for benchmarks
// and the operator. A zero time means the turn did not reach the phase.
type TurnStats struct {
	Channel   rtsandbox.ChannelKey
	Admitted  time.Time // input checked, channel marked active
	Slotted   time.Time // the turn got a host slot; its deadline starts
	Listening time.Time // broker socket listening in the run dir
	Began     time.Time // the driver was called
	Created   time.Time // the engine created the container
	Started   time.Time // the engine started it
	FirstCall time.Time // the first request reached the broker
	Replied   time.Time // the reply ended with its end mark (the early reply)
	Exited    time.Time // the worker exited (zero after an early reply)
	Removed   time.Time // the container was removed (zero when that came after the turn)
	// Settled is the driver's container.Result.Settled (after an early
	// reply or with a removal pending, closed once the engine confirmed
	// the container gone; nil otherwise), joined with those of warm
	// workers the turn tried before.
	Settled <-chan struct{}
	Ended   time.Time // broker closed, run dir deleted
	Calls   int       // broker requests, refused ones included
	Err     error     // what RunTurn returns; nil on a reply
	// StateErr is why the state of a turn that replied was not saved (the
	// store failed: locked, full, damaged); the answer was delivered all
	// the same, and the turn's memory changes and history were dropped.
	StateErr error
	// Class is the outcome class (rtsandbox.ClassOK, rtsandbox.ClassTimeout, …), derived
	// from Err and WorkerClass.
	Class string
	// WorkerClass and WorkerDetail are the worker's own failure class and
	// fixed detail (container.ParseWorkerFailure: a known word and a
	// bounded detail of safe characters); empty when it wrote none.
	WorkerClass, WorkerDetail string
	// Container is the turn container's exact name; CleanupPending
	// reports that it was not yet removed when the turn ended (the driver
	// goes on removing it in the background).
	Container      string
	CleanupPending bool
	// Warm reports that a warm pool's worker served the turn: Created
	// and Started are then its prestart's, before the turn existed, and
	// Began is its claim.
	Warm bool
}

// record copies the driver's timestamps, cleanup state and the worker's
// failure class, and the broker call record. The stderr tail itself is
// never kept: only its parsed failure line is.
func (s *TurnStats) record(res container.Result, calls *callRecorder) {
	s.Began, s.Created, s.Started, s.Replied, s.Exited, s.Removed = res.Began, res.Created, res.Started, res.Replied, res.Exited, res.Removed
	s.CleanupPending, s.Settled = res.CleanupPending, res.Settled
	if f, ok := container.ParseWorkerFailure(res.StderrTail); ok {
		s.WorkerClass, s.WorkerDetail = f.Class, f.Detail
	}
	s.FirstCall, s.Calls = calls.get()
}
