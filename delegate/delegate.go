// Package delegate runs scoped background jobs for guests: a member starts a job in a channel, the
// job runs on the host under a deadline, and its outcome is delivered back
// to that channel once.
//
// The contract:
//
//   - Start is synchronous. Its checks run in the spec's order (scope,
//     required title and task, title length, task length, per-channel
//     running limit) and refusals are *DelegationError with fixed texts that
//     contain only numbers, so they may be shown to a guest.
//   - Only a member (access.Member, not Owner) with a principal id, in the
//     configured target and without an origin, may start a job.
//   - Job ids are sequential from 1 per Delegator; refused starts use none.
//   - The job's run sees the task, the channel and the author's id and name,
//     never the principal id or tier. A deadline (Options.Timeout from
//     Start) or Dispose makes the job fail with "the worker ran out of
//     time"; other failures are scrubbed (ScrubDiagnostic).
//   - Deliver is called exactly once per job, with a context that is not
//     the job's (so a cancelled job still reports); its error is logged,
//     never returned. The job counts as running until Deliver returns.
//   - Jobs live only in memory.
package delegate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/access"
)

// Defaults and ranges.
const (
	DefaultMaxRunning      = 2
	MaxMaxRunning          = 10
	DefaultTimeout         = 10 * time.Minute
	MinTimeout             = time.Second
	MaxTimeout             = 20 * time.Minute
	DefaultMaxTitleChars   = 200
	DefaultMaxReportChars  = 80000
	DefaultDiagnosticChars = 600
	// MaxTaskChars is fixed (not configurable).
	MaxTaskChars = 4000
	// NoLimit as a character limit means unlimited (the reference's
	// Infinity).
	NoLimit = -1
	// DeliverTimeout bounds one Deliver call.
	DeliverTimeout = 60 * time.Second
)

// Outcome texts.
const (
	TimedOutText       = "the worker ran out of time"
	TaskFailedText     = "the task failed"
	ReportTooLargeText = "Research report too large"
)

// Constructor errors. They wrap rtsandbox.ErrInvalid.
var (
	ErrBudget          = fmt.Errorf("%w: Invalid delegation target/budget", rtsandbox.ErrInvalid)
	ErrTitleLimit      = fmt.Errorf("%w: Invalid delegation title limit", rtsandbox.ErrInvalid)
	ErrReportLimit     = fmt.Errorf("%w: Invalid delegation maxReportChars", rtsandbox.ErrInvalid)
	ErrDiagnosticLimit = fmt.Errorf("%w: Invalid delegation diagnosticChars", rtsandbox.ErrInvalid)
	ErrMissing         = fmt.Errorf("%w: delegation needs Run and Deliver", rtsandbox.ErrInvalid)
)

// DelegationError is a refused Start. Its text is fixed (numbers only) and
// may be shown to the guest. It unwraps to rtsandbox.ErrRefused.
type DelegationError struct{ Text string }

func (e *DelegationError) Error() string { return e.Text }

// Unwrap returns rtsandbox.ErrRefused.
func (e *DelegationError) Unwrap() error { return rtsandbox.ErrRefused }

// ErrScope is the scope refusal: closed delegator, wrong target, an origin,
// a tier other than member, or no principal id.
var ErrScope = &DelegationError{"Delegation scope refused"}

// Author is who asks for a job, as the host resolved them.
type Author struct {
	PrincipalID string
	ID          string
	Name        string
	Tier        access.Tier
}

// Request asks for one job.
type Request struct {
	Channel rtsandbox.ChannelKey
	Target  string
	// Origin is set for owner/origin threads, which may not delegate.
	Origin string
	Author Author
	Title  string
	Task   string
}

// Job is a started job. Title and Task are trimmed.
type Job struct {
	ID        int
	Channel   rtsandbox.ChannelKey
	Target    string
	Author    Author // Tier is always access.Member
	Title     string
	Task      string
	StartedAt time.Time
}

// RunAuthor is what the worker learns about the author: no principal id,
// no tier.
type RunAuthor struct {
	ID   string
	Name string
}

// RunContext is the job's binding as the worker sees it.
type RunContext struct {
	Channel rtsandbox.ChannelKey
	Author  RunAuthor
}

// Outcome is a finished job: Report when OK, else the scrubbed Error.
type Outcome struct {
	OK     bool
	Report string
	Error  string
}

// Options configure a Delegator. Character limits count UTF-16 units (the
// reference's string length); 0 means the default and NoLimit unlimited.
type Options struct {
	// Target is the one delegation target this delegator serves. Required.
	Target string
	// MaxRunning is the running-job limit per channel: 1…10, default 2.
	MaxRunning int
	// Timeout is each job's deadline from Start: 1 s…20 min, default
	// 10 min.
	Timeout time.Duration
	// MaxTitleChars (default 200), MaxReportChars (default 80,000) and
	// DiagnosticChars (default 600): ≥ 1 or NoLimit.
	MaxTitleChars   int
	MaxReportChars  int
	DiagnosticChars int
	// Run does the work; ctx ends at the deadline or on Dispose.
	Run func(ctx context.Context, task string, rc RunContext) (string, error)
	// Deliver reports the outcome; it is called once per job.
	Deliver func(ctx context.Context, job Job, out Outcome) error
	// Logger receives operator records; nil discards them.
	Logger *slog.Logger
	// Now is the clock for StartedAt; nil means time.Now.
	Now func() time.Time
}

// Delegator starts and tracks jobs. It is safe for concurrent use.
type Delegator struct {
	o   Options
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	closed  bool
	nextID  int
	running map[int]*entry // by id
}

type entry struct {
	job    Job
	cancel context.CancelFunc
	done   chan struct{}
}

// New checks opts and returns a Delegator.
func New(opts Options) (*Delegator, error) {
	if opts.MaxRunning == 0 {
		opts.MaxRunning = DefaultMaxRunning
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Target == "" || opts.MaxRunning < 1 || opts.MaxRunning > MaxMaxRunning ||
		opts.Timeout < MinTimeout || opts.Timeout > MaxTimeout {
		return nil, ErrBudget
	}
	lim := func(v *int, def int) bool {
		if *v == 0 {
			*v = def
		}
		return *v >= 1 || *v == NoLimit
	}
	if !lim(&opts.MaxTitleChars, DefaultMaxTitleChars) {
		return nil, ErrTitleLimit
	}
	if !lim(&opts.MaxReportChars, DefaultMaxReportChars) {
		return nil, ErrReportLimit
	}
	if !lim(&opts.DiagnosticChars, DefaultDiagnosticChars) {
		return nil, ErrDiagnosticLimit
	}
	if opts.Run == nil || opts.Deliver == nil {
		return nil, ErrMissing
	}
	d := &Delegator{o: opts, log: opts.Logger, now: opts.Now, running: map[int]*entry{}}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.now == nil {
		d.now = time.Now
	}
	return d, nil
}

func over(n, limit int) bool { return limit != NoLimit && n > limit }

// Start checks req and starts its job in the background.
func (d *Delegator) Start(req Request) (Job, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := req.Author
	if d.closed || req.Target != d.o.Target || req.Origin != "" || a.Tier != access.Member || a.PrincipalID == "" {
		return Job{}, ErrScope
	}
	title, task := strings.TrimSpace(req.Title), strings.TrimSpace(req.Task)
	if title == "" || task == "" {
		return Job{}, &DelegationError{"title and task are required"}
	}
	if n := rtsandbox.UTF16Len(req.Title); over(n, d.o.MaxTitleChars) {
		return Job{}, &DelegationError{"the title is " + strconv.Itoa(n) + " characters; keep it within " + strconv.Itoa(d.o.MaxTitleChars)}
	}
	if n := rtsandbox.UTF16Len(task); n > MaxTaskChars {
		return Job{}, &DelegationError{"the task is " + strconv.Itoa(n) + " characters; keep it within " + strconv.Itoa(MaxTaskChars)}
	}
	busy := 0
	for _, e := range d.running {
		if e.job.Channel == req.Channel {
			busy++
		}
	}
	if busy >= d.o.MaxRunning {
		return Job{}, &DelegationError{"this channel already has " + strconv.Itoa(busy) + " delegated tasks running; wait for one to report back"}
	}
	d.nextID++
	job := Job{
		ID:        d.nextID,
		Channel:   req.Channel,
		Target:    d.o.Target,
		Author:    Author{PrincipalID: a.PrincipalID, ID: a.ID, Name: a.Name, Tier: access.Member},
		Title:     title,
		Task:      task,
		StartedAt: d.now(),
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.o.Timeout)
	e := &entry{job: job, cancel: cancel, done: make(chan struct{})}
	d.running[job.ID] = e
	go d.runJob(ctx, e)
	return job, nil
}

// runJob runs one job to its single delivery.
func (d *Delegator) runJob(ctx context.Context, e *entry) {
	defer func() {
		d.mu.Lock()
		delete(d.running, e.job.ID)
		d.mu.Unlock()
		close(e.done)
	}()
	out := d.work(ctx, e.job)
	e.cancel()
	dctx, cancel := context.WithTimeout(context.Background(), DeliverTimeout)
	defer cancel()
	if err := d.deliver(dctx, e.job, out); err != nil {
		d.log.Error("Sandbox task report failed", "channel", e.job.Channel, "job", e.job.ID, "err", err)
	}
}

func (d *Delegator) deliver(ctx context.Context, job Job, out Outcome) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("deliver panicked: %v", r)
		}
	}()
	return d.o.Deliver(ctx, job, out)
}

// work runs the job and classifies the result.
func (d *Delegator) work(ctx context.Context, job Job) Outcome {
	report, err := d.call(ctx, job)
	switch {
	case ctx.Err() != nil:
		return Outcome{Error: TimedOutText}
	case err != nil:
		msg := ScrubDiagnostic(err.Error(), d.o.DiagnosticChars)
		if msg == "" {
			msg = TaskFailedText
		}
		return Outcome{Error: msg}
	case over(rtsandbox.UTF16Len(report), d.o.MaxReportChars):
		return Outcome{Error: ReportTooLargeText}
	}
	return Outcome{OK: true, Report: report}
}

func (d *Delegator) call(ctx context.Context, job Job) (report string, err error) {
	defer func() {
		if r := recover(); r != nil {
			d.log.Error("Sandbox task panicked", "channel", job.Channel, "job", job.ID, "panic", fmt.Sprint(r))
			report, err = "", errors.New(TaskFailedText)
		}
	}()
	return d.o.Run(ctx, job.Task, RunContext{Channel: job.Channel, Author: RunAuthor{ID: job.Author.ID, Name: job.Author.Name}})
}

// RunningChannels lists one channel per running job (duplicates included),
// in job order.
func (d *Delegator) RunningChannels() []rtsandbox.ChannelKey {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]int, 0, len(d.running))
	for id := range d.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]rtsandbox.ChannelKey, 0, len(ids))
	for _, id := range ids {
		out = append(out, d.running[id].job.Channel)
	}
	return out
}

// Idle waits until every job running at the call has delivered, or ctx
// ends.
func (d *Delegator) Idle(ctx context.Context) error {
	d.mu.Lock()
	var done []chan struct{}
	for _, e := range d.running {
		done = append(done, e.done)
	}
	d.mu.Unlock()
	for _, c := range done {
		select {
		case <-c:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// Dispose closes the delegator (Start refuses with ErrScope from now on),
// cancels every job and waits, within ctx, until each has delivered its
// "ran out of time" outcome. Call it before the delivery path (the router)
// closes. It is safe to call more than once.
func (d *Delegator) Dispose(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	for _, e := range d.running {
		e.cancel()
	}
	d.mu.Unlock()
	return d.Idle(ctx)
}
