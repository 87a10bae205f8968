package broker

// The /mcp/<server> route. The guest's shape stays the sealed protocol's:
// the worker posts one wire.MCPCall and gets one JSON-RPC answer. The
// MCP protocol itself (initialize, the session id, SSE answers, re-
// initialising an expired session) is the broker's business: it is the
// server's MCP client (upstream.MCPSession), so the guest never sees a
// session id or a protocol message other than its call's answer.
//
// Sessions are per turn: a turn's first call to a server initialises one,
// its later calls reuse it, and the turn's end closes it. No session state
// of the server crosses from one turn (or guest) to the next, and a turn's
// session is used by one call at a time, since a turn has one call in
// flight. Session mode (docs/session-mode.md, "Between turns: the startup window") will scope sessions to its metadata
// window and turns here, in session().

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
	"github.com/rtsandbox/rtsandbox/upstream"
	"github.com/rtsandbox/rtsandbox/wire"
)

// mcpCloseTimeout bounds the key read for the DELETE that closes a turn's
// session (the SDK bounds the DELETE itself).
const mcpCloseTimeout = 5 * time.Second

type mcpServer struct {
	MCPServer
	tools map[string]*argSchema
	conn  *upstream.MCPServer
	// sessions holds each live turn's session (*Turn → *upstream.MCPSession).
	sessions sync.Map
}

func buildMCP(servers []MCPServer, client *upstream.Client) (map[string]*mcpServer, error) {
	out := make(map[string]*mcpServer, len(servers))
	for _, s := range servers {
		if !rtsandbox.ValidToolName(s.Name) || out[s.Name] != nil {
			return nil, fmt.Errorf("%w: %q", ErrMCP, s.Name)
		}
		if s.URL.IsZero() {
			return nil, fmt.Errorf("MCP server %q: %w", s.Name, ErrEndpoint)
		}
		srv := &mcpServer{MCPServer: s, tools: make(map[string]*argSchema, len(s.Tools)), conn: client.MCP(s.URL)}
		for _, t := range s.Tools {
			if !rtsandbox.ValidMCPToolName(t.Name) || srv.tools[t.Name] != nil {
				return nil, fmt.Errorf("%w: %q/%q", ErrMCP, s.Name, t.Name)
			}
			args, err := compileArgs("mcp/"+s.Name+"/"+t.Name, t.Parameters)
			if err != nil {
				return nil, fmt.Errorf("MCP tool %q/%q: %w", s.Name, t.Name, err)
			}
			srv.tools[t.Name] = args
		}
		out[s.Name] = srv
	}
	return out, nil
}

// serve makes a single tools/call of a declared tool on the turn's session.
// Everything else in the body (ids, URLs, other methods) is dropped or
// refused, before any upstream contact.
func (s *mcpServer) serve(ctx context.Context, t *Turn, req request) outcome {
	name, args, ok := s.parseCall(req.budget, req.obj)
	if !ok {
		if req.budget.Err() != nil {
			return fail("call canceled")
		}
		return refuse(refMCP)
	}
	if err := s.tools[name].check(req.budget, args); err != nil {
		return argsRefusal(err)
	}
	req.sent()
	key, err := s.key(ctx, t.binding)
	if err != nil {
		return fail("MCP credential getter failed")
	}
	start := t.b.now()
	body, err := s.session(t).CallTool(ctx, key, name, args)
	o := okJSON(body)
	if err != nil {
		o = fail(err.Error())
		o.reflected = errors.Is(err, upstream.ErrReflect)
	}
	o.upstream = t.b.now().Sub(start)
	return o
}

// key reads the server's credential for binding; "" when it has none.
func (s *mcpServer) key(ctx context.Context, b rtsandbox.Binding) (rtsandbox.Secret, error) {
	if s.APIKey == nil {
		return "", nil
	}
	return s.APIKey(ctx, b)
}

// session returns the turn's session, making it on first use; the turn's
// end forgets and closes it.
func (s *mcpServer) session(t *Turn) *upstream.MCPSession {
	if v, ok := s.sessions.Load(t); ok {
		return v.(*upstream.MCPSession)
	}
	sess := s.conn.Session()
	if v, loaded := s.sessions.LoadOrStore(t, sess); loaded {
		return v.(*upstream.MCPSession)
	}
	context.AfterFunc(t.ctx, func() {
		s.sessions.Delete(t)
		sess.Close(func() rtsandbox.Secret {
			ctx, cancel := context.WithTimeout(context.Background(), mcpCloseTimeout)
			defer cancel()
			key, err := s.key(ctx, t.binding)
			if err != nil {
				return ""
			}
			return key
		})
	})
	return sess
}

// parseCall accepts exactly method "tools/call" with params an object whose
// name is a declared tool and whose arguments is an object.
func (s *mcpServer) parseCall(b *jsontree.Budget, body map[string]json.RawMessage) (string, json.RawMessage, bool) {
	if method, _ := jsonString(b, body["method"]); method != wire.MCPMethodCall {
		return "", nil, false
	}
	var params [2]json.RawMessage // name, arguments
	if !isObject(body["params"]) {
		return "", nil, false
	}
	if _, _, ok := b.Fields(body["params"], callParamFields, params[:]); !ok {
		return "", nil, false
	}
	name, ok := jsonString(b, params[0])
	if !ok || s.tools[name] == nil || !isObject(params[1]) {
		return "", nil, false
	}
	return name, params[1], true
}

// callParamFields are the members of a tools/call's params the broker
// reads.
var callParamFields = []string{"name", "arguments"}

// jsonString decodes raw under b when it is a JSON string.
func jsonString(b *jsontree.Budget, raw json.RawMessage) (string, bool) {
	if !isJSONString(raw) {
		return "", false
	}
	return b.String(raw)
}

// isObject reports whether raw, a JSON value, is an object.
func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}
