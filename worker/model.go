package worker

import (
	"context"
	"encoding/json"

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
}

// newModelClient picks the client of the turn's model API.
func newModelClient(turn rtsandbox.Turn, b *broker) modelClient {
	if turn.ModelAPI == rtsandbox.ModelAPIAnthropic {
		return newAnthropicClient(turn, b)
	}
	return openaiClient{broker: b}
}

// openaiClient posts chat completions to the broker's /model route, never
// streamed: the sealed protocol of spec §4.4 as it is.
type openaiClient struct{ broker *broker }

func (openaiClient) request(p *modelPayload) any { return p }

func (c openaiClient) complete(ctx context.Context, p *modelPayload) (map[string]json.RawMessage, error) {
	raw, err := c.broker.post(ctx, rtsandbox.RouteModel, p)
	if err != nil {
		return nil, err
	}
	return modelMessage(raw)
}
