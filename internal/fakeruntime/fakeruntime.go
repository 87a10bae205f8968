// Package fakeruntime is a stand-in for the sealed runtime in tests of the
// layers above it (router, surfaces): it records each turn and lets the
// test decide its outcome, and Stop cancels a running turn's context like
// the real runtime does.
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
	Text    string
	// OnText is the turn's text observer (RunTurnText), nil for RunTurn.
	OnText func(answer int, delta string)
	// Input marks a turn run by RunTurnInput; MessageID and Attachments
	// are then the message's input, and Text its TurnInput.Text.
	Input       bool
	MessageID   string
	Attachments []rtsandbox.Attachment
}

// Runtime implements router.Runtime. Run decides each turn's outcome
// (nil: {OK: true, Text: "Sealed."}); set it before turns start, or use
// SetRun while they run. Files, when set, gives the files a RunTurnInput
// turn answers with, whatever its outcome: deciding whether to post them
// is the caller's business.
type Runtime struct {
	Run   func(ctx context.Context, c Call) (rtsandbox.Reply, error)
	Files func(c Call) []rtsandbox.File
	// FreshErr is what StartFresh returns (set before commands run).
	FreshErr error

	mu    sync.Mutex
	calls []Call
	// bindings are the calls' bindings, tier included, in call order.
	bindings []rtsandbox.Binding
	fresh    []rtsandbox.ChannelKey
	active   map[rtsandbox.ChannelKey]context.CancelFunc
}

// RunTurn records the call and runs Run with a context Stop can cancel.
func (f *Runtime) RunTurn(ctx context.Context, b rtsandbox.Binding, text string) (rtsandbox.Reply, error) {
	return f.RunTurnText(ctx, b, text, nil)
}

// RunTurnText is RunTurn whose Call carries onText, so that Run may
// report streamed text as the real runtime would.
func (f *Runtime) RunTurnText(ctx context.Context, b rtsandbox.Binding, text string, onText func(answer int, delta string)) (rtsandbox.Reply, error) {
	return f.run(ctx, b, Call{Channel: b.Channel, Speaker: b.Speaker, Text: text, OnText: onText})
}

// RunTurnInput is RunTurnText with a message's input (router.InputRuntime
// without the router's Answer type, which this package cannot import: the
// router's own tests use it): the Call records the message id and the
// attachments, and the turn answers with Files' files.
func (f *Runtime) RunTurnInput(ctx context.Context, b rtsandbox.Binding, in rtsandbox.TurnInput, onText func(answer int, delta string)) (rtsandbox.Reply, []rtsandbox.File, error) {
	c := Call{Channel: b.Channel, Speaker: b.Speaker, Text: in.Text, OnText: onText,
		Input: true, MessageID: in.MessageID, Attachments: in.Attachments}
	reply, err := f.run(ctx, b, c)
	f.mu.Lock()
	files := f.Files
	f.mu.Unlock()
	if files == nil {
		return reply, nil, err
	}
	return reply, files(c), err
}

// run records c and runs Run with a context Stop can cancel.
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
	run := f.Run
	f.mu.Unlock()
	defer func() { f.mu.Lock(); delete(f.active, ch); f.mu.Unlock() }()
	if run == nil {
		return rtsandbox.Reply{OK: true, Text: "Sealed."}, nil
	}
	return run(ctx, c)
}

// SetRun replaces Run safely while turns may be running.
func (f *Runtime) SetRun(run func(ctx context.Context, c Call) (rtsandbox.Reply, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Run = run
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
