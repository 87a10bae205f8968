package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/sealed"
	"github.com/rtsandbox/rtsandbox/session"
)

// The mode label of the turn metrics: which runtime ran the turn.
const (
	ModeSealed  = rtsandbox.ModeSealed  // a fresh container per turn (package sealed)
	ModeSession = rtsandbox.ModeSession // the channel's long-lived worker (package session)
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
	// PhaseFirstCall runs from the start (for a warm pool's worker: the
	// claim) to the worker's first broker call: the worker's own
	// start-up, or reading its turn.
	PhaseFirstCall = "first_call"
	// PhaseReply runs from the first broker call to the worker's reply
	// (its end mark, or its exit without one): the model and tool calls
	// of the agent loop.
	PhaseReply = "reply"
	// PhaseRemoval runs from the worker's exit to the container's
	// removal, when the turn waited for both; an early reply's container
	// is removed after the turn.
	PhaseRemoval = "removal"
	// PhaseTotal runs from admission to the end of the turn (broker
	// closed, run dir deleted).
	PhaseTotal = "total"
)

// phaseSpans are the timestamps each phase runs between.
var phaseSpans = []struct {
	name     string
	from, to func(*sealed.TurnStats) time.Time
}{
	{PhaseAdmission, func(s *sealed.TurnStats) time.Time { return s.Admitted }, func(s *sealed.TurnStats) time.Time { return s.Slotted }},
	{PhaseSetup, func(s *sealed.TurnStats) time.Time { return s.Slotted }, func(s *sealed.TurnStats) time.Time { return s.Began }},
	{PhaseCreate, func(s *sealed.TurnStats) time.Time { return s.Began }, func(s *sealed.TurnStats) time.Time { return s.Created }},
	{PhaseStart, func(s *sealed.TurnStats) time.Time { return s.Created }, func(s *sealed.TurnStats) time.Time { return s.Started }},
	{PhaseFirstCall, claimed, func(s *sealed.TurnStats) time.Time { return s.FirstCall }},
	{PhaseReply, func(s *sealed.TurnStats) time.Time { return s.FirstCall }, replied},
	{PhaseRemoval, func(s *sealed.TurnStats) time.Time { return s.Exited }, func(s *sealed.TurnStats) time.Time { return s.Removed }},
	{PhaseTotal, func(s *sealed.TurnStats) time.Time { return s.Admitted }, func(s *sealed.TurnStats) time.Time { return s.Ended }},
}

// replied is when the worker's reply was in: its end mark, or its exit.
func replied(s *sealed.TurnStats) time.Time {
	if !s.Replied.IsZero() {
		return s.Replied
	}
	return s.Exited
}

// claimed is when the turn's worker could start on it: its start (cold),
// or its claim (warm, started before the turn).
func claimed(s *sealed.TurnStats) time.Time {
	if s.Warm {
		return s.Began
	}
	return s.Started
}

// Phase is how long a turn spent in one phase.
type Phase struct {
	Name     string
	Duration time.Duration
}

// Phases returns the phases the turn reached both ends of, in lifecycle
// order. A turn that failed early lacks the later phases; one that never
// called the broker lacks first_call and reply; one whose container was
// still being removed when it ended lacks removal; one a warm pool's
// worker served lacks create and start (they happened before the turn).
func Phases(s sealed.TurnStats) []Phase {
	out := make([]Phase, 0, len(phaseSpans))
	for _, p := range phaseSpans {
		if s.Warm && (p.name == PhaseCreate || p.name == PhaseStart) {
			continue // the prestart's, before the turn existed
		}
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
	rtsandbox.ClassOK, rtsandbox.ClassUpstream, rtsandbox.ClassBudget, rtsandbox.ClassWorker,
	rtsandbox.ClassEngine, rtsandbox.ClassTimeout, rtsandbox.ClassStopped, rtsandbox.ClassShutdown,
	rtsandbox.ClassCancelled, rtsandbox.ClassInvalidReply, rtsandbox.ClassState, rtsandbox.ClassDiskFull,
	rtsandbox.ClassInternal,
}

// phaseBuckets span a container start (milliseconds) to the longest turn
// deadline (600 s).
var phaseBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func (r *Recorder) registerTurns() {
	r.turns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "turns_total",
		Help: "Admitted turns by outcome class and mode (sealed, session).",
	}, []string{"class", "mode"})
	r.phases = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace, Name: "turn_phase_seconds",
		Help:    "Time turns spent in each phase, by mode; a turn is counted in the phases it reached both ends of (a session turn in total only).",
		Buckets: phaseBuckets,
	}, []string{"phase", "mode"})
	for _, c := range turnClasses {
		r.turns.WithLabelValues(c, ModeSealed)
	}
	for _, c := range session.Classes() {
		r.turns.WithLabelValues(c, ModeSession)
	}
	r.reg.MustRegister(r.turns, r.phases)
	const activeHelp = "Turns admitted and not yet ended, by mode; sealed ones waiting for a host slot included."
	r.gaugeMode(&r.active, "turns_active", activeHelp, ModeSealed)
	r.gaugeMode(&r.sessionActive, "turns_active", activeHelp, ModeSession)
	r.gauge(&r.pending, "container_removals_pending",
		"Turn containers whose removal the driver still retries in the background.")
}

// Turn records one admitted sealed turn: its outcome class and its
// phases. It is the sealed.Options.OnTurn of a host with metrics on.
func (r *Recorder) Turn(s sealed.TurnStats) {
	r.turns.WithLabelValues(label(s.Class), ModeSealed).Inc()
	r.claim(s)
	for _, p := range Phases(s) {
		r.phases.WithLabelValues(p.Name, ModeSealed).Observe(p.Duration.Seconds())
	}
}

// SessionTurn records one admitted session turn: its outcome class and
// its total time (the session runtime reports no finer phases). It is the
// session.Options.OnTurn of a host with metrics on.
func (r *Recorder) SessionTurn(s session.TurnStats) {
	r.turns.WithLabelValues(label(s.Class), ModeSession).Inc()
	if !s.Admitted.IsZero() && !s.Ended.Before(s.Admitted) {
		r.phases.WithLabelValues(PhaseTotal, ModeSession).Observe(s.Ended.Sub(s.Admitted).Seconds())
	}
}

// ActiveTurns binds rtsandbox_turns_active{mode="sealed"}, typically to
// the length of (*sealed.Runtime).Busy.
func (r *Recorder) ActiveTurns(f func() int) { r.active.bind(f) }

// ActiveSessionTurns binds rtsandbox_turns_active{mode="session"},
// typically to (*session.Runtime).Active.
func (r *Recorder) ActiveSessionTurns(f func() int) { r.sessionActive.bind(f) }

// PendingRemovals binds rtsandbox_container_removals_pending, typically to
// (*docker.Driver).Pending.
func (r *Recorder) PendingRemovals(f func() int) { r.pending.bind(f) }
