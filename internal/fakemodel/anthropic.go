package fakemodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// API names the wire dialect of a request, chosen by its path.
type API int

const (
	// OpenAI is chat completions: any path not named below.
	OpenAI API = iota
	// Anthropic is Messages: a path ending in /messages.
	Anthropic
	// AnthropicCountTokens is a path ending in /messages/count_tokens.
	AnthropicCountTokens
)

// apiOf classifies a request path.
func apiOf(path string) API {
	switch {
	case strings.HasSuffix(path, "/messages/count_tokens"):
		return AnthropicCountTokens
	case strings.HasSuffix(path, "/messages"):
		return Anthropic
	}
	return OpenAI
}

// IsAnthropic reports whether the request came on a Messages path.
func (r Request) IsAnthropic() bool { return r.API != OpenAI }

// messagesRequest is the part of a Messages body the stand-in reads.
type messagesRequest struct {
	Model     string            `json:"model"`
	System    json.RawMessage   `json:"system"`
	Messages  []messagesMessage `json:"messages"`
	Tools     []messagesTool    `json:"tools"`
	MaxTokens int               `json:"max_tokens"`
	Stream    bool              `json:"stream"`
}

type messagesMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type messagesTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// messagesBlock is any content block, read leniently: unknown types and
// fields are ignored.
type messagesBlock struct {
	Type      string          `json:"type"`
	Source    *imageSource    `json:"source"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// imageSource is an image block's source.
type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// blockImages are the image blocks among blocks.
func blockImages(blocks []messagesBlock) []Image {
	var out []Image
	for _, b := range blocks {
		if b.Type == "image" && b.Source != nil {
			out = append(out, Image{MIMEType: b.Source.MediaType, Data: b.Source.Data, URL: b.Source.URL})
		}
	}
	return out
}

// decodeMessages reads a Messages body into the chat view that steps and
// the Request helpers read: system becomes the first system message; text
// blocks join into the message's string content; tool_use blocks become
// tool calls whose arguments are the compact input; each tool_result
// becomes a tool message before the rest of its user message.
func decodeMessages(raw []byte) (ChatRequest, error) {
	var in messagesRequest
	if err := json.Unmarshal(raw, &in); err != nil {
		return ChatRequest{}, err
	}
	out := ChatRequest{Model: in.Model, MaxTokens: in.MaxTokens, Stream: in.Stream}
	if len(in.System) > 0 && string(in.System) != "null" {
		text, _, err := blockText(in.System)
		if err != nil {
			return ChatRequest{}, fmt.Errorf("system: %w", err)
		}
		out.Messages = append(out.Messages, textMessage("system", text))
	}
	for i, m := range in.Messages {
		msgs, err := chatMessages(m)
		if err != nil {
			return ChatRequest{}, fmt.Errorf("messages[%d]: %w", i, err)
		}
		out.Messages = append(out.Messages, msgs...)
	}
	for _, t := range in.Tools {
		var tool Tool
		tool.Type = "function"
		tool.Function.Name, tool.Function.Description, tool.Function.Parameters = t.Name, t.Description, t.InputSchema
		out.Tools = append(out.Tools, tool)
	}
	return out, nil
}

func textMessage(role, text string) Message {
	content, _ := json.Marshal(text)
	return Message{Role: role, Content: content}
}

// chatMessages turns one Messages message into chat messages.
func chatMessages(m messagesMessage) ([]Message, error) {
	text, blocks, err := blockText(m.Content)
	if err != nil {
		return nil, err
	}
	var out []Message
	msg := Message{Role: m.Role}
	for _, b := range blocks {
		switch b.Type {
		case "tool_use":
			var args bytes.Buffer
			if err := json.Compact(&args, b.Input); err != nil {
				return nil, fmt.Errorf("tool_use input: %w", err)
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Type: "function", Function: FunctionCall{Name: b.Name, Arguments: args.String()}})
		case "tool_result":
			result, inner, err := blockText(b.Content)
			if err != nil {
				return nil, fmt.Errorf("tool_result content: %w", err)
			}
			tm := textMessage("tool", result)
			tm.ToolCallID = b.ToolUseID
			tm.Images = blockImages(inner)
			out = append(out, tm)
		}
	}
	msg.Images = blockImages(blocks)
	if text != "" || len(msg.ToolCalls) > 0 || len(msg.Images) > 0 || len(out) == 0 {
		if text != "" || len(msg.ToolCalls) == 0 {
			msg.Content = textMessage("", text).Content
		}
		out = append(out, msg)
	}
	return out, nil
}

// blockText reads content that is a string or an array of blocks: the
// joined text of its text blocks, and the blocks.
func blockText(raw json.RawMessage) (string, []messagesBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil, nil
	}
	var blocks []messagesBlock
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return "", nil, err
		}
	}
	var b strings.Builder
	for _, blk := range blocks {
		if blk.Type == "text" {
			b.WriteString(blk.Text)
		}
	}
	return b.String(), blocks, nil
}

// message is a Messages answer, also the message of message_start.
type message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        messagesUsage  `json:"usage"`
}

type contentBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type messagesUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// buildMessage turns a step's response into a Messages answer: the text
// block (when there is text or nothing else), then one tool_use block per
// call. A call's arguments must be a JSON object, since tool_use input is
// one; ids left empty become "toolu_<request index>_<call index>".
func buildMessage(req Request, resp Response) (message, error) {
	m := message{
		ID: fmt.Sprintf("msg_fake_%d", req.Index), Type: "message", Role: "assistant", Model: req.Body.Model,
		Content: []contentBlock{},
	}
	if resp.Usage != nil {
		m.Usage = messagesUsage{InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens}
	}
	if resp.Content != "" || len(resp.ToolCalls) == 0 {
		text := resp.Content
		m.Content = append(m.Content, contentBlock{Type: "text", Text: &text})
	}
	for i, c := range resp.ToolCalls {
		var input bytes.Buffer
		if json.Compact(&input, []byte(c.Function.Arguments)) != nil || !bytes.HasPrefix(input.Bytes(), []byte("{")) {
			return message{}, fmt.Errorf("fakemodel: tool call %d arguments are not a JSON object, as tool_use input must be", i)
		}
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%d_%d", req.Index, i)
		}
		m.Content = append(m.Content, contentBlock{Type: "tool_use", ID: id, Name: c.Function.Name, Input: input.Bytes()})
	}
	stop := "end_turn"
	if len(resp.ToolCalls) > 0 {
		stop = "tool_use"
	}
	m.StopReason = &stop
	return m, nil
}

// anthropicErrorTypes maps statuses to the API's error types.
var anthropicErrorTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
	404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
	500: "api_error", 529: "overloaded_error",
}

// anthropicError is an error body in the Messages API's shape.
func anthropicError(status int, text string) []byte {
	typ, ok := anthropicErrorTypes[status]
	if !ok {
		typ = "api_error"
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": text}})
	return b
}

// countTokens answers count_tokens with a deterministic estimate: a token
// per four bytes of the body, rounded up.
func countTokens(w http.ResponseWriter, req Request) {
	b, _ := json.Marshal(map[string]int{"input_tokens": (len(req.Raw) + 3) / 4})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
