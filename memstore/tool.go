package memstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Fixed texts the model gets for a memory tool call that failed for a
// reason other than its input (a wire.MemoryRefusal has its own).
const (
	unavailableText = "Memory is unavailable right now."
	ownerText       = "Memory is unavailable for this speaker."
)

// ErrSealedMode refuses a memory tool called as a plain host tool: the
// memory tools are session mode's (their speaker results need privateTo),
// and a sealed worker runs its own.
var ErrSealedMode = fmt.Errorf("%w: the memory host tools answer in session mode only", rtsandbox.ErrRefused)

// Tool is one memory tool as a session-mode host tool: it implements
// broker.SessionHostTool, so the broker hands it the bound turn's
// binding, and the speaker comes from there, never from the input.
type Tool struct {
	spec  rtsandbox.ToolSpec
	store *Store
	log   *slog.Logger
}

// Tools returns memory_set, memory_get and memory_remove with the sealed
// schemas, bound to s; log receives the details of failures (nil
// discards them).
func (s *Store) Tools(log *slog.Logger) []*Tool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var out []*Tool
	for _, spec := range wire.MemoryToolSpecs() {
		out = append(out, &Tool{spec: spec, store: s, log: log})
	}
	return out
}

// Spec declares the tool.
func (t *Tool) Spec() rtsandbox.ToolSpec { return t.spec }

// Run refuses (ErrSealedMode): a result without privateTo could show one
// speaker's memory to another.
func (t *Tool) Run(context.Context, json.RawMessage, rtsandbox.Binding) (string, error) {
	return "", ErrSealedMode
}

// RunSession runs the call for b's speaker (Store.Call). An input the
// rules refuse gets its wire.MemoryRefusal text; any other failure a
// fixed text, with the details in the operator log. Every answer to a
// call in speaker scope, whatever it says, carries privateTo = the
// speaker's id, the worker's reader (docs/session.md, "Privacy projection"): only that speaker
// may see it. Channel-scope answers and refusals of the input, which hold
// nothing of anyone's memory, are public.
func (t *Tool) RunSession(ctx context.Context, input json.RawMessage, b wire.SessionBinding) (wire.SessionToolResponse, error) {
	c, err := wire.DecodeMemoryCall(t.spec.Name, input)
	if err != nil {
		return wire.SessionToolResponse{Error: refusalText(err)}, nil
	}
	resp := wire.SessionToolResponse{OK: true}
	resp.Text, err = t.store.Call(ctx, b.Binding, c)
	if err != nil {
		resp = wire.SessionToolResponse{Error: t.failure(b, err)}
	}
	if c.Scope == wire.ScopeSpeaker {
		resp.PrivateTo = b.Speaker.ID
	}
	return resp, nil
}

// failure is the model's text for err; what is not a refusal by a rule
// goes to the operator log.
func (t *Tool) failure(b wire.SessionBinding, err error) string {
	var r wire.MemoryRefusal
	if errors.As(err, &r) {
		return r.Text()
	}
	t.log.Warn("memory tool failed", "tool", t.spec.Name, "channel", string(b.Channel), "err", err)
	if errors.Is(err, ErrOwner) {
		return ownerText
	}
	return unavailableText
}

func refusalText(err error) string {
	var r wire.MemoryRefusal
	if errors.As(err, &r) {
		return r.Text()
	}
	return wire.ErrMemoryScope.Text()
}
