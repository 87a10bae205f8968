package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// Session bounds of a host tool's answer (docs/protocol.md, "Host tools"), in
// UTF-16 units.
const (
	maxSessionToolText  = 1000000
	maxSessionToolError = 10000
)

// toolRoute is POST /tools/<name> in session mode (docs/protocol.md, "Host tools"): the
// body's input member, which must be an object (and pass the declared
// schema, as in sealed mode), goes to the tool with the host-bound turn;
// every other member of the body is ignored. The answer is checked, and a
// result private to one reader is released only to a worker that keeps
// privacy (docs/protocol.md, "Privacy").
func (s *Session) toolRoute(h *hostTool) sessionRoute {
	return func(ctx context.Context, sc *scope, req request) outcome {
		input := req.obj["input"]
		if !isObject(input) {
			return sessRefuse(http.StatusBadRequest, sessInvalidToolInput, refArguments.class)
		}
		if err := h.args.check(req.budget, input); err != nil {
			return sessArgsRefusal(err)
		}
		req.sent()
		start := s.b.now()
		resp, err := s.runTool(ctx, h, input, sc)
		if err != nil {
			o := sessFail("host tool failed")
			o.upstream = s.b.now().Sub(start)
			return o
		}
		if !validToolResponse(resp) {
			return sessFail("host tool answer out of bounds")
		}
		if resp.PrivateTo != "" {
			if problem, ok := s.requirePrivacy(); !ok {
				return sessRefuse(http.StatusConflict, problem, "privacy")
			}
		}
		if ctx.Err() != nil {
			return sessFail("call canceled")
		}
		body, err := marshal(resp)
		if err != nil {
			return sessFail("cannot encode host tool answer")
		}
		o := okJSON(body)
		o.upstream = s.b.now().Sub(start)
		return o
	}
}

// requirePrivacy records that privacy is now required (a tool answered
// privateTo) and applies the gate: with a worker lacking a capability the
// bound turn fails, the pending Execute is rejected and the payload is
// never sent.
func (s *Session) requirePrivacy() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.private = true
	problem, ok := s.privacyProblemLocked()
	if !ok {
		s.failTurnLocked(problem)
	}
	return problem, ok
}

// runTool calls the tool through SessionHostTool when it implements it,
// else through Run, whose text becomes {ok:true, text}. A panic is
// contained as in sealed mode: the call fails, the log gets the stack.
func (s *Session) runTool(ctx context.Context, h *hostTool, input json.RawMessage, sc *scope) (resp wire.SessionToolResponse, err error) {
	st, rich := h.Impl.(SessionHostTool)
	if !rich {
		text, err := h.run(ctx, sc.turn, input, sc.turn.binding)
		return wire.SessionToolResponse{OK: true, Text: text}, err
	}
	defer func() {
		if v := recover(); v != nil {
			s.b.log.Error("host tool panicked", "tool", h.Spec.Name, "channel", string(sc.turn.binding.Channel),
				"panic_type", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
			resp, err = wire.SessionToolResponse{}, errToolPanicked
		}
	}()
	return st.RunSession(ctx, input, sc.binding(ctx))
}

// binding is the scope as a host tool sees it: the bound turn's channel,
// speaker, tier, profile and thinking level, and ctx's deadline.
func (sc *scope) binding(ctx context.Context) wire.SessionBinding {
	deadline, _ := ctx.Deadline()
	return wire.SessionBinding{Binding: sc.turn.binding, Profile: sc.profile,
		Thinking: string(sc.turn.thinking()), Deadline: deadline}
}

// validToolResponse applies the bounds of docs/protocol.md, "Host tools": text and error
// lengths, privateTo 1–256 units when present ("" is absent here), and an
// image that passes the image rule.
func validToolResponse(r wire.SessionToolResponse) bool {
	switch {
	case rtsandbox.UTF16Len(r.Text) > maxSessionToolText,
		rtsandbox.UTF16Len(r.Error) > maxSessionToolError,
		rtsandbox.UTF16Len(r.PrivateTo) > rtsandbox.MaxSessionField:
		return false
	case r.Image != nil:
		return wire.ValidateImage(*r.Image) == nil
	}
	return true
}
