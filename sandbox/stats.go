package sandbox

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
	Listening time.Time // broker socket listening in the run dir
	Began     time.Time // the driver was called
	Created   time.Time // the engine created the container
	Started   time.Time // the engine started it
	FirstCall time.Time // the first request reached the broker
	Exited    time.Time // the worker exited (its reply is in)
	Removed   time.Time // the container was removed
	Ended     time.Time // broker closed, run dir deleted
	Calls     int       // broker requests, refused ones included
	Err       error     // what RunTurn returns; nil on a reply
}

// record copies the driver's timestamps and the broker call record.
func (s *TurnStats) record(res container.Result, calls *callRecorder) {
	s.Began, s.Created, s.Started, s.Exited, s.Removed = res.Began, res.Created, res.Started, res.Exited, res.Removed
	s.FirstCall, s.Calls = calls.get()
}
