package sealed

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox/container"
	"github.com/rtsandbox/rtsandbox/internal/wait"
)

// The warm pool (docs/sealed-turn.md, "The warm pool"): up to size sealed
// workers created and started before their turn, each waiting on its
// stdin in its own empty run dir. A turn claims one (take), makes its
// broker socket in that dir and hands the worker its turn; the container
// serves that one turn and is removed exactly as a cold one. Nothing of a
// channel exists in a pooled container or its dir before the claim: its
// name is neutral (container.PoolName) and its dir is empty.
//
// The bound: idle + starting + discarding ≤ size, and every claimed
// container holds one of the MaxTurns slots, so the host never has more
// than size + MaxTurns turn containers (a removal the engine finishes in
// the background aside, as for cold turns).

// Pool sizing (DefaultPoolSize).
const (
	// poolPerTurns: one warm worker per this many turn slots. A burst
	// of turns beyond the pool starts cold as before; the pool is for
	// the common case of a few turns at once, and every idle worker
	// pins a process and the engine's bookkeeping.
	poolPerTurns = 4
	// maxDefaultPool caps the derived size.
	maxDefaultPool = 4
	// refillBackoff bounds the wait after a failed prestart (engine
	// down, image missing), doubling from minRefillBackoff.
	minRefillBackoff = 500 * time.Millisecond
	maxRefillBackoff = 30 * time.Second
	// claimAttempts bounds the warm workers one turn tries before it
	// starts cold.
	claimAttempts = 2
)

// DefaultPoolSize derives sandbox.pool.size from the turn bound and
// memory: a quarter of maxTurns rounded up, at most 4, and no more than
// the idle workers that fit, at memoryMB each, in the quarter of host
// memory DefaultMaxTurns leaves to the rest of the host (so pool +
// turns at their memory limits stay within the machine). At least 1.
func DefaultPoolSize(maxTurns, memoryMB int) int {
	n := min((maxTurns+poolPerTurns-1)/poolPerTurns, maxDefaultPool)
	if total := hostMemory(); total > 0 && memoryMB > 0 {
		n = min(n, int(float64(total)*(1-hostMemoryShare))/(memoryMB<<20))
	}
	return max(n, 1)
}

// PoolStats is the pool's state for metrics and doctor.
type PoolStats struct {
	Size int // the configured size; 0 when the pool is off
	Idle int // warm workers waiting for a claim
}

// pool keeps the warm workers of one Runtime.
type pool struct {
	s        *settings
	eng      container.Prestarter
	size     int
	onRefill func(time.Duration)

	ctx    context.Context // ends at close: the refill loop and prestarts
	cancel context.CancelFunc
	wake   chan struct{}  // a slot was claimed or lost: refill
	loops  sync.WaitGroup // the refill loop and the watches
	// discards are the removals claims started; close waits for them.
	discards sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	idle    []*warmSlot
	pending int // prestarts and discards in flight: containers that count
}

// warmSlot is one idle warm worker and its empty run dir.
type warmSlot struct {
	w     container.Warm
	dir   string
	taken chan struct{} // closed when claimed, lost or discarded: its watch ends
	once  sync.Once
}

func (ws *warmSlot) release() { ws.once.Do(func() { close(ws.taken) }) }

func newPool(s *settings, eng container.Prestarter) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	return &pool{s: s, eng: eng, size: s.PoolSize, onRefill: s.OnPoolRefill,
		ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1)}
}

// start runs the refill loop; it fills the pool at once.
func (p *pool) start() {
	p.loops.Add(1)
	go p.refill()
	p.poke()
}

func (p *pool) poke() {
	if p == nil {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// stats reports the size and the idle count.
func (p *pool) stats() PoolStats {
	if p == nil {
		return PoolStats{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Size: p.size, Idle: len(p.idle)}
}

// refill prestarts one worker at a time while the pool is short: the
// engine's start rate, never a burst of creates that would slow the
// running turns' own. A failed prestart backs off.
func (p *pool) refill() {
	defer p.loops.Done()
	backoff := minRefillBackoff
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		for p.reserve() {
			began := time.Now()
			ws, err := p.prestart()
			if err != nil {
				p.unreserve()
				if p.ctx.Err() != nil {
					return
				}
				p.s.Logger.Warn("sandbox pool: a warm worker did not start; retrying", "err", err, "in", backoff)
				if !wait.Sleep(p.ctx, backoff) {
					return
				}
				backoff = min(2*backoff, maxRefillBackoff)
				continue
			}
			backoff = minRefillBackoff
			if p.onRefill != nil {
				p.onRefill(time.Since(began))
			}
			p.add(ws)
		}
	}
}

// reserve counts one more container when the pool is short.
func (p *pool) reserve() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle)+p.pending >= p.size {
		return false
	}
	p.pending++
	return true
}

func (p *pool) unreserve() {
	p.mu.Lock()
	p.pending--
	p.mu.Unlock()
}

// prestart makes an empty run dir and starts a worker on it under the
// turn profile, with a neutral name.
func (p *pool) prestart() (*warmSlot, error) {
	dir, err := makeRunDir(p.s.RunRoot, p.s.owner())
	if err != nil {
		return nil, err
	}
	w, err := p.eng.Prestart(p.ctx, p.s.spec(container.PoolName(), dir))
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return &warmSlot{w: w, dir: dir, taken: make(chan struct{})}, nil
}

// add makes ws idle and watches it; a pool closed meanwhile discards it.
func (p *pool) add(ws *warmSlot) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.discard(ws) // pending still counts it
		return
	}
	p.idle = append(p.idle, ws)
	p.pending--
	p.loops.Add(1)
	p.mu.Unlock()
	go p.watch(ws)
}

// watch replaces ws when the engine reports it dead while it waits.
func (p *pool) watch(ws *warmSlot) {
	defer p.loops.Done()
	select {
	case <-ws.taken:
		return
	case <-ws.w.Exited():
	}
	if p.remove(ws) {
		p.s.Logger.Warn("sandbox pool: a warm worker ended while it waited; replacing it", "container", ws.w.Name())
		p.discard(ws)
	}
}

// remove takes ws out of the idle list; false when a claim got it first.
// A removed slot counts as pending until discard ends.
func (p *pool) remove(ws *warmSlot) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.idle {
		if x == ws {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			p.pending++
			ws.release()
			return true
		}
	}
	return false
}

// discard removes a slot counted as pending, then frees its place.
func (p *pool) discard(ws *warmSlot) {
	ws.release()
	if err := discard(ws.w); err != nil {
		p.s.Logger.Warn("sandbox pool: a warm worker was not removed; the reaper will", "container", ws.w.Name(), "err", err)
	}
	if err := os.RemoveAll(ws.dir); err != nil {
		p.s.Logger.Warn("sandbox pool: a warm worker's run dir was not removed", "err", err)
	}
	p.unreserve()
	p.poke()
}

// discardTimeout bounds one discard: the engine's kill and removal; a
// removal past it continues in the driver's background remover.
const discardTimeout = 15 * time.Second

// discard removes a warm worker no turn will run, within discardTimeout.
func discard(w container.Warm) error {
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	return w.Discard(ctx)
}

// take claims an idle worker for a turn, or returns nil: the turn starts
// cold (the pool is off, empty or closed, or the engine cannot name the
// image). A worker the engine reported dead is skipped; one whose image
// the tag no longer names drains the pool (an image rebuild: no worker of
// the old image serves a turn).
func (p *pool) take(ctx context.Context) *warmSlot {
	if p == nil {
		return nil
	}
	image, err := p.eng.ImageID(ctx, p.s.Image)
	if err != nil {
		return nil // the cold start reports what is wrong
	}
	for {
		ws, stale := p.pop(image)
		for _, s := range stale {
			p.discards.Go(func() { p.discard(s) })
		}
		if ws == nil {
			return nil
		}
		select {
		case <-ws.w.Exited():
			p.discards.Go(func() { p.discard(ws) }) // pop counted it as pending
			continue
		default:
		}
		// Claimed: the turn's slot counts it now. The refill waits for
		// the turn's run to end (turn.attempt pokes the pool).
		p.unreserve()
		return ws
	}
}

// pop takes the oldest idle worker, or none, and moves every idle worker
// of another image than image out (stale, counted as pending until
// discarded). The taken one is counted as pending too.
func (p *pool) pop(image string) (ws *warmSlot, stale []*warmSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil
	}
	keep := p.idle[:0]
	for _, x := range p.idle {
		if x.w.Image() != image {
			stale = append(stale, x)
			x.release()
			p.pending++
			continue
		}
		keep = append(keep, x)
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	if len(p.idle) == 0 {
		return nil, stale
	}
	ws, p.idle = p.idle[0], p.idle[1:]
	ws.release()
	p.pending++
	return ws, stale
}

// close stops the refill, discards every idle worker (at once, in
// parallel) and waits for prestarts, watches and discards to end.
func (p *pool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.loops.Wait()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.pending += len(idle)
	p.mu.Unlock()
	p.cancel()
	var wg sync.WaitGroup
	for _, ws := range idle {
		wg.Go(func() { p.discard(ws) })
	}
	wg.Wait()
	p.loops.Wait()
	p.discards.Wait()
}
