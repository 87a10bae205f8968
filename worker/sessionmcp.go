package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/brokerclient"
)

// This file is the session worker's MCP client (session spec §7.1 item
// 5): a minimal Streamable-HTTP JSON-RPC client whose every request goes
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
	params := rtsandbox.MCPCallParams{Name: tool, Arguments: args}
	for attempt := 0; ; attempt++ {
		s, err := c.session(ctx, server)
		if err != nil {
			return "", err
		}
		result, status, err := c.request(ctx, server, s, "tools/call", params)
		if status == http.StatusNotFound && attempt == 0 && s.id != "" {
			delete(c.sessions, server) // expired: initialise again, once
			continue
		}
		if err != nil {
			return "", err
		}
		return mcpToolText(result)
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
	if err != nil {
		return s, err
	}
	result, err := mcpResult(ans, c.nextID)
	if err != nil {
		return s, err
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(result, &init) != nil || init.ProtocolVersion == "" || len(init.ProtocolVersion) > 64 {
		return s, fmt.Errorf("%w: initialize answer", errMCP)
	}
	s = mcpSession{id: ans.header.Get("Mcp-Session-Id"), version: init.ProtocolVersion}
	ans, err = c.post(ctx, server, s, mcpRequest{JSONRPC: rtsandbox.MCPJSONRPC, Method: "notifications/initialized"})
	if err != nil {
		return s, err
	}
	if ans.status/100 != 2 {
		return s, fmt.Errorf("%w: notifications/initialized: status %d", errMCP, ans.status)
	}
	c.sessions[server] = s
	return s, nil
}

// request sends one request and returns its result; status is the HTTP
// status, 0 when there was no answer.
func (c *mcpClient) request(ctx context.Context, server string, s mcpSession, method string, params any) (json.RawMessage, int, error) {
	ans, err := c.post(ctx, server, s, c.newRequest(method, params))
	if err != nil {
		return nil, 0, err
	}
	result, err := mcpResult(ans, c.nextID)
	return result, ans.status, err
}

func (c *mcpClient) newRequest(method string, params any) mcpRequest {
	c.nextID++
	id := c.nextID
	return mcpRequest{JSONRPC: rtsandbox.MCPJSONRPC, ID: &id, Method: method, Params: params}
}

// post sends a JSON-RPC message to /mcp/<server> with the session's
// headers.
func (c *mcpClient) post(ctx context.Context, server string, s mcpSession, req mcpRequest) (*answer, error) {
	h := http.Header{}
	if s.id != "" {
		h.Set("Mcp-Session-Id", s.id)
	}
	if s.version != "" {
		h.Set("Mcp-Protocol-Version", s.version)
	}
	return c.broker.call(ctx, http.MethodPost, rtsandbox.MCPRoute(server), req, h, 0, maxMCPAnswer)
}

// mcpResult reads the result of request id from an answer: a 200 whose
// body is the JSON-RPC response, or an event stream in which it is one
// event's data. A JSON-RPC error is errMCP with its message.
func mcpResult(ans *answer, id int) (json.RawMessage, error) {
	if ans.status != http.StatusOK {
		return nil, fmt.Errorf("%w: status %d", errMCP, ans.status)
	}
	if !isEventStream(ans.header) {
		return rpcResult(ans.body, id)
	}
	events := brokerclient.NewSSEReader(bytes.NewReader(ans.body), brokerclient.SSELimits{MaxLine: maxMCPAnswer, MaxEvent: maxMCPAnswer, MaxTotal: maxMCPAnswer})
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
