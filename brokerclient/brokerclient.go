// Package brokerclient is the worker side of the broker protocol: one
// HTTP/1.1 POST per connection over the broker's Unix socket, carrying
// exactly the headers the broker allows (Host: broker, Content-Type,
// Content-Length and the dummy bearer) and nothing else: no Connection,
// Transfer-Encoding, User-Agent or Accept-Encoding header, each of which
// the broker refuses or does not need.
//
// It writes the request on a fresh connection and reads the response with
// net/http's own wire code (Request.Write, ReadResponse) rather than going
// through http.Transport: the broker closes every connection after one
// response anyway, and a Transport would spend goroutines and allocations
// on connection management that cannot be reused. In a container limited
// to 64 PIDs, fewer goroutines also matter. It imports only the standard
// library and the root package, so the sealed worker may use it.
//
// It also holds the bounded server-sent-events parser (SSEParser,
// SSEReader) that the worker and the host share; see sse.go.
package brokerclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
)

// ErrRefused marks any answer whose status is not 200; StatusError says
// which.
var ErrRefused = errors.New("broker refused")

// ErrTooLarge marks an answer over rtsandbox.MaxBrokerResponse.
var ErrTooLarge = errors.New("broker answer exceeds 1 MiB")

// MaxErrorBody bounds what a StatusError keeps of a 400 answer's body.
const MaxErrorBody = 64 << 10

// StatusError is a refusal with its status and, for a 400 only, the start
// of its body, which says why the request was refused (a model's "prompt
// is too long"); other bodies are not read. Body is untrusted text, the
// upstream's or the broker's, and never part of Error.
type StatusError struct {
	Status int
	Body   []byte
}

// NewStatusError is the refusal of an answer with status whose body is
// body: for a 400, at most MaxErrorBody bytes of the body are kept (a
// read that fails keeps what it read; the refusal stands either way).
func NewStatusError(status int, body io.Reader) *StatusError {
	e := &StatusError{Status: status}
	if status == http.StatusBadRequest {
		e.Body, _ = io.ReadAll(io.LimitReader(body, MaxErrorBody))
	}
	return e
}

func (e *StatusError) Error() string { return fmt.Sprintf("broker refused: status %d", e.Status) }

// Unwrap makes errors.Is(err, ErrRefused) hold.
func (e *StatusError) Unwrap() error { return ErrRefused }

// Client posts to the broker listening on Socket, or, when Network is
// set, on the broker's network listener with the turn's token.
type Client struct {
	Socket  string
	Network *Network
	Timeout time.Duration // 0 means rtsandbox.BrokerClientTimeout
}

// Network is the broker's network listener as a worker reaches it: its
// address (host:port, an IP address: a worker resolves no names), the
// turn's token, sent on every request in wire.BrokerTokenHeader, and the
// TLS configuration when the listener speaks TLS (nil: plain TCP).
type Network struct {
	Addr  string
	Token string
	TLS   *tls.Config
}

// dial connects to the broker: its socket, or its network listener.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	if c.Network == nil {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.Socket)
	}
	if c.Network.TLS != nil {
		d := tls.Dialer{Config: c.Network.TLS}
		return d.DialContext(ctx, "tcp", c.Network.Addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", c.Network.Addr)
}

// withToken adds the network token to r's headers.
func (c *Client) withToken(r Request) Request {
	if c.Network == nil {
		return r
	}
	h := r.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set(wire.BrokerTokenHeader, c.Network.Token)
	r.Header = h
	return r
}

// Post sends payload (JSON) to route and returns the body of a 200 answer;
// any other answer is a *StatusError (NewStatusError).
func (c *Client) Post(ctx context.Context, route string, payload []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", route, err)
	}
	defer conn.Close()
	// The context bounds every read and write: its end closes the
	// connection, which fails whatever is blocked on it.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	// A large reader: answers run to a megabyte and arrive in big writes.
	resp, err := exchange(ctx, conn, c.withToken(Request{Route: route, Body: payload}), 64<<10)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("broker %s: %w", route, NewStatusError(resp.StatusCode, resp.Body))
	}
	return readBody(ctx, resp)
}

func (c *Client) timeout() time.Duration {
	if c.Timeout == 0 {
		return rtsandbox.BrokerClientTimeout
	}
	return c.Timeout
}

// exchange writes the request on conn and reads the answer's head through
// a reader of bufSize bytes.
func exchange(ctx context.Context, conn net.Conn, r Request, bufSize int) (*http.Response, error) {
	req, err := newRequest(r)
	if err != nil {
		return nil, err
	}
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("broker %s: %w", r.Route, callErr(ctx, err))
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, bufSize), req)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", r.Route, callErr(ctx, err))
	}
	return resp, nil
}

// newRequest builds the request with exactly the allowed headers, plus
// r.Header's. An explicit empty User-Agent stops Request.Write from adding
// Go's; the bytes.Reader body gives a Content-Length, so no chunked
// encoding. A GET carries no body, so no Content-Type either.
func newRequest(r Request) (*http.Request, error) {
	method, body := r.Method, io.Reader(bytes.NewReader(r.Body))
	if method == "" {
		method = http.MethodPost
	}
	if method == http.MethodGet {
		body = nil
	}
	req, err := http.NewRequest(method, "http://"+wire.BrokerHost+r.Route, body)
	if err != nil {
		return nil, err
	}
	req.Host = wire.BrokerHost
	req.Header = http.Header{
		"Authorization": {"Bearer " + wire.DummyKey},
		"User-Agent":    {""},
	}
	if body != nil {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	for name, vals := range r.Header {
		if _, fixed := req.Header[http.CanonicalHeaderKey(name)]; !fixed && name != "Host" {
			req.Header[http.CanonicalHeaderKey(name)] = vals
		}
	}
	return req, nil
}

func readBody(ctx context.Context, resp *http.Response) ([]byte, error) {
	if resp.ContentLength > rtsandbox.MaxBrokerResponse {
		return nil, ErrTooLarge
	}
	if resp.ContentLength >= 0 { // the broker always declares it
		data := make([]byte, resp.ContentLength)
		if _, err := io.ReadFull(resp.Body, data); err != nil {
			return nil, callErr(ctx, err)
		}
		return data, nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, rtsandbox.MaxBrokerResponse+1))
	if err != nil {
		return nil, callErr(ctx, err)
	}
	if len(data) > rtsandbox.MaxBrokerResponse {
		return nil, ErrTooLarge
	}
	return data, nil
}

// callErr prefers the context's reason over the closed connection it
// caused.
func callErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
