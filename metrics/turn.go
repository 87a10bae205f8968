package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtsandbox/rtsandbox/sandbox"
)

// Phases of a sealed turn, in lifecycle order: the phase label of
// rtsandbox_turn_phase_seconds and the names Phases returns.
const (
	// PhaseAdmission runs from admission to the host slot: the wait in the
	// admission queue (sandbox.max_turns).
	PhaseAdmission = "admission"
	// PhaseSetup runs from the slot to the driver call: the state load,
	// the run dir and the broker socket.
	PhaseSetup = "setup"
	// PhaseCreate is the engine creating the container.
	PhaseCreate = "create"
	// PhaseStart is the engine starting it.
	PhaseStart = "start"
	// PhaseFirstCall runs from the start to the worker's first broker
	// call: the worker's own start-up.
	PhaseFirstCall = "first_call"
	// PhaseReply runs from the first broker call to the worker's exit: the
	// model and tool calls of the agent loop.
	PhaseReply = "reply"
	// PhaseRemoval runs from the worker's exit to the container's removal.
	PhaseRemoval = "removal"
	// PhaseTotal runs from admission to the end of the turn (broker
	// closed, run dir deleted).
	PhaseTotal = "total"
)

// phaseSpans are the timestamps each phase runs between.
var phaseSpans = []struct {
	name     string
	from, to func(*sandbox.TurnStats) time.Time
}{
	{PhaseAdmission, func(s *sandbox.TurnStats) time.Time { return s.Admitted }, func(s *sandbox.TurnStats) time.Time { return s.Slotted }},
	{PhaseSetup, func(s *sandbox.TurnStats) time.Time { return s.Slotted }, func(s *sandbox.TurnStats) time.Time { return s.Began }},
	{PhaseCreate, func(s *sandbox.TurnStats) time.Time { return s.Began }, func(s *sandbox.TurnStats) time.Time { return s.Created }},
	{PhaseStart, func(s *sandbox.TurnStats) time.Time { return s.Created }, func(s *sandbox.TurnStats) time.Time { return s.Started }},
	{PhaseFirstCall, func(s *sandbox.TurnStats) time.Time { return s.Started }, func(s *sandbox.TurnStats) time.Time { return s.FirstCall }},
	{PhaseReply, func(s *sandbox.TurnStats) time.Time { return s.FirstCall }, func(s *sandbox.TurnStats) time.Time { return s.Exited }},
	{PhaseRemoval, func(s *sandbox.TurnStats) time.Time { return s.Exited }, func(s *sandbox.TurnStats) time.Time { return s.Removed }},
	{PhaseTotal, func(s *sandbox.TurnStats) time.Time { return s.Admitted }, func(s *sandbox.TurnStats) time.Time { return s.Ended }},
}

// Phase is how long a turn spent in one phase.
type Phase struct {
	Name     string
	Duration time.Duration
}

// Phases returns the phases the turn reached both ends of, in lifecycle
// order. A turn that failed early lacks the later phases; one that never
// called the broker lacks first_call and reply; one whose container was
// still being removed when it ended lacks removal.
func Phases(s sandbox.TurnStats) []Phase {
	out := make([]Phase, 0, len(phaseSpans))
	for _, p := range phaseSpans {
		from, to := p.from(&s), p.to(&s)
		if from.IsZero() || to.IsZero() || to.Before(from) {
			continue
		}
		out = append(out, Phase{Name: p.name, Duration: to.Sub(from)})
	}
	return out
}

// turnClasses are the outcome classes whose counters start at zero.
var turnClasses = []string{
	sandbox.ClassOK, sandbox.ClassUpstream, sandbox.ClassBudget, sandbox.ClassWorker,
	sandbox.ClassEngine, sandbox.ClassTimeout, sandbox.ClassStopped, sandbox.ClassShutdown,
	sandbox.ClassCancelled, sandbox.ClassInvalidReply, sandbox.ClassState, sandbox.ClassDiskFull,
	sandbox.ClassInternal,
}

// phaseBuckets span a container start (milliseconds) to the longest turn
// deadline (600 s).
var phaseBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func (r *Recorder) registerTurns() {
	r.turns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "turns_total",
		Help: "Admitted sealed turns by outcome class.",
	}, []string{"class"})
	r.phases = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "turn_phase_seconds",
		Help:    "Time sealed turns spent in each phase; a turn is counted in the phases it reached both ends of.",
		Buckets: phaseBuckets,
	}, []string{"phase"})
	for _, c := range turnClasses {
		r.turns.WithLabelValues(c)
	}
	r.reg.MustRegister(r.turns, r.phases)
	r.gauge(&r.active, "turns_active",
		"Sealed turns admitted and not yet ended, those waiting for a host slot included.")
	r.gauge(&r.pending, "container_removals_pending",
		"Turn containers whose removal the driver still retries in the background.")
}

// Turn records one admitted turn: its outcome class and its phases. It is
// the sandbox.Options.OnTurn of a host with metrics on.
func (r *Recorder) Turn(s sandbox.TurnStats) {
	r.turns.WithLabelValues(label(s.Class)).Inc()
	for _, p := range Phases(s) {
		r.phases.WithLabelValues(p.Name).Observe(p.Duration.Seconds())
	}
}

// ActiveTurns binds rtsandbox_turns_active, typically to the length of
// (*sandbox.Runtime).Busy.
func (r *Recorder) ActiveTurns(f func() int) { r.active.bind(f) }

// PendingRemovals binds rtsandbox_container_removals_pending, typically to
// (*docker.Driver).Pending.
func (r *Recorder) PendingRemovals(f func() int) { r.pending.bind(f) }
