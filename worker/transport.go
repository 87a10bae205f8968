package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
}

func newBroker(socket string) *broker {
	return &broker{client: brokerclient.Client{Socket: socket}}
}

// close is kept for the agent's lifecycle; every call already closed its
// own connection.
func (b *broker) close() {}

// post sends body as JSON to route and returns the compacted JSON answer.
// Any status other than 200 is errBrokerRefused; the body is then not read.
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
