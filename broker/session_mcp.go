package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// POST /mcp/<server> in session mode (session spec §2.6): unlike the sealed
// route (mcp.go), where the broker is the MCP client, the session worker
// runs its own Streamable-HTTP client through the broker. The broker
// rebuilds each JSON-RPC message from the allowed methods, adds the
// server's credential and passes the answer (JSON or an event stream, any
// status) back through the reflection filter. The MCP session id travels
// between worker and server in the mcp-session-id header, both ways.

// The JSON-RPC methods a session worker may send (§2.6); tools/call only
// for a declared tool, and never in the startup window.
var sessionMCPMethods = map[string]bool{
	"initialize":                true,
	"notifications/initialized": true,
	"ping":                      true,
	"tools/list":                true,
	rtsandbox.MCPMethodCall:     true,
}

// maxMCPHeader bounds a forwarded mcp-session-id or mcp-protocol-version
// (§2.4 step 14).
const maxMCPHeader = 256

// mcpAnswerHeaders are the MCP answer headers passed back besides the
// model ones, when short and free of the credential (§2.4 step 15).
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
		msg, o, ok := srv.rebuild(req.obj, sc.startup)
		if !ok {
			return o
		}
		payload, err := json.Marshal(msg)
		if err != nil {
			return sessFail("cannot encode MCP message")
		}
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
// rebuilds it from its known members: jsonrpc "2.0", the id if one was
// sent (a string, number or null), the method, and the params if present.
// tools/call needs params an object naming a declared tool whose arguments
// are an object that passes the declared schema (else 400 "Invalid tool
// input", our sealed-mode rule).
func (s *mcpServer) rebuild(obj map[string]json.RawMessage, startup bool) (rpcMessage, outcome, bool) {
	refused := sessRefuse(http.StatusForbidden, sessMCPRefused, refMCP.class)
	var method string
	if !isJSONString(obj["method"]) || json.Unmarshal(obj["method"], &method) != nil || !sessionMCPMethods[method] {
		return rpcMessage{}, refused, false
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
	if method != rtsandbox.MCPMethodCall {
		return msg, outcome{}, true
	}
	if startup {
		return rpcMessage{}, refused, false
	}
	params, ok := decodeObject(msg.Params)
	var name string
	if !ok || !isJSONString(params["name"]) || json.Unmarshal(params["name"], &name) != nil || s.tools[name] == nil {
		return rpcMessage{}, refused, false
	}
	args := params["arguments"]
	if _, ok := decodeObject(args); !ok {
		return rpcMessage{}, refused, false
	}
	if duplicateKeys(args) || s.tools[name].validate(args) != nil {
		return rpcMessage{}, sessRefuse(http.StatusBadRequest, sessInvalidToolInput, refArguments.class), false
	}
	return msg, outcome{}, true
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
