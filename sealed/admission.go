package sealed

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/rtsandbox/rtsandbox"
)

// Admission control: the host runs at most MaxTurns sealed turns at once.
// A turn that finds every slot taken waits in one FIFO queue (the router
// sends at most one turn per channel, so the queue holds at most one turn
// of each channel: first come, first served is fair across channels). Its
// deadline starts when it gets a slot, so a burst no longer times out as a
// whole; the wait itself is bounded by MaxQueueWait and ends in ErrHostBusy,
// which the router answers with a fixed "busy" text.

// Admission defaults and bounds.
const (
	// DefaultMaxQueueWait bounds how long a turn waits for a slot.
	DefaultMaxQueueWait = 2 * time.Minute
	// maxTurnsPerCPU bounds running turns by CPU: a turn is mostly idle
	// (it waits on the model), but every one costs the engine a container
	// start and removal.
	maxTurnsPerCPU = 4
	// hostMemoryShare is the part of host memory that turn containers may
	// claim together at their memory limits by default.
	hostMemoryShare = 0.75
)

// ErrHostBusy fails a turn that found no slot within MaxQueueWait. Nothing
// was created for it.
var ErrHostBusy = fmt.Errorf("%w: every sandbox turn slot stayed taken", rtsandbox.ErrBusy)

// DefaultMaxTurns derives the host-wide bound on running turns from the
// machine: at most 4 per CPU, and no more than fit in three quarters of
// host memory at memoryMB each, so turn memory limits never oversubscribe
// the host. At least 1.
func DefaultMaxTurns(memoryMB int) int {
	n := maxTurnsPerCPU * runtime.NumCPU()
	if total := hostMemory(); total > 0 && memoryMB > 0 {
		n = min(n, int(float64(total)*hostMemoryShare)/(memoryMB<<20))
	}
	return max(n, 1)
}

// hostMemory is the machine's total RAM in bytes, or 0 when unknown.
func hostMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// slots is the FIFO semaphore of running turns.
type slots struct {
	sem     *semaphore.Weighted
	wait    time.Duration
	waiting atomic.Int32 // turns queued for a slot (tests wait on it for a known arrival order)
}

func newSlots(n int, wait time.Duration) *slots {
	return &slots{sem: semaphore.NewWeighted(int64(n)), wait: wait}
}

// acquire waits for a slot until ctx ends (Stop, Close, the caller) or
// the queue wait passes (ErrHostBusy). The returned release must be called
// once.
func (s *slots) acquire(ctx context.Context) (release func(), err error) {
	wctx, cancel := context.WithTimeoutCause(ctx, s.wait, ErrHostBusy)
	defer cancel()
	release = func() { s.sem.Release(1) }
	if wctx.Err() == nil && s.sem.TryAcquire(1) { // an ended turn never takes a slot, as Acquire refuses it
		return release, nil
	}
	s.waiting.Add(1)
	err = s.sem.Acquire(wctx, 1)
	s.waiting.Add(-1)
	if err != nil {
		if cause := context.Cause(wctx); errors.Is(cause, ErrHostBusy) {
			return nil, cause
		}
		return nil, fmt.Errorf("%w: %w", ErrAdmissionAborted, context.Cause(ctx))
	}
	return release, nil
}

// ErrAdmissionAborted fails a turn that was stopped, disposed or cancelled
// by its caller while it waited for a slot; it wraps the cause.
var ErrAdmissionAborted = errors.New("sandbox turn ended while it waited for a slot")
