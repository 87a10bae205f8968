// Package fakeruntime is a stand-in for a mode's runtime (rtsandbox.Runtime)
// in tests of the layers above it (router, host, surfaces): it records each
// turn and lets the test decide its outcome, Stop cancels a running turn's
// context like the real runtimes do, and Status and Remove answer what the
// test set.
package fakeruntime

import (
	"context"
	"slices"
	"sync"

	"github.com/rtsandbox/rtsandbox"
)

// Call is one turn the runtime was asked to run.
type Call struct {
	Channel rtsandbox.ChannelKey
	Speaker rtsandbox.Speaker
	// Text is the input's Text.
	Text string
	// OnText is the turn's text observer, nil when the turn shows no
	// preview.
	OnText func(answer int, delta string)
	// MessageID, Attachments and Attached are the rest of the message's
	// input.
	MessageID   string
	Attachments []rtsandbox.Attachment
	Attached    int
}

// Input is the call's rtsandbox.TurnInput.
func (c Call) Input() rtsandbox.TurnInput {
	return rtsandbox.TurnInput{MessageID: c.MessageID, Text: c.Text, Attachments: c.Attachments, Attached: c.Attached}
}

// Runtime implements rtsandbox.Runtime. Turn decides each turn's outcome
// (nil: {OK: true, Text: "Sealed."}); set it before turns start, or use
// SetTurn while they run. Files, when set, gives the files a turn answers
// with, whatever its outcome: deciding whether to post them is the
// caller's business.
type Runtime struct {
	Turn  func(ctx context.Context, c Call) (rtsandbox.Reply, error)
	Files func(c Call) []rtsandbox.File
	// FreshErr is what StartFresh returns (set before commands run).
	FreshErr error
	// Stat and StatErr are what Status returns; the zero Stat names no
	// mode, so the status command shows the routing state only.
	Stat    rtsandbox.RuntimeStatus
	StatErr error
	// RemoveErr is what Remove returns; OnRemove, when set, runs inside
	// Remove (to see the world as Remove does).
	RemoveErr error
	OnRemove  func(rtsandbox.ChannelKey)

	mu    sync.Mutex
	calls []Call
	// bindings are the calls' bindings, tier included, in call order.
	bindings []rtsandbox.Binding
	fresh    []rtsandbox.ChannelKey
	removed  []rtsandbox.ChannelKey
	active   map[rtsandbox.ChannelKey]context.CancelFunc
}

var _ rtsandbox.Runtime = (*Runtime)(nil)

// Run records the call and runs Turn with a context Stop can cancel.
func (f *Runtime) Run(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, onText func(answer int, delta string)) (rtsandbox.Answer, error) {
	c := Call{Channel: b.Channel, Speaker: b.Speaker, Text: in.Text, OnText: onText,
		MessageID: in.MessageID, Attachments: in.Attachments, Attached: in.Attached}
	reply, err := f.run(ctx, b, c)
	f.mu.Lock()
	files := f.Files
	f.mu.Unlock()
	if files == nil || err != nil {
		return rtsandbox.Answer{Reply: reply}, err
	}
	return rtsandbox.Answer{Reply: reply, Files: files(c)}, nil
}

// run records c and runs Turn with a context Stop can cancel.
func (f *Runtime) run(ctx context.Context, b rtsandbox.Binding, c Call) (rtsandbox.Reply, error) {
	ch := b.Channel
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.bindings = append(f.bindings, b)
	if f.active == nil {
		f.active = map[rtsandbox.ChannelKey]context.CancelFunc{}
	}
	f.active[ch] = cancel
	turn := f.Turn
	f.mu.Unlock()
	defer func() { f.mu.Lock(); delete(f.active, ch); f.mu.Unlock() }()
	if turn == nil {
		return rtsandbox.Reply{OK: true, Text: "Sealed."}, nil
	}
	return turn(ctx, c)
}

// SetTurn replaces Turn safely while turns may be running.
func (f *Runtime) SetTurn(turn func(ctx context.Context, c Call) (rtsandbox.Reply, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Turn = turn
}

// StartFresh records the channel.
func (f *Runtime) StartFresh(ch rtsandbox.ChannelKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fresh = append(f.fresh, ch)
	return f.FreshErr
}

// Stop cancels the channel's running turn, if any.
func (f *Runtime) Stop(ch rtsandbox.ChannelKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cancel := f.active[ch]; cancel != nil {
		cancel()
		return true
	}
	return false
}

// Status returns Stat and StatErr.
func (f *Runtime) Status(context.Context, rtsandbox.ChannelKey) (rtsandbox.RuntimeStatus, error) {
	return f.Stat, f.StatErr
}

// Remove records the channel, runs OnRemove and returns RemoveErr.
func (f *Runtime) Remove(_ context.Context, ch rtsandbox.ChannelKey) error {
	f.mu.Lock()
	f.removed = append(f.removed, ch)
	on := f.OnRemove
	f.mu.Unlock()
	if on != nil {
		on(ch)
	}
	return f.RemoveErr
}

// Calls returns the turns run so far.
func (f *Runtime) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Bindings returns the Binding of each turn run so far, in order: what
// the router resolved, tier included.
func (f *Runtime) Bindings() []rtsandbox.Binding {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.bindings)
}

// Fresh returns the channels StartFresh was called for.
func (f *Runtime) Fresh() []rtsandbox.ChannelKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.fresh)
}

// Removed returns the channels Remove was called for.
func (f *Runtime) Removed() []rtsandbox.ChannelKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.removed)
}
