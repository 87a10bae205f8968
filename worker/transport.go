package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsonjs"
)

const (
	brokerTimeout     = 65 * time.Second // a little over the broker's 60 s per call
	maxBrokerResponse = 1 << 20
)

var errBrokerRefused = errors.New("broker refused")

// broker posts JSON to the host broker over its Unix socket.
//
// The broker refuses any header outside a short allow-list, so the client
// sends exactly Host, Content-Type, Content-Length and Authorization:
//   - no Connection header (forbidden), so neither req.Close nor
//     DisableKeepAlives is set; idle connections are closed after every
//     call instead;
//   - a bytes.Reader body, so Content-Length is known and Go never falls
//     back to chunked Transfer-Encoding (also forbidden);
//   - an explicit empty User-Agent and DisableCompression, so Go adds
//     neither its default User-Agent nor Accept-Encoding: gzip.
type broker struct {
	transport *http.Transport
	client    *http.Client
}

func newBroker(socket string) *broker {
	var d net.Dialer
	t := &http.Transport{
		Proxy: nil, // the container has no network; never consult env proxies
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		DisableCompression: true,
	}
	return &broker{transport: t, client: &http.Client{Transport: t, Timeout: brokerTimeout}}
}

// close drops idle connections so no transport goroutine outlives the turn.
func (b *broker) close() { b.transport.CloseIdleConnections() }

// post sends body as JSON to route and returns the compacted JSON answer.
// Any status other than 200 is errBrokerRefused; the body is then not read.
func (b *broker) post(ctx context.Context, route string, body any) (json.RawMessage, error) {
	payload, err := jsonjs.Marshal(body)
	if err != nil {
		return nil, err
	}
	defer b.close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rtsandbox.BrokerHost+route, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Host = rtsandbox.BrokerHost
	req.Header = http.Header{
		"Content-Type":  {"application/json"},
		"Authorization": {"Bearer " + rtsandbox.DummyKey},
		"User-Agent":    {""},
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", route, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s: status %d", errBrokerRefused, route, resp.StatusCode)
	}
	return readBrokerJSON(resp.Body)
}

// readBrokerJSON reads at most 1 MiB and requires valid JSON. The answer is
// compacted, as JSON.stringify of the parsed value would print it.
func readBrokerJSON(r io.Reader) (json.RawMessage, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxBrokerResponse+1))
	if err != nil {
		return nil, fmt.Errorf("read broker response: %w", err)
	}
	if len(data) > maxBrokerResponse {
		return nil, errors.New("broker response exceeds 1 MiB")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return nil, errors.New("broker returned no JSON")
	}
	return buf.Bytes(), nil
}
