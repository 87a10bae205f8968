package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rtsandbox/rtsandbox"
)

// modelClient is one model API as the agent loop sees it. The loop keeps
// its conversation in the chat-completions shape (modelPayload) and reads
// every answer as a chat-completions message object ({content,
// tool_calls}), whatever the API: the tools, MCP, memory, history and
// context budget stay one code path, and a client only translates.
type modelClient interface {
	// request is the body the conversation p becomes on the wire;
	// fitContext measures it against maxPayload.
	request(p *modelPayload) any
	// complete sends p and returns the assistant message.
	complete(ctx context.Context, p *modelPayload) (map[string]json.RawMessage, error)
	// maxMessages bounds len(p.Messages) as the broker's rule for the
	// API does.
	maxMessages() int
}

// modelSettings are what picks and shapes a turn's model client: the API
// (rtsandbox.ModelAPI*; "" is openai), whether to ask for a streamed
// answer, and the host-judged thinking level ("" asks for no thinking).
// The sealed worker reads them from its turn, the session worker from its
// profile and each turn's level.
type modelSettings struct {
	api      string
	stream   bool
	thinking string
	// retried reports a model call retried after an upstream 429 or 529
	// and the wait before it; nil reports nothing (the sealed worker).
	retried func(status int, wait time.Duration)
}

// newModelClient picks the client of the model API.
func newModelClient(s modelSettings, b *broker) modelClient {
	if s.api == rtsandbox.ModelAPIAnthropic {
		return newAnthropicClient(s, b)
	}
	return openaiClient{broker: b}
}

// openaiClient posts chat completions to the broker's /model route, never
// streamed: the sealed protocol of spec §4.4 as it is.
type openaiClient struct{ broker *broker }

func (openaiClient) request(p *modelPayload) any { return p }

func (openaiClient) maxMessages() int { return rtsandbox.MaxModelMessages }

func (c openaiClient) complete(ctx context.Context, p *modelPayload) (map[string]json.RawMessage, error) {
	raw, err := c.broker.post(ctx, rtsandbox.RouteModel, p)
	if err != nil {
		return nil, err
	}
	return modelMessage(raw)
}
