package brokerclient

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Response is an answer of any status whose body the caller reads: a
// streamed model answer, or an error status whose headers (retry-after)
// and body (the upstream's error type) the caller inspects. Close it.
type Response struct {
	Status int
	Header http.Header
	// Body reads the answer as it arrives. Each read waits at most the
	// client's Timeout for bytes, and every read ends with the context
	// given to Open. It is not bounded in size: the caller bounds it.
	Body io.Reader

	close func()
}

// Close ends the call and closes its connection.
func (r *Response) Close() { r.close() }

// Request is a call of any shape Do sends: Method "" is POST and GET
// carries no body; Header adds headers to the fixed ones (Host,
// Authorization, User-Agent, Content-Type), which it cannot replace. The
// session worker uses it for its GET routes and for MCP's session headers.
type Request struct {
	Method string
	Route  string
	Body   []byte
	Header http.Header
}

// Open sends payload to route like Post, with the same headers, but hands
// back the answer of any status with its body unread. Timeout (0 means
// rtsandbox.BrokerClientTimeout) bounds each wait for the broker rather
// than the whole call: the head, then each piece of a streamed body, so a
// long stream that keeps moving is not cut, and a stalled one is. ctx
// bounds the whole call, body included, until Close.
func (c *Client) Open(ctx context.Context, route string, payload []byte) (*Response, error) {
	return c.Do(ctx, Request{Route: route, Body: payload})
}

// Do sends r and hands back its answer as Open does.
func (c *Client) Do(ctx context.Context, r Request) (*Response, error) {
	route := r.Route
	idle := c.timeout()
	dctx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	raw, err := c.dial(dctx)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", route, err)
	}
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	closeAll := func() { stop(); raw.Close() }
	resp, err := exchange(ctx, &idleConn{Conn: raw, idle: idle}, c.withToken(r), 32<<10)
	if err != nil {
		closeAll()
		return nil, err
	}
	return &Response{
		Status: resp.StatusCode, Header: resp.Header,
		Body:  ctxReader{ctx: ctx, r: resp.Body},
		close: func() { resp.Body.Close(); closeAll() },
	}, nil
}

// idleConn gives every read and write its own deadline, idle from now.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}

// ctxReader reports the context's reason instead of the closed
// connection it caused.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = callErr(r.ctx, err)
	}
	return n, err
}
