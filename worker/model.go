package worker

import (
	"context"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/wire"
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
	complete(ctx context.Context, p *modelPayload) (*answerMessage, error)
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
// streamed: the sealed protocol of docs/protocol.md, "Model calls" as it is, plus, in session
// mode, images as content parts (see request).
type openaiClient struct{ broker *broker }

// chatRequest is a chat-completions body whose messages may carry content
// parts; key order is modelPayload's.
type chatRequest struct {
	Model    string          `json:"model"`
	Messages []any           `json:"messages"`
	Tools    []wire.ChatTool `json:"tools"`
}

// partsMessage is a user message of content parts.
type partsMessage struct {
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

type textPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type imageURLPart struct {
	Type     string   `json:"type"`
	ImageURL imageURL `json:"image_url"`
}

type imageURL struct {
	URL string `json:"url"`
}

// toolImagesText introduces the images of a run of tool results.
const toolImagesText = "[The images the tool results above show.]"

// request is p itself when it holds no images (the sealed shape, byte for
// byte). Otherwise the turn's images become image_url parts (base64 data
// URLs, which the session broker's /model rule admits in user messages
// only) before the text of the last user message, and the images a run of
// tool results showed follow that run as a user message of their own: the
// API takes no images in a tool message.
func (openaiClient) request(p *modelPayload) any {
	if len(p.images) == 0 && len(p.toolImages) == 0 {
		return p
	}
	last := -1
	for i, m := range p.Messages {
		if m.Role == "user" {
			last = i
		}
	}
	req := chatRequest{Model: p.Model, Tools: p.Tools, Messages: make([]any, 0, len(p.Messages)+1)}
	var shown []wire.Image // of the current run of tool messages
	for i, m := range p.Messages {
		if i == last && len(p.images) > 0 {
			req.Messages = append(req.Messages, partsMessage{Role: "user", Content: append(imageParts(p.images), textPart{Type: "text", Text: m.Content})})
		} else {
			req.Messages = append(req.Messages, m)
		}
		if m.Role != "tool" {
			continue
		}
		shown = append(shown, p.toolImages[m.ToolCallID]...)
		if next := i + 1; len(shown) > 0 && (next == len(p.Messages) || p.Messages[next].Role != "tool") {
			req.Messages = append(req.Messages, partsMessage{Role: "user", Content: append([]any{textPart{Type: "text", Text: toolImagesText}}, imageParts(shown)...)})
			shown = nil
		}
	}
	return req
}

// imageParts are images as image_url parts of data URLs.
func imageParts(images []wire.Image) []any {
	parts := make([]any, 0, len(images)+1)
	for _, im := range images {
		parts = append(parts, imageURLPart{Type: "image_url", ImageURL: imageURL{URL: "data:" + im.MIMEType + ";base64," + im.Data}})
	}
	return parts
}

func (openaiClient) maxMessages() int { return rtsandbox.MaxModelMessages }

// complete posts the conversation and reads the answer; a refusal over
// the model's context is errContextOverflow (overflowed).
func (c openaiClient) complete(ctx context.Context, p *modelPayload) (*answerMessage, error) {
	raw, err := c.broker.post(ctx, wire.RouteModel, c.request(p))
	if err != nil {
		return nil, overflowed(err)
	}
	return modelMessage(raw)
}
