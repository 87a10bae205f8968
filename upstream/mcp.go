package upstream

// MCP over Streamable HTTP, on the hardened client's rules.
//
// The protocol (initialize, the Mcp-Session-Id, JSON and SSE answers) is
// the official go-sdk's; this file only fences it: every HTTP request the
// SDK makes goes through mcpTransport, which sends it only to the one
// Endpoint, rebuilds its headers from a short allow-list, adds the
// credential, refuses redirects (through the http.Client) and bounds every
// answer body. The credential sits in a keyBox only while a call or the
// closing DELETE runs, so a session never holds it between calls.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// MCPProtocolVersion is the MCP revision the host asks for: the newest
// with initialize and a server-kept session (2025-11-25). Servers that
// speak only an older one negotiate down in the initialize answer.
const MCPProtocolVersion = "2025-11-25"

// Bounds of the MCP client. maxMCPWire bounds one HTTP answer as read
// (JSON, or an SSE stream with its framing and any notifications before
// the result); the JSON-RPC answer built from it is again at most
// MaxResponseBytes. MaxMCPTools bounds a tools/list at startup.
const (
	maxMCPWire  = MaxResponseBytes + 64<<10
	MaxMCPTools = 1000
)

// MCP failure classes; each wraps rtsandbox.ErrUpstream, and their texts
// are content-free.
var (
	ErrMCPSession = fmt.Errorf("%w: MCP session failed", rtsandbox.ErrUpstream)
	ErrMCPClosed  = fmt.Errorf("%w: MCP session closed", rtsandbox.ErrUpstream)
	ErrMCPTools   = fmt.Errorf("%w: MCP tool list refused", rtsandbox.ErrUpstream)
	errMCPURL     = fmt.Errorf("%w: MCP request to another URL", rtsandbox.ErrUpstream)
)

// MCPServer is one operator-fixed MCP server reached over Streamable
// HTTP. It holds no session and no credential; Session and ListTools make
// them.
type MCPServer struct {
	url    Endpoint
	hc     *http.Client
	client *mcp.Client
}

// MCP returns the MCP server at url, reached on c's transport.
func (c *Client) MCP(url Endpoint) *MCPServer {
	return &MCPServer{
		url: url,
		hc: &http.Client{
			Transport:     &mcpTransport{base: c.hc.Transport, url: url.String()},
			CheckRedirect: c.hc.CheckRedirect,
		},
		client: mcp.NewClient(&mcp.Implementation{Name: "rtsandbox", Version: "1"}, nil),
	}
}

// MCPSession is one logical session with an MCP server: it initialises on
// first use, keeps the server's session id, and initialises once more when
// the server answers a call with 404 for an expired session (the call had
// not run, so repeating it is safe). Calls on one session run one at a
// time. The session id never leaves it.
type MCPSession struct {
	srv *MCPServer
	box keyBox

	mu     sync.Mutex
	cs     *mcp.ClientSession
	closed bool
}

// Session returns a new session on s; nothing is sent until the first call.
func (s *MCPServer) Session() *MCPSession { return &MCPSession{srv: s} }

// CallTool makes one tools/call of tool with args (a JSON object, sent as
// it is) and returns the JSON-RPC answer the guest sees:
// {"jsonrpc":"2.0","id":1,"result":…} for the tool's result, or
// {"jsonrpc":"2.0","id":1,"error":{"code","message"}} when the server
// answered the call with a JSON-RPC error in a 2xx answer. The answer is at
// most MaxResponseBytes and is refused (ErrReflect) when it echoes key or
// the session id. key goes to this server only, as Authorization: Bearer.
func (s *MCPSession) CallTool(ctx context.Context, key rtsandbox.Secret, tool string, args json.RawMessage) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.box.set(key)
	defer s.box.set("")
	ctx = withBox(ctx, &s.box)
	for attempt := 1; ; attempt++ {
		cs, err := s.connect(ctx)
		if err != nil {
			return nil, err
		}
		s.box.resetSeen()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil && s.box.sessionGone() && attempt == 1 {
			s.drop()
			continue
		}
		out, err := s.answer(ctx, res, err)
		if err != nil {
			return nil, err
		}
		return out, s.checkReflect(out, key, cs.ID())
	}
}

// connect returns the live session, initialising one when there is none.
func (s *MCPSession) connect(ctx context.Context) (*mcp.ClientSession, error) {
	if s.closed {
		return nil, ErrMCPClosed
	}
	if s.cs != nil {
		return s.cs, nil
	}
	t := &mcp.StreamableClientTransport{
		Endpoint:   s.srv.url.String(),
		HTTPClient: s.srv.hc,
		// A broken stream fails the call: the caller's deadline, not
		// reconnect loops, bounds it.
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
		MaxEventSize:         maxMCPWire,
	}
	cs, err := s.srv.client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: MCPProtocolVersion})
	if err != nil {
		return nil, s.failure(ctx, err)
	}
	s.cs = cs
	return cs, nil
}

// drop closes and forgets the session (the SDK sends no DELETE for one the
// server has expired).
func (s *MCPSession) drop() {
	if s.cs != nil {
		_ = s.cs.Close()
		s.cs = nil
	}
}

// answer builds the guest's JSON-RPC answer from the SDK's outcome.
func (s *MCPSession) answer(ctx context.Context, res *mcp.CallToolResult, err error) ([]byte, error) {
	var werr *jsonrpc.Error
	switch {
	case err == nil:
		result, err := json.Marshal(res)
		if err != nil {
			return nil, fmt.Errorf("%w: cannot encode the tool result", ErrMCPSession)
		}
		return rpcAnswer(mcpAnswer{JSONRPC: wire.MCPJSONRPC, ID: 1, Result: result})
	case errors.As(err, &werr) && s.box.allOK():
		return rpcAnswer(mcpAnswer{JSONRPC: wire.MCPJSONRPC, ID: 1,
			Error: &mcpError{Code: werr.Code, Message: werr.Message}})
	}
	// A session that failed (refused, expired, broken stream, deadline) is
	// not used again: the next call initialises a fresh one.
	err = s.failure(ctx, err)
	s.drop()
	return nil, err
}

// failure classifies an SDK error; its text (which may quote the server)
// stays out of the returned error.
func (s *MCPSession) failure(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ErrCanceled
	case s.box.overflowed():
		return ErrTooLarge
	case errors.Is(err, ErrRedirect):
		return ErrRedirect
	case !s.box.allOK():
		return statusError(s.box.firstStatus())
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return ErrNetwork
	}
	return ErrMCPSession
}

// checkReflect refuses an answer that echoes the credential or the
// session id (which is the host's, never the guest's).
func (s *MCPSession) checkReflect(out []byte, key rtsandbox.Secret, sessionID string) error {
	if err := CheckJSON(out, key.Reveal()); err != nil {
		return err
	}
	return CheckJSON(out, sessionID)
}

// Close ends the session: when one was made, a DELETE carrying the
// credential key returns (key is called only then; nil sends none). Later
// calls fail with ErrMCPClosed.
func (s *MCPSession) Close(key func() rtsandbox.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cs == nil {
		return
	}
	if key != nil {
		s.box.set(key())
	}
	defer s.box.set("")
	_ = s.cs.Close()
	s.cs = nil
}

// mcpAnswer is the JSON-RPC answer the broker returns, in this key order.
type mcpAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      int             `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *mcpError       `json:"error,omitempty"`
}

type mcpError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func rpcAnswer(a mcpAnswer) ([]byte, error) {
	out, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot encode the answer", ErrMCPSession)
	}
	if len(out) > MaxResponseBytes {
		return nil, ErrTooLarge
	}
	return out, nil
}

// ListTools opens a session with key, lists the server's tools (at most
// MaxMCPTools) and closes it. Each tool's Parameters is its inputSchema as
// JSON, still to be checked by the caller.
func (s *MCPServer) ListTools(ctx context.Context, key rtsandbox.Secret) ([]rtsandbox.ToolSpec, error) {
	sess := s.Session()
	defer sess.Close(func() rtsandbox.Secret { return key })
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.box.set(key)
	defer sess.box.set("")
	ctx = withBox(ctx, &sess.box)
	cs, err := sess.connect(ctx)
	if err != nil {
		return nil, err
	}
	var out []rtsandbox.ToolSpec
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, sess.failure(ctx, err)
		}
		if len(out) == MaxMCPTools {
			return nil, fmt.Errorf("%w: more than %d tools", ErrMCPTools, MaxMCPTools)
		}
		params, err := json.Marshal(tool.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("%w: tool %q has no usable inputSchema", ErrMCPTools, tool.Name)
		}
		out = append(out, rtsandbox.ToolSpec{Name: tool.Name, Description: tool.Description, Parameters: params})
	}
	return out, nil
}

// keyBox carries the credential to mcpTransport for the length of one
// operation, and what the transport saw of the answers.
type keyBox struct {
	mu  sync.Mutex
	key rtsandbox.Secret
	// gone: a request with a session id got 404; notOK: some answer was
	// not 2xx, status the first such; over: some answer passed maxMCPWire.
	gone, notOK, over bool
	status            int
}

func (b *keyBox) set(key rtsandbox.Secret) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.key = key
}

func (b *keyBox) get() rtsandbox.Secret {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.key
}

func (b *keyBox) resetSeen() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gone, b.notOK, b.over, b.status = false, false, false, 0
}

func (b *keyBox) saw(withSession bool, status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gone = b.gone || (withSession && status == http.StatusNotFound)
	if !b.notOK && (status < 200 || status > 299) {
		b.notOK, b.status = true, status
	}
}

// firstStatus is the first status that was not 2xx.
func (b *keyBox) firstStatus() int { b.mu.Lock(); defer b.mu.Unlock(); return b.status }

func (b *keyBox) overflow() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.over = true
}

func (b *keyBox) sessionGone() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.gone }
func (b *keyBox) allOK() bool       { b.mu.Lock(); defer b.mu.Unlock(); return !b.notOK }
func (b *keyBox) overflowed() bool  { b.mu.Lock(); defer b.mu.Unlock(); return b.over }

type boxKey struct{}

func withBox(ctx context.Context, b *keyBox) context.Context {
	return context.WithValue(ctx, boxKey{}, b)
}

// mcpTransport fences the SDK's requests: the one URL, headers rebuilt
// from an allow-list plus the credential, bounded bodies.
type mcpTransport struct {
	base http.RoundTripper
	url  string
}

// mcpHeaders are the SDK's request headers that are passed on.
var mcpHeaders = []string{"Content-Type", "Accept", "Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-Id"}

func (t *mcpTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		defer r.Body.Close()
	}
	if r.URL.String() != t.url {
		return nil, errMCPURL
	}
	box, _ := r.Context().Value(boxKey{}).(*keyBox)
	out := r.Clone(r.Context())
	// An empty User-Agent stops net/http from adding its own.
	out.Header = http.Header{"User-Agent": {""}, "Accept-Encoding": {"identity"}}
	for _, k := range mcpHeaders {
		if v := r.Header.Get(k); v != "" {
			out.Header.Set(k, v)
		}
	}
	if box != nil {
		if key := box.get(); key != "" {
			out.Header.Set("Authorization", "Bearer "+key.Reveal())
		}
	}
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if box != nil {
		box.saw(out.Header.Get("Mcp-Session-Id") != "", resp.StatusCode)
	}
	resp.Body = &boundedBody{rc: resp.Body, left: maxMCPWire, box: box}
	return resp, nil
}

// boundedBody fails a read past its bound.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
	box  *keyBox
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.box != nil {
			b.box.overflow()
		}
		return 0, ErrTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		if b.box != nil {
			b.box.overflow()
		}
		return 0, ErrTooLarge
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
