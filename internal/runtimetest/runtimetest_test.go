package runtimetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rtsandbox/rtsandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memRuntime is the smallest runtime that keeps the contract: turns in
// memory, one "container" per channel that has run.
type memRuntime struct {
	timeout time.Duration
	mu      sync.Mutex
	turns   map[rtsandbox.ChannelKey]int // the conversation's turns so far
	alive   map[rtsandbox.ChannelKey]bool
	cancel  map[rtsandbox.ChannelKey]context.CancelCauseFunc
	saw     bool // the latest turn continued a conversation
}

func (m *memRuntime) Run(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, _ func(int, string)) (rtsandbox.Answer, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, m.timeout, rtsandbox.ErrTurnTimeout)
	defer stop()
	m.mu.Lock()
	m.cancel[b.Channel], m.alive[b.Channel] = cancel, true
	m.mu.Unlock()
	defer func() { m.mu.Lock(); delete(m.cancel, b.Channel); m.mu.Unlock() }()
	switch in.Text {
	case "hang":
		<-ctx.Done()
		return rtsandbox.Answer{}, fmt.Errorf("mem turn: %w", context.Cause(ctx))
	case "fail":
		return rtsandbox.Answer{Reply: rtsandbox.Reply{OK: false, Text: "failed"}}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saw = m.turns[b.Channel] > 0
	m.turns[b.Channel]++
	return rtsandbox.Answer{Reply: rtsandbox.Reply{OK: true, Text: "answer"}}, nil
}

func (m *memRuntime) StartFresh(ch rtsandbox.ChannelKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.turns, ch)
	return nil
}

func (m *memRuntime) Stop(ch rtsandbox.ChannelKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.cancel[ch]; c != nil {
		c(rtsandbox.ErrTurnStopped)
		return true
	}
	return false
}

func (m *memRuntime) Status(_ context.Context, ch rtsandbox.ChannelKey) (rtsandbox.RuntimeStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := rtsandbox.RuntimeStatus{Mode: "mem", Profile: "p", Container: rtsandbox.ContainerMissing}
	if m.alive[ch] {
		st.Container = rtsandbox.ContainerRunning
	}
	return st, nil
}

func (m *memRuntime) Remove(_ context.Context, ch rtsandbox.ChannelKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.alive, ch)
	return nil
}

// TestSuiteOnMemoryRuntime: the suite passes a runtime that keeps the
// contract, so its checks ask nothing a runtime cannot give.
func TestSuiteOnMemoryRuntime(t *testing.T) {
	m := &memRuntime{timeout: 50 * time.Millisecond, turns: map[rtsandbox.ChannelKey]int{},
		alive: map[rtsandbox.ChannelKey]bool{}, cancel: map[rtsandbox.ChannelKey]context.CancelCauseFunc{}}
	n := 0
	Run(t, Harness{
		Runtime: m, Timeout: m.timeout, Mode: "mem", Profile: "p",
		Ran: rtsandbox.ContainerRunning, Removed: rtsandbox.ContainerMissing,
		Channel: func() rtsandbox.ChannelKey { n++; return rtsandbox.ChannelKey(fmt.Sprintf("mem:%d", n)) },
		OK:      "ok", Fail: "fail", Hang: "hang", Answer: "answer",
		Continued: func(*testing.T) bool { m.mu.Lock(); defer m.mu.Unlock(); return m.saw },
	})
}
