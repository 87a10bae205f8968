package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/budget"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/modelapi"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

var errTooLarge = errors.New("too large")

// request is a call: its body as received and decoded, and what a route
// that passes an answer on as it arrives (stream.go) or forwards a
// header (the Anthropic routes) needs.
type request struct {
	raw    []byte
	obj    map[string]json.RawMessage // a map on purpose: the forwarded body's members, split under budget (decodeBody)
	w      http.ResponseWriter
	header http.Header // the worker's, for anthropic-version and anthropic-beta only
	path   string      // the matched route
	beta   bool        // the target's query was ?beta=true
	// budget bounds the decoding of raw (every read of it, by the route
	// too) and stops it with the call; hold is what the call holds of
	// the host's decoding budget (nil without an Intake).
	budget *jsontree.Budget
	hold   *hold
}

// sent is called by a route once its rebuilt request is made: the call
// then holds only what stays until its answer ends.
func (req request) sent() { req.hold.shrink(sentBytes(len(req.raw))) }

// routeFunc serves one matched route.
type routeFunc func(ctx context.Context, t *Turn, req request) outcome

// route matches the escaped request path exactly: the model's route of the
// configured dialect (/model, or the two Anthropic Messages routes),
// /tools/<name> of a declared host tool, /mcp/<name> of a declared server.
// Names are looked up in maps, so "constructor" or "%62ash" are simply
// absent, and extra segments never match a name. ?beta=true is accepted
// on the Anthropic routes only.
func (t *Turn) route(path string, beta bool) (routeFunc, bool) {
	if t.b.anthropicRoute(path) {
		return serveMessages, true
	}
	if beta {
		return nil, false
	}
	if (path == wire.RouteModel || path == wire.RouteOpenAIChat) && !t.b.anthropic() {
		return serveModel, true
	}
	if name, ok := strings.CutPrefix(path, wire.RouteToolPrefix); ok {
		if tool := t.b.tools[name]; tool != nil {
			return tool.serve, true
		}
		return nil, false
	}
	if name, ok := strings.CutPrefix(path, wire.RouteMCPPrefix); ok {
		if srv := t.b.mcp[name]; srv != nil {
			return srv.serve, true
		}
	}
	return nil, false
}

// serveModel normalises the guest's chat request under the sealed rule
// (serveChat).
func serveModel(ctx context.Context, t *Turn, req request) outcome {
	return serveChat(ctx, t, req, modelapi.ChatOptions{})
}

// serveChat normalises the guest's chat request under opts (the session
// broker admits data-URL image parts in user messages), fetches the
// turn-scoped key and forwards the rebuilt body. A refused payload never
// fetches the key or reaches upstream. With Config.Stream, "stream": true
// is forwarded (with the usage chunk asked for, to settle the budget) and
// the answer passed on as it arrives; otherwise stream stays pinned to
// false.
func serveChat(ctx context.Context, t *Turn, req request, opts modelapi.ChatOptions) outcome {
	opts.Budget = req.budget
	in, err := modelapi.NormalizeChatWith(req.obj, opts)
	switch {
	case errors.Is(err, jsontree.ErrStopped):
		return fail("call canceled")
	case err != nil:
		// The rule's text may quote guest key names: keep the record
		// content-free.
		o := refuse(refModelPayload)
		o.detail = "model payload refused by the /model rule"
		if errors.Is(err, jsontree.ErrBudget) {
			o.detail = "model payload holds more values than its size pays for"
		}
		return o
	}
	key, err := t.b.cfg.APIKey(ctx, t.binding)
	if err != nil || key == "" {
		return missingKey(err)
	}
	chat := modelapi.BuildChatRequest(t.b.cfg.Model, in, t.b.cfg.MaxOutputTokens)
	streamed := t.b.cfg.Stream && string(bytes.TrimSpace(req.obj["stream"])) == "true"
	if streamed {
		chat.Stream = true
		chat.StreamOptions = &modelapi.StreamOptions{IncludeUsage: true}
	}
	payload, err := marshal(chat)
	if err != nil {
		return fail("cannot encode model request")
	}
	req.sent()
	// A completion may be repeated after a 5xx or a reset: a repeat costs
	// tokens, never a second side effect. (A streamed one is never
	// repeated: upstream.Client.Open makes one attempt.)
	call := upstream.Call{URL: t.b.cfg.ModelURL, Body: payload, Key: key, Idempotent: true, Forms: t.keyForms(key)}
	send := t.b.forward
	if streamed {
		call.Accept = acceptStream
		send = func(ctx context.Context, call upstream.Call) outcome { return t.pass(ctx, req.w, call, true) }
	}
	return t.spend(ctx, call, in, t.b.cfg.MaxOutputTokens, send)
}

// spend reserves a model call's token estimate (tokenEstimate of its body,
// whose rebuilt request is in), makes the call with send and settles what
// it cost. Without a ledger it just calls.
func (t *Turn) spend(ctx context.Context, call upstream.Call, in imageCounter, maxOutput int, send func(context.Context, upstream.Call) outcome) outcome {
	if t.b.cfg.Budget == nil {
		return send(ctx, call)
	}
	estimate := tokenEstimate(call.Body, in, maxOutput)
	r, o, ok := t.reserve(ctx, budget.Tokens, estimate)
	if !ok {
		return o
	}
	o = send(ctx, call)
	t.settle(r, usedTokens(o, estimate))
	return o
}

// forward posts payload upstream and passes back the validated JSON bytes;
// nothing of the upstream response but its body is ever passed back. The
// bytes passed back are the bytes scanned, and the scan looks at each
// string as the guest's JSON decoder will see it (and with its character
// references decoded, as a renderer would show it), so the reflection
// check runs on the final form (upstream.CheckJSON lists the forms). The
// scan runs while the answer arrives (upstream.Client.PostJSON); nothing
// is passed back before its end.
func (b *Broker) forward(ctx context.Context, call upstream.Call) outcome {
	start := b.now()
	call.Member = usageMember
	a, err := b.client.PostJSON(ctx, call)
	took := b.now().Sub(start)
	o := okJSON(a.Body)
	o.release, o.usage, o.usageKnown = a.Release, a.Member, a.MemberKnown
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
	if err := h.args.check(req.budget, req.raw); err != nil {
		return argsRefusal(err)
	}
	req.sent()
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
	out, err := marshal(wire.ToolResult{Text: text})
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
