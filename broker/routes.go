package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
)

var errTooLarge = errors.New("too large")

// request is a call's body: the bytes as received and the decoded object.
type request struct {
	raw []byte
	obj map[string]json.RawMessage
}

// routeFunc serves one matched route.
type routeFunc func(ctx context.Context, t *Turn, req request) outcome

// route matches the escaped request path exactly: /model, /tools/<name> of
// a declared host tool, /mcp/<name> of a declared server. Names are looked
// up in maps, so "constructor" or "%62ash" are simply absent, and extra
// segments never match a name.
func (t *Turn) route(path string) (routeFunc, bool) {
	if path == rtsandbox.RouteModel {
		return serveModel, true
	}
	if name, ok := strings.CutPrefix(path, rtsandbox.RouteToolPrefix); ok {
		if tool := t.b.tools[name]; tool != nil {
			return tool.serve, true
		}
		return nil, false
	}
	if name, ok := strings.CutPrefix(path, rtsandbox.RouteMCPPrefix); ok {
		if srv := t.b.mcp[name]; srv != nil {
			return srv.serve, true
		}
	}
	return nil, false
}

// serveModel normalises the guest's chat request, fetches the turn-scoped
// key and forwards the rebuilt body. A refused payload never fetches the
// key or reaches upstream.
func serveModel(ctx context.Context, t *Turn, req request) outcome {
	in, err := modelapi.NormalizeChat(req.obj)
	if err != nil {
		// The rule's text may quote guest key names: keep the record
		// content-free.
		o := refuse(refModelPayload)
		o.detail = "model payload refused by the /model rule"
		return o
	}
	key, err := t.b.cfg.APIKey(ctx, t.binding)
	if err != nil || key == "" {
		return fail("model credential missing")
	}
	payload, err := marshal(modelapi.BuildChatRequest(t.b.cfg.Model, in, t.b.cfg.MaxOutputTokens))
	if err != nil {
		return fail("cannot encode model request")
	}
	// A completion may be repeated after a 5xx or a reset: a repeat costs
	// tokens, never a second side effect.
	call := upstream.Call{URL: t.b.cfg.ModelURL, Body: payload, Key: key, Idempotent: true}
	if t.b.cfg.Budget == nil {
		return t.b.forward(ctx, call)
	}
	estimate := tokenEstimate(payload, t.b.cfg.MaxOutputTokens)
	r, o, ok := t.reserve(ctx, budget.Tokens, estimate)
	if !ok {
		return o
	}
	o = t.b.forward(ctx, call)
	t.settle(r, usedTokens(o, estimate))
	return o
}

// forward posts payload upstream and passes back the validated JSON bytes;
// nothing of the upstream response but its body is ever passed back. The
// bytes passed back are the bytes scanned, and the scan looks at each
// string as the guest's JSON decoder will see it (and with its character
// references decoded, as a renderer would show it), so the reflection
// check runs on the final form (upstream.CheckJSON lists the forms).
func (b *Broker) forward(ctx context.Context, call upstream.Call) outcome {
	start := b.now()
	resp, err := b.client.Post(ctx, call)
	took := b.now().Sub(start)
	if err == nil {
		err = upstream.CheckJSON(resp, call.Key.Reveal())
	}
	o := okJSON(resp)
	if err != nil {
		o = fail(err.Error())
		o.reflected = errors.Is(err, upstream.ErrReflect)
	}
	o.upstream = took
	return o
}

// serve runs a host tool with the host-bound context. The body is passed as
// the guest sent it; its "channel" or "speaker" fields are just data.
func (h *hostTool) serve(ctx context.Context, t *Turn, req request) outcome {
	if duplicateKeys(req.raw) {
		o := refuse(refArguments)
		o.detail = "arguments repeat an object key"
		return o
	}
	if err := h.args.validate(req.raw); err != nil {
		o := refuse(refArguments)
		o.detail = schemaDetail(err)
		return o
	}
	start := t.b.now()
	text, err := h.run(ctx, t, req.raw, t.binding)
	o := toolOutcome(text, err)
	o.upstream = t.b.now().Sub(start)
	return o
}

// toolOutcome is the answer to a host tool's result: its text as
// {"text":…}, or the fixed failure. A webhook answer refused for echoing
// its key (upstream.ErrReflect) is marked so.
func toolOutcome(text string, err error) outcome {
	if errors.Is(err, errToolPanicked) {
		return fail("host tool panicked")
	}
	if err != nil {
		o := fail("host tool failed")
		o.reflected = errors.Is(err, upstream.ErrReflect)
		return o
	}
	out, err := marshal(rtsandbox.ToolResult{Text: text})
	if err != nil || len(out) > rtsandbox.MaxToolResult {
		return fail("host tool result too large")
	}
	return okJSON(out)
}

// errToolPanicked marks a host tool whose Run panicked.
var errToolPanicked = errors.New("host tool panicked")

// run calls the tool and contains a panic: the call fails with the fixed
// 502 text and the operator log gets the tool, the panic's type and the
// stack (never its value, which may quote guest input). The host and the
// turn go on.
func (h *hostTool) run(ctx context.Context, t *Turn, raw json.RawMessage, tc rtsandbox.Binding) (text string, err error) {
	defer func() {
		if v := recover(); v != nil {
			t.b.log.Error("host tool panicked", "tool", h.Spec.Name, "channel", string(tc.Channel),
				"panic_type", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
			text, err = "", errToolPanicked
		}
	}()
	return h.Impl.Run(ctx, raw, tc)
}
