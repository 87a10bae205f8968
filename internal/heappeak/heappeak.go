// Package heappeak measures, for benchmarks, the most the Go heap grew
// while a function ran: the memory bound of a decode is checked by its
// peak, not by what it allocated in all.
package heappeak

import (
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Of runs fn and returns the most the heap grew above its size before fn,
// in bytes, sampled every millisecond with the collector at 5 % growth
// (so garbage does not pass for live data for long).
func Of(fn func()) float64 {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	fn()
	close(done)
	<-sampled
	// And once more now: fn may end between two samples, or before the
	// sampler ran at all, and what it left live is part of its peak.
	var end runtime.MemStats
	runtime.ReadMemStats(&end)
	return float64(max(peak.Load(), end.HeapAlloc)) - float64(base.HeapAlloc)
}
