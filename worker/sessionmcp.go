package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the session worker's MCP client (docs/protocol.md, "MCP calls"): a minimal Streamable-HTTP JSON-RPC client whose every request goes
// through the broker's POST /mcp/<server>, which holds the credential and
// the server's URL. Per server it runs initialize, then
// notifications/initialized, then tools/call, carrying the server's
// Mcp-Session-Id and the negotiated Mcp-Protocol-Version. An answer is
// JSON or an event stream; a 404 (an expired session) re-initialises
// once and retries the call. Sessions last for the worker's life; they
// are opened at the first call of a turn, when the broker allows
// tools/call, rather than in the metadata-only startup window.

// MCP client constants.
const (
	mcpProtocolVersion = "2025-06-18"
	// maxMCPAnswer bounds an MCP answer as the worker reads it.
	maxMCPAnswer = 16 << 20
)

// errMCP marks an MCP answer the worker cannot use.
var errMCP = errors.New("MCP call failed")

// mcpClient holds the sessions of the profile's servers.
type mcpClient struct {
	broker   *broker
	sessions map[string]mcpSession // by server
	nextID   int
}

// mcpSession is an initialised server: its session id ("" for a
// stateless server) and protocol version.
type mcpSession struct {
	id, version string
}

func newMCPClient(b *broker) *mcpClient {
	return &mcpClient{broker: b, sessions: map[string]mcpSession{}}
}

// mcpRequest is a JSON-RPC request or, without an id, a notification.
type mcpRequest struct {
	JSONRPC string `json:"jsonrpc"`
	ID      *int   `json:"id,omitempty"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// callTool runs tool on server with args (a JSON object) and returns the
// text the model sees.
func (c *mcpClient) callTool(ctx context.Context, server, tool string, args json.RawMessage) (string, error) {
	params := wire.MCPCallParams{Name: tool, Arguments: args}
	for attempt := 0; ; attempt++ {
		s, err := c.session(ctx, server)
		if err != nil {
			return "", err
		}
		ans, err := c.post(ctx, server, s, c.newRequest("tools/call", params))
		if err == nil && ans.status == http.StatusNotFound && attempt == 0 && s.id != "" {
			delete(c.sessions, server) // expired: initialise again, once
			continue
		}
		if err != nil {
			return "", err
		}
		if ans.err != nil {
			return "", ans.err
		}
		return mcpToolText(ans.result)
	}
}

// session returns the server's session, initialising it first if need be.
func (c *mcpClient) session(ctx context.Context, server string) (mcpSession, error) {
	if s, ok := c.sessions[server]; ok {
		return s, nil
	}
	params := map[string]any{
		"protocolVersion": mcpProtocolVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]string{"name": "rtsandbox-worker", "version": "1"},
	}
	var s mcpSession
	ans, err := c.post(ctx, server, s, c.newRequest("initialize", params))
	if err == nil {
		err = ans.err
	}
	if err != nil {
		return s, err
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(ans.result, &init) != nil || init.ProtocolVersion == "" || len(init.ProtocolVersion) > 64 {
		return s, fmt.Errorf("%w: initialize answer", errMCP)
	}
	s = mcpSession{id: ans.sessionID, version: init.ProtocolVersion}
	ans, err = c.post(ctx, server, s, mcpRequest{JSONRPC: wire.MCPJSONRPC, Method: "notifications/initialized"})
	if err != nil {
		return s, err
	}
	if ans.status/100 != 2 {
		return s, fmt.Errorf("%w: notifications/initialized: status %d", errMCP, ans.status)
	}
	c.sessions[server] = s
	return s, nil
}

func (c *mcpClient) newRequest(method string, params any) mcpRequest {
	c.nextID++
	id := c.nextID
	return mcpRequest{JSONRPC: wire.MCPJSONRPC, ID: &id, Method: method, Params: params}
}

// mcpAnswer is what the worker read of an MCP answer: its status and
// session id, and for a request its result or why there is none.
type mcpAnswer struct {
	status    int
	sessionID string
	result    json.RawMessage
	err       error
}

// post sends a JSON-RPC message to /mcp/<server> with the session's
// headers. For a request it reads the answer until the response to it
// (mcpResult), so a server that keeps its event stream open after the
// response does not hold the turn; err is then only a failed exchange.
func (c *mcpClient) post(ctx context.Context, server string, s mcpSession, req mcpRequest) (*mcpAnswer, error) {
	h := http.Header{}
	if s.id != "" {
		h.Set("Mcp-Session-Id", s.id)
	}
	if s.version != "" {
		h.Set("Mcp-Protocol-Version", s.version)
	}
	body, err := jsonjs.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.broker.client.Do(ctx, brokerclient.Request{Route: wire.MCPRoute(server), Body: body, Header: h})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBrokerUnreachable, err)
	}
	defer resp.Close()
	ans := &mcpAnswer{status: resp.Status, sessionID: resp.Header.Get("Mcp-Session-Id")}
	switch {
	case req.ID == nil: // a notification: the status is the answer
	case resp.Status != http.StatusOK:
		ans.err = fmt.Errorf("%w: status %d", errMCP, resp.Status)
	default:
		ans.result, ans.err = mcpResult(resp.Header, resp.Body, *req.ID)
	}
	return ans, nil
}

// mcpResult reads the result of request id from a 200 answer's body: the
// JSON-RPC response itself, or, in an event stream, the first event whose
// data is the response to id (server requests and notifications before
// it are skipped). At most maxMCPAnswer bytes are read. A JSON-RPC error
// is errMCP with its message.
func mcpResult(h http.Header, body io.Reader, id int) (json.RawMessage, error) {
	if !isEventStream(h) {
		data, err := io.ReadAll(io.LimitReader(body, maxMCPAnswer+1))
		if err != nil || len(data) > maxMCPAnswer {
			return nil, fmt.Errorf("%w: answer unreadable or over %d bytes", errMCP, maxMCPAnswer)
		}
		return rpcResult(data, id)
	}
	events := brokerclient.NewSSEReader(body, brokerclient.SSELimits{MaxLine: maxMCPAnswer, MaxEvent: maxMCPAnswer, MaxTotal: maxMCPAnswer})
	for {
		ev, err := events.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: no answer in the event stream", errMCP)
		}
		if result, err := rpcResult([]byte(ev.Data), id); !errors.Is(err, errNotAnswer) {
			return result, err
		}
	}
}

// errNotAnswer marks a JSON-RPC message that does not answer the request
// (a server notification or request in the stream).
var errNotAnswer = errors.New("not the answer")

// rpcResult reads a JSON-RPC response to request id.
func rpcResult(data []byte, id int) (json.RawMessage, error) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if firstByte(data) != '{' || json.Unmarshal(data, &msg) != nil {
		return nil, fmt.Errorf("%w: %w", errMCP, errNotAnswer)
	}
	if string(compact(msg.ID)) != fmt.Sprint(id) {
		return nil, fmt.Errorf("%w: %w", errMCP, errNotAnswer)
	}
	if msg.Error != nil {
		return nil, fmt.Errorf("%w: %s", errMCP, rtsandbox.PrefixUTF16(msg.Error.Message, 2000))
	}
	if _, ok := object(msg.Result); !ok {
		return nil, fmt.Errorf("%w: no result", errMCP)
	}
	return msg.Result, nil
}

// mcpToolText is what the model sees of a tools/call result: its text
// contents joined by newlines, a note for each other content, or the
// structured content as JSON when there is no content; an isError result
// is marked so the model knows the call failed.
func mcpToolText(result json.RawMessage) (string, error) {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if json.Unmarshal(result, &r) != nil {
		return "", fmt.Errorf("%w: tools/call result", errMCP)
	}
	parts := make([]string, 0, len(r.Content))
	for _, c := range r.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		} else {
			parts = append(parts, "["+rtsandbox.PrefixUTF16(c.Type, 64)+" content omitted]")
		}
	}
	text := strings.Join(parts, "\n")
	if len(parts) == 0 && len(r.StructuredContent) > 0 {
		text = string(compact(r.StructuredContent))
	}
	if r.IsError {
		text = "Tool error: " + text
	}
	return text, nil
}
