package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// errBrokerRefused marks any non-200 answer (brokerclient.ErrRefused).
var errBrokerRefused = brokerclient.ErrRefused

// broker posts JSON to the host broker over its Unix socket, one call per
// connection, with exactly the headers the broker allows (see
// brokerclient).
type broker struct {
	client brokerclient.Client
	// hello, when set, names the network listener and its token anew for
	// every call (the session worker's loop on a hello file: the host
	// rewrites it when it makes the channel a new broker).
	hello func() (*brokerclient.Network, error)
}

func newBroker(socket string) *broker {
	return &broker{client: brokerclient.Client{Socket: socket}}
}

// newNetworkBroker posts to the broker's network listener instead, with
// the turn's token (Options.Network).
func newNetworkBroker(n *brokerclient.Network) *broker {
	return &broker{client: brokerclient.Client{Network: n}}
}

// close is kept for the agent's lifecycle; every call already closed its
// own connection.
func (b *broker) close() {}

// post sends body as JSON to route and returns the compacted JSON answer.
// Any status other than 200 is errBrokerRefused, a
// *brokerclient.StatusError that keeps the start of a 400's body only.
func (b *broker) post(ctx context.Context, route string, body any) (json.RawMessage, error) {
	payload, err := jsonjs.Marshal(body)
	if err != nil {
		return nil, err
	}
	data, err := b.client.Post(ctx, route, payload)
	switch {
	case errors.Is(err, brokerclient.ErrRefused), errors.Is(err, brokerclient.ErrTooLarge):
		return nil, err
	case err != nil: // no answer at all
		return nil, fmt.Errorf("%w: %w", errBrokerUnreachable, err)
	}
	return compactJSON(data)
}

// open sends body as JSON to route and returns the answer of any status
// with its body unread (brokerclient.Client.Open); the caller closes it.
func (b *broker) open(ctx context.Context, route string, body any) (*brokerclient.Response, error) {
	payload, err := jsonjs.Marshal(body)
	if err != nil {
		return nil, err
	}
	resp, err := b.client.Open(ctx, route, payload)
	if err != nil { // no answer at all
		return nil, fmt.Errorf("%w: %w", errBrokerUnreachable, err)
	}
	return resp, nil
}

// compactJSON requires valid JSON and compacts it, as JSON.stringify of the
// parsed value would print it.
func compactJSON(data []byte) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, errBrokerJSON
	}
	return buf.Bytes(), nil
}

// answer is a whole answer of any status, read within its bound.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// get sends a GET to route and reads the answer (call).
func (b *broker) get(ctx context.Context, route string, timeout time.Duration, maxBody int) (*answer, error) {
	return b.call(ctx, http.MethodGet, route, nil, nil, timeout, maxBody)
}

// call sends body (nil for none) as JSON to route with the extra header
// and reads an answer of any status, at most maxBody bytes of it, within
// timeout (0: ctx alone bounds it). The session worker's routes answer
// statuses the loop acts on (404, 408, 409) and bodies over the sealed 1
// MiB, hence its own bound.
func (b *broker) call(ctx context.Context, method, route string, body any, header http.Header, timeout time.Duration, maxBody int) (*answer, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = jsonjs.Marshal(body); err != nil {
			return nil, err
		}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	client := b.client
	if b.hello != nil {
		n, err := b.hello()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBrokerUnreachable, err)
		}
		client.Network = n
	}
	resp, err := client.Do(ctx, brokerclient.Request{Method: method, Route: route, Body: payload, Header: header})
	if err != nil { // no answer at all
		return nil, fmt.Errorf("%w: %w", errBrokerUnreachable, err)
	}
	defer resp.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxBody)+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", errBrokerUnreachable, err)
	case len(data) > maxBody:
		return nil, brokerclient.ErrTooLarge
	}
	return &answer{status: resp.Status, header: resp.Header, body: data}, nil
}
