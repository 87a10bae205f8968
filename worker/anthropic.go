package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file is the worker's Anthropic Messages client (docs/protocol.md, "Model calls"): it translates the loop's chat-shaped conversation into a
// Messages request that the broker's field-by-field rebuild accepts as it
// is, posts it to RouteAnthropicMessages, and reads the answer, streamed
// (anthropicstream.go) or not, back into the chat shape. It emits only
// what docs/protocol.md, "Model calls" accepts: a string system, user and assistant messages whose
// blocks are text, base64 images (the turn's, and in a tool_result those
// read_attachment showed), tool_use, tool_result and the thinking
// blocks the model itself returned; custom tools with an input_schema; no
// server tools, documents, URL or file sources, tool_choice or sampling
// fields.

// maxAnswerBlocks bounds the content blocks of one answer, as the broker
// bounds a request's (docs/protocol.md, "Model calls").
const maxAnswerBlocks = 256

// maxErrorBody bounds what the client reads of an error answer to learn
// its error type.
const maxErrorBody = brokerclient.MaxErrorBody

// messagesRequest is the Messages body the worker sends; key order is
// the wire order.
type messagesRequest struct {
	Model     string             `json:"model"`
	MaxTokens int                `json:"max_tokens"`
	System    string             `json:"system,omitempty"`
	Messages  []anthropicMessage `json:"messages"`
	Tools     []anthropicTool    `json:"tools,omitempty"`
	Thinking  *anthropicThinking `json:"thinking,omitempty"`
	Stream    bool               `json:"stream,omitempty"`
}

// anthropicMessage is a user or assistant message; Content is a string or
// a []any of the blocks below.
type anthropicMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anthropicThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens"`
}

// imageBlock is a base64 image, as docs/protocol.md, "Model calls" admits it.
type imageBlock struct {
	Type   string      `json:"type"`
	Source imageSource `json:"source"`
}

type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type toolResultBlock struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   any    `json:"content"` // a string, or text and image blocks
}

type thinkingBlock struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

type redactedThinkingBlock struct {
	Type string `json:"type"`
	Data string `json:"data"`
}

// anthropicClient is one turn's Messages client.
type anthropicClient struct {
	broker *broker
	stream bool // ask for a streamed answer (Turn.Stream)
	budget int  // extended-thinking budget in tokens; 0 asks for none
	retry  retryPolicy
	// retried reports each retry (modelSettings.retried); nil reports none.
	retried func(status int, wait time.Duration)

	// The thinking blocks of the last answer that called tools: the API
	// wants them back, unchanged, in front of that assistant message's
	// tool_use blocks. The loop keeps chat messages, which have no place
	// for them, so they wait in pending until the repaired assistant
	// message is in the conversation, and are then kept under its first
	// tool-call id (ids are unique within a turn). Only the latest is
	// kept: the API needs no older ones.
	pending    []any
	hasPending bool
	thinkingID string
	thinking   []any
}

func newAnthropicClient(s modelSettings, b *broker) *anthropicClient {
	budget, _ := rtsandbox.ThinkingBudget(s.thinking)
	return &anthropicClient{broker: b, stream: s.stream, budget: budget, retry: defaultRetry, retried: s.retried}
}

// request translates the conversation: the system message becomes
// system; each run of tool messages becomes one user message of
// tool_result blocks; an assistant message that called tools becomes its
// thinking blocks, its text (when not empty) and one tool_use per call,
// whose input is the arguments object (omittedArguments when they are
// not one). Empty messages are left out, and so is history before the
// first user message, since the API wants a conversation to start with
// the user.
func (c *anthropicClient) maxMessages() int { return rtsandbox.MaxAnthropicModelMessages }

func (c *anthropicClient) request(p *modelPayload) any {
	c.adopt(p)
	req := &messagesRequest{Model: p.Model, MaxTokens: rtsandbox.DefaultMaxTokens + c.budget, Stream: c.stream}
	if c.budget > 0 {
		req.Thinking = &anthropicThinking{Type: "enabled", BudgetTokens: c.budget}
	}
	for _, t := range p.Tools {
		req.Tools = append(req.Tools, anthropicTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: t.Function.Parameters})
	}
	withImages := -1
	if len(p.images) > 0 {
		for i, m := range p.Messages {
			if m.Role == "user" {
				withImages = i
			}
		}
	}
	for i, m := range p.Messages {
		switch m.Role {
		case "system":
			req.System = m.Content
		case "tool":
			var content any = m.Content
			if images := p.toolImages[m.ToolCallID]; len(images) > 0 {
				content = append([]any{textBlock{Type: "text", Text: m.Content}}, imageContent(images, "")...)
			}
			req.Messages = appendToolResult(req.Messages, toolResultBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: content})
		case "assistant":
			if len(req.Messages) > 0 {
				req.Messages = appendContent(req.Messages, "assistant", c.assistantContent(m))
			}
		default:
			var content any = m.Content
			if i == withImages {
				content = imageContent(p.images, m.Content)
			}
			req.Messages = appendContent(req.Messages, "user", content)
		}
	}
	return req
}

// imageContent is a user message of images, then its text.
func imageContent(images []wire.Image, text string) []any {
	blocks := make([]any, 0, len(images)+1)
	for _, im := range images {
		blocks = append(blocks, imageBlock{Type: "image", Source: imageSource{Type: "base64", MediaType: im.MIMEType, Data: im.Data}})
	}
	if text != "" {
		blocks = append(blocks, textBlock{Type: "text", Text: text})
	}
	return blocks
}

// adopt files the pending thinking blocks under the last assistant
// message that called tools, once the loop has added it.
func (c *anthropicClient) adopt(p *modelPayload) {
	if !c.hasPending {
		return
	}
	for i := len(p.Messages) - 1; i >= 0; i-- {
		if m := p.Messages[i]; m.Role == "assistant" && len(m.ToolCalls) > 0 {
			c.thinkingID, c.thinking = m.ToolCalls[0].ID, c.pending
			c.pending, c.hasPending = nil, false
			return
		}
	}
}

// assistantContent is the content of an assistant message: its text, or
// blocks when it called tools.
func (c *anthropicClient) assistantContent(m message) any {
	if len(m.ToolCalls) == 0 {
		return m.Content
	}
	var blocks []any
	if m.ToolCalls[0].ID == c.thinkingID {
		blocks = append(blocks, c.thinking...)
	}
	if m.Content != "" {
		blocks = append(blocks, textBlock{Type: "text", Text: m.Content})
	}
	for _, call := range m.ToolCalls {
		input := json.RawMessage(call.Function.Arguments)
		if _, ok := object(input); !ok {
			input = json.RawMessage(omittedArguments)
		}
		blocks = append(blocks, toolUseBlock{Type: "tool_use", ID: call.ID, Name: call.Function.Name, Input: compact(input)})
	}
	return blocks
}

// appendContent adds a message unless its content is empty, which the API
// refuses.
func appendContent(msgs []anthropicMessage, role string, content any) []anthropicMessage {
	switch c := content.(type) {
	case string:
		if c == "" {
			return msgs
		}
	case []any:
		if len(c) == 0 {
			return msgs
		}
	}
	return append(msgs, anthropicMessage{Role: role, Content: content})
}

// appendToolResult adds b to the user message of tool results that ends
// msgs, or starts one.
func appendToolResult(msgs []anthropicMessage, b toolResultBlock) []anthropicMessage {
	if n := len(msgs); n > 0 && msgs[n-1].Role == "user" {
		if blocks, ok := msgs[n-1].Content.([]any); ok {
			msgs[n-1].Content = append(blocks, b)
			return msgs
		}
	}
	return append(msgs, anthropicMessage{Role: "user", Content: []any{b}})
}

// complete posts the conversation and reads the answer, retrying an
// upstream rate limit (429) or overload (529) as the retry policy allows.
func (c *anthropicClient) complete(ctx context.Context, p *modelPayload) (*answerMessage, error) {
	body, err := jsonjs.Marshal(c.request(p))
	if err != nil {
		return nil, err
	}
	var waited retryState
	for {
		resp, err := c.broker.open(ctx, wire.RouteAnthropicMessages, json.RawMessage(body))
		if err != nil {
			return nil, err
		}
		ans, err := c.read(resp)
		var retry *retryable
		if !errors.As(err, &retry) {
			return c.message(ans, err)
		}
		before := waited.waited
		if err := c.retry.wait(ctx, &waited, retry.after); err != nil {
			return nil, errors.Join(err, retry.status)
		}
		if c.retried != nil {
			c.retried(retry.status.Status, waited.waited-before)
		}
	}
}

// read reads one answer and closes it: the blocks of a 200 answer, a
// *retryable for a 429 or 529 worth retrying, or the refusal (marked
// errContextOverflow when it is one).
func (c *anthropicClient) read(resp *brokerclient.Response) ([]answerBlock, error) {
	defer resp.Close()
	switch {
	case resp.Status == http.StatusOK && isEventStream(resp.Header):
		return readStream(resp.Body)
	case resp.Status == http.StatusOK:
		return readMessage(resp.Body)
	case resp.Status == http.StatusTooManyRequests || resp.Status == statusOverloaded:
		return nil, retryableAnswer(resp)
	}
	return nil, overflowed(brokerclient.NewStatusError(resp.Status, resp.Body))
}

// message turns the blocks into the loop's chat message and keeps the
// thinking blocks of an answer that called tools.
func (c *anthropicClient) message(blocks []answerBlock, err error) (*answerMessage, error) {
	if err != nil {
		return nil, err
	}
	msg, thinking, err := chatMessage(blocks)
	if err != nil {
		return nil, err
	}
	if msg.ToolCalls != nil {
		c.pending, c.hasPending = thinking, true
	}
	return msg, nil
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// answerBlock is one content block of an answer, streamed or not. Text is
// a text block's text or a thinking block's thinking; Input is a
// tool_use's input JSON as the model wrote it.
type answerBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	Data      string          `json:"data"`
}

// size counts the bytes the block holds, against MaxBrokerResponse.
func (b *answerBlock) size() int {
	return len(b.Text) + len(b.Input) + len(b.Thinking) + len(b.Signature) + len(b.Data) + len(b.ID) + len(b.Name)
}

// readMessage reads a whole Messages answer of at most MaxBrokerResponse
// bytes: {"type":"message","content":[blocks]}.
func readMessage(r io.Reader) ([]answerBlock, error) {
	data, err := io.ReadAll(io.LimitReader(r, rtsandbox.MaxBrokerResponse+1))
	switch {
	case err != nil:
		return nil, errors.Join(errBrokerUnreachable, err)
	case len(data) > rtsandbox.MaxBrokerResponse:
		return nil, brokerclient.ErrTooLarge
	}
	var m struct {
		Type    string        `json:"type"`
		Content []answerBlock `json:"content"`
	}
	if json.Unmarshal(data, &m) != nil || m.Type != "message" || len(m.Content) > maxAnswerBlocks {
		return nil, errModelResponse
	}
	return m.Content, nil
}

// chatAnswer is an answer in the chat-completions message shape the loop
// reads; Content is null when the answer has no text block.
type chatAnswer struct {
	Content   *string         `json:"content"`
	ToolCalls []wire.ToolCall `json:"tool_calls,omitempty"`
}

// chatMessage joins the text blocks into content, makes each tool_use a
// tool call whose arguments are its input as compact JSON text (kept as
// written when it is not JSON, so the loop refuses the call), and returns
// the thinking blocks rebuilt for the replay. Other block types are
// dropped: the worker never asks for them.
func chatMessage(blocks []answerBlock) (*answerMessage, []any, error) {
	var ans chatAnswer
	var thinking []any
	for _, b := range blocks {
		switch b.Type {
		case "text":
			text := b.Text
			if ans.Content != nil {
				text = *ans.Content + text
			}
			ans.Content = &text
		case "tool_use":
			ans.ToolCalls = append(ans.ToolCalls, wire.ToolCall{
				ID: b.ID, Type: wire.FunctionType,
				Function: wire.FunctionCall{Name: b.Name, Arguments: string(compact(b.Input))},
			})
		case "thinking":
			thinking = append(thinking, thinkingBlock{Type: "thinking", Thinking: b.Thinking, Signature: b.Signature})
		case "redacted_thinking":
			thinking = append(thinking, redactedThinkingBlock{Type: "redacted_thinking", Data: b.Data})
		}
	}
	raw, err := jsonjs.Marshal(ans)
	if err != nil {
		return nil, nil, errModelResponse
	}
	var msg answerMessage
	if wire.Fill(raw, &msg) != nil {
		return nil, nil, errModelResponse
	}
	return &msg, thinking, nil
}
