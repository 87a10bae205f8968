package host

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

type fakePinger struct {
	down  atomic.Bool
	calls atomic.Int32
}

func (p *fakePinger) Ping(context.Context) (string, error) {
	p.calls.Add(1)
	if p.down.Load() {
		return "", errors.New("engine unreachable")
	}
	return "1.41", nil
}

// TestEngineReadyFollowsTheEngine: readiness fails while the engine does
// not answer and recovers when it does, without a restart; probes within a
// second share one ping.
func TestEngineReadyFollowsTheEngine(t *testing.T) {
	p := &fakePinger{}
	ready := engineReady(p)
	ctx := context.Background()
	if err := ready(ctx); err != nil {
		t.Fatalf("ready with the engine up = %v", err)
	}
	for range 5 {
		_ = ready(ctx)
	}
	if n := p.calls.Load(); n != 1 {
		t.Errorf("pings for 6 probes within a second = %d; want 1", n)
	}
	p.down.Store(true)
	time.Sleep(1100 * time.Millisecond)
	if err := ready(ctx); err == nil {
		t.Error("ready with the engine down = nil; want an error")
	}
	p.down.Store(false)
	time.Sleep(1100 * time.Millisecond)
	if err := ready(ctx); err != nil {
		t.Errorf("ready after the engine came back = %v", err)
	}
}
