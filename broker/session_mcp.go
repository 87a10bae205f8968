package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// POST /mcp/<server> in session mode (docs/protocol.md, "MCP calls"): unlike the sealed
// route (mcp.go), where the broker is the MCP client, the session worker
// runs its own Streamable-HTTP client through the broker. The broker
// rebuilds each JSON-RPC message from the allowed methods, adds the
// server's credential and passes the answer (JSON or an event stream, any
// status) back through the reflection filter. The MCP session id travels
// between worker and server in the mcp-session-id header, both ways.

// The JSON-RPC methods a session worker may send (docs/protocol.md, "MCP calls"); tools/call only
// for a declared tool, and never in the startup window.
var sessionMCPMethods = map[string]bool{
	"initialize":                true,
	"notifications/initialized": true,
	"ping":                      true,
	"tools/list":                true,
	wire.MCPMethodCall:          true,
}

// maxMCPHeader bounds a forwarded mcp-session-id or mcp-protocol-version
// (docs/session.md, "Routes and statuses").
const maxMCPHeader = 256

// mcpAnswerHeaders are the MCP answer headers passed back besides the
// model ones, when short and free of the credential (docs/session.md, "Routes and statuses").
var mcpAnswerHeaders = []string{"Mcp-Session-Id"}

// rpcMessage is a rebuilt JSON-RPC message, in wire order.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// mcpRoute forwards one rebuilt message to srv.
func (s *Session) mcpRoute(srv *mcpServer) sessionRoute {
	return func(ctx context.Context, sc *scope, req request) outcome {
		msg, o, ok := srv.rebuild(req.budget, req.obj, sc.startup)
		if !ok {
			return o
		}
		payload, err := json.Marshal(msg)
		if err != nil {
			return sessFail("cannot encode MCP message")
		}
		req.sent()
		var key rtsandbox.Secret
		if srv.APIKey != nil {
			if key, err = srv.APIKey(ctx, sc.turn.binding); err != nil || key == "" {
				return sessFail("MCP credential missing")
			}
		}
		call := upstream.Call{URL: srv.URL, Body: payload, Key: key, Accept: acceptStream, Header: mcpHeaders(req.header)}
		return sc.turn.passWith(ctx, req.w, call, true, mcpAnswerHeaders)
	}
}

// rebuild checks a worker's JSON-RPC message against the allow-list and
// rebuilds it from its known members, read under b: jsonrpc "2.0", the id
// if one was sent (a string, number or null), the method, and the params
// if present. tools/call needs params an object naming a declared tool
// whose arguments are an object that passes the declared schema (else 400
// "Invalid tool input", our sealed-mode rule).
func (s *mcpServer) rebuild(b *jsontree.Budget, obj map[string]json.RawMessage, startup bool) (rpcMessage, outcome, bool) {
	refused := sessRefuse(http.StatusForbidden, sessMCPRefused, refMCP.class)
	method, ok := jsonString(b, obj["method"])
	if !ok || !sessionMCPMethods[method] {
		return rpcMessage{}, stoppedOr(b, refused), false
	}
	msg := rpcMessage{JSONRPC: "2.0", Method: method}
	if id, ok := obj["id"]; ok {
		if !validRPCID(id) {
			return rpcMessage{}, refused, false
		}
		msg.ID = id
	}
	if params, ok := obj["params"]; ok {
		msg.Params = params
	}
	if method != wire.MCPMethodCall {
		return msg, outcome{}, true
	}
	if startup {
		return rpcMessage{}, refused, false
	}
	var params [2]json.RawMessage // name, arguments
	if !isObject(msg.Params) {
		return rpcMessage{}, refused, false
	}
	if _, _, ok := b.Fields(msg.Params, callParamFields, params[:]); !ok {
		return rpcMessage{}, stoppedOr(b, refused), false
	}
	name, ok := jsonString(b, params[0])
	if !ok || s.tools[name] == nil || !isObject(params[1]) {
		return rpcMessage{}, stoppedOr(b, refused), false
	}
	if err := s.tools[name].check(b, params[1]); err != nil {
		return rpcMessage{}, sessArgsRefusal(err), false
	}
	return msg, outcome{}, true
}

// stoppedOr is o, or the failure of a call that ended when b stopped.
func stoppedOr(b *jsontree.Budget, o outcome) outcome {
	if errors.Is(b.Err(), jsontree.ErrStopped) {
		return sessFail("call canceled")
	}
	return o
}

// sessArgsRefusal answers arguments that check refused, in the session's
// words (docs/protocol.md, "Host tools"): 400 "Invalid tool input", or a failure once the
// call ended.
func sessArgsRefusal(err error) outcome {
	if errors.Is(err, jsontree.ErrStopped) {
		return sessFail("call canceled")
	}
	o := sessRefuse(http.StatusBadRequest, sessInvalidToolInput, refArguments.class)
	o.detail = schemaDetail(err)
	return o
}

// isJSONString reports whether raw is a JSON string.
func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

// validRPCID reports whether raw is a JSON-RPC id: a string, a number or
// null.
func validRPCID(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch c := raw[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	}
	return string(raw) == "null"
}

// mcpHeaders are the worker's headers forwarded on an MCP call:
// mcp-session-id and mcp-protocol-version, each when present once and at
// most 256 bytes. Nothing else of the worker's is sent.
func mcpHeaders(in http.Header) http.Header {
	out := make(http.Header, 2)
	for _, name := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version"} {
		if v := in.Values(name); len(v) == 1 && v[0] != "" && len(v[0]) <= maxMCPHeader {
			out[name] = []string{v[0]}
		}
	}
	return out
}
