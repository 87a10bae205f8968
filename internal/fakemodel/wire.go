package fakemodel

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/rtsandbox/rtsandbox/wire"
)

// Request is one received request.
type Request struct {
	Index  int // 0-based arrival order
	Method string
	Path   string
	API    API // the dialect, from the path
	Header http.Header
	Raw    []byte // body as received
	// Body is the decoded body, zero when DecodeErr is set. A Messages
	// body is read into the same chat view (see decodeMessages), so that
	// steps and helpers serve both dialects; Raw keeps it as sent.
	Body      ChatRequest
	DecodeErr error
}

func (r Request) clone() Request {
	r.Header = r.Header.Clone()
	r.Raw = slices.Clone(r.Raw)
	r.Body.Messages = slices.Clone(r.Body.Messages)
	r.Body.Tools = slices.Clone(r.Body.Tools)
	return r
}

// ChatRequest is the part of a chat-completions body the stand-in reads.
// Other fields stay in Request.Raw.
type ChatRequest struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	Tools         []Tool         `json:"tools,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
}

// StreamOptions are the chat-completions stream options the stand-in
// honours.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is one chat message. Content is kept raw because it may be a
// string, null, or (in session mode) an array of parts; Text reads it.
// Images are the image parts it carried, in either dialect: a chat
// message's image_url parts with data URLs, a Messages user message's
// image blocks, and the image blocks of a tool_result (on its tool
// message).
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Images     []Image         `json:"-"`
}

// Image is one image part as the model received it: its media type and
// base64 data (a data URL's type and data in chat completions; a base64
// source's media_type and data in Messages). URL is set instead for a
// chat image part whose url is not a base64 data URL.
type Image struct {
	MIMEType string
	Data     string
	URL      string
}

// Text is the content when it is a JSON string, else the joined text of
// its text parts, else "".
func (m Message) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []chatPart
	if json.Unmarshal(m.Content, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// chatPart is one content part of a chat message, read leniently.
type chatPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// chatImages reads the image_url parts of a chat message's content.
func chatImages(content json.RawMessage) []Image {
	var parts []chatPart
	if len(content) == 0 || content[0] != '[' || json.Unmarshal(content, &parts) != nil {
		return nil
	}
	var out []Image
	for _, p := range parts {
		if p.Type != "image_url" {
			continue
		}
		head, data, ok := strings.Cut(p.ImageURL.URL, ",")
		mime, isB64 := strings.CutSuffix(strings.TrimPrefix(head, "data:"), ";base64")
		if !ok || !strings.HasPrefix(head, "data:") || !isB64 {
			out = append(out, Image{URL: p.ImageURL.URL})
			continue
		}
		out = append(out, Image{MIMEType: mime, Data: data})
	}
	return out
}

// Images returns every image part of the request, in message order.
func (r Request) Images() []Image {
	var out []Image
	for _, m := range r.Body.Messages {
		out = append(out, m.Images...)
	}
	return out
}

// Tool is one entry of the request's tools list (the protocol's type).
type Tool = wire.ChatTool

// ToolCall is a tool call in the wire format (the protocol's type).
// Arguments is a JSON text in a string, as the API sends it.
type ToolCall = wire.ToolCall

// FunctionCall names the function and carries its arguments.
type FunctionCall = wire.FunctionCall

// Call returns a tool call of name with args encoded as its arguments
// string. args may be a string, taken as already-encoded JSON (so tests can
// send malformed arguments), or any value json.Marshal accepts. The id is
// left empty; the server fills in a deterministic one.
func Call(name string, args any) ToolCall {
	var text string
	switch a := args.(type) {
	case string:
		text = a
	case json.RawMessage:
		text = string(a)
	default:
		b, err := json.Marshal(a)
		if err != nil {
			panic(fmt.Sprintf("fakemodel.Call(%q): %v", name, err))
		}
		text = string(b)
	}
	return ToolCall{Type: wire.FunctionType, Function: FunctionCall{Name: name, Arguments: text}}
}

// System is the content of the first system message, or "".
func (r Request) System() string {
	for _, m := range r.Body.Messages {
		if m.Role == "system" {
			return m.Text()
		}
	}
	return ""
}

// Last is the last message of the request, or a zero Message.
func (r Request) Last() Message {
	if n := len(r.Body.Messages); n > 0 {
		return r.Body.Messages[n-1]
	}
	return Message{}
}

// UserText is the text of the last user message. The sealed worker wraps
// it as {"speaker":…,"message":…}; UserText unwraps that form and returns
// any other content as it is.
func (r Request) UserText() string {
	for _, m := range slices.Backward(r.Body.Messages) {
		if m.Role != "user" {
			continue
		}
		text := m.Text()
		var wrapped struct {
			Message *string `json:"message"`
		}
		if strings.HasPrefix(text, "{") && json.Unmarshal([]byte(text), &wrapped) == nil && wrapped.Message != nil {
			return *wrapped.Message
		}
		return text
	}
	return ""
}

// ToolResult returns the content of the tool message answering call id.
func (r Request) ToolResult(id string) (string, bool) {
	for _, m := range r.Body.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Text(), true
		}
	}
	return "", false
}

// Response is what a step answers.
type Response struct {
	// Status is the HTTP status; 0 means 200.
	Status int
	// Content is the assistant text. With ToolCalls and an empty Content
	// the wire content is null, as real APIs send it.
	Content string
	// ToolCalls are the calls to make; a call without an id gets
	// "call_<request index>_<call index>".
	ToolCalls []ToolCall
	// Raw, when set, is sent verbatim as the body instead, so tests can
	// answer malformed or unusual JSON.
	Raw []byte
	// Usage, when set, is the answer's "usage" (OpenAI chat completions:
	// prompt, completion and total tokens; Messages: input and output
	// tokens from prompt and completion); nil sends none, or zeros where
	// the Messages API always has usage.
	Usage *Usage
	// Chunks, when set, is sent verbatim as the body in these pieces,
	// each flushed and followed by Options.StreamDelay, so tests can cut
	// a body (a secret, an SSE event) at chosen offsets.
	Chunks [][]byte
	// ContentType replaces application/json for a Raw or Chunks body,
	// such as text/event-stream for a hand-written stream.
	ContentType string
	// StreamError, on a streamed answer, ends the stream early with an
	// error event of this type (such as "overloaded_error") after the 200
	// head and the first event.
	StreamError string
}

// Usage is the token count of a completion.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// completion is the response body in the chat-completions shape.
type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

type choice struct {
	Index        int        `json:"index"`
	Message      outMessage `json:"message"`
	FinishReason string     `json:"finish_reason"`
}

type outMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

func (s *Server) writeResponse(w http.ResponseWriter, r *http.Request, req Request, resp Response) {
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	body := resp.Raw
	if resp.Chunks != nil {
		s.writeChunks(w, r, status, resp)
		return
	}
	if body == nil && status == http.StatusOK && req.Body.Stream {
		s.stream(w, r, req, resp)
		return
	}
	if body == nil {
		var err error
		if body, err = encode(req, resp); err != nil {
			writeError(w, req.API, http.StatusInternalServerError, err.Error())
			return
		}
	}
	contentType := resp.ContentType
	if contentType == "" {
		contentType = "application/json"
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeChunks sends resp.Chunks, flushing and pausing after each.
func (s *Server) writeChunks(w http.ResponseWriter, r *http.Request, status int, resp Response) {
	contentType := resp.ContentType
	if contentType == "" {
		contentType = "application/json"
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	sw := &sseWriter{ctx: r.Context(), w: w, delay: s.opts.StreamDelay}
	for _, c := range resp.Chunks {
		if !sw.raw(c) {
			return
		}
	}
}

// stream answers a streamed request in its dialect.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, req Request, resp Response) {
	chunk := s.opts.StreamChunk
	if chunk <= 0 {
		chunk = defaultStreamChunk
	}
	if req.API == OpenAI {
		streamCompletion(newSSEWriter(r.Context(), w, s.opts.StreamDelay), req, resp, chunk, resp.StreamError)
		return
	}
	m, err := buildMessage(req, resp)
	if err != nil {
		writeError(w, req.API, http.StatusInternalServerError, err.Error())
		return
	}
	streamMessage(newSSEWriter(r.Context(), w, s.opts.StreamDelay), m, chunk, resp.StreamError)
}

// encode is the non-streamed answer in the request's dialect.
func encode(req Request, resp Response) ([]byte, error) {
	if req.API == OpenAI {
		return encodeCompletion(req, resp), nil
	}
	m, err := buildMessage(req, resp)
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

func encodeCompletion(req Request, resp Response) []byte {
	msg := outMessage{Role: "assistant", ToolCalls: slices.Clone(resp.ToolCalls)}
	finish := "stop"
	if len(msg.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if resp.Content != "" || len(msg.ToolCalls) == 0 {
		msg.Content = &resp.Content
	}
	for i := range msg.ToolCalls {
		if msg.ToolCalls[i].ID == "" {
			msg.ToolCalls[i].ID = fmt.Sprintf("call_%d_%d", req.Index, i)
		}
	}
	b, err := json.Marshal(completion{
		ID: fmt.Sprintf("chatcmpl-fake-%d", req.Index), Object: "chat.completion",
		Created: int64(req.Index), Model: req.Body.Model,
		Choices: []choice{{Message: msg, FinishReason: finish}},
		Usage:   resp.Usage,
	})
	if err != nil { // every field is a plain string or number
		panic(err)
	}
	return b
}

// writeError answers an error in the request's dialect.
func writeError(w http.ResponseWriter, api API, status int, text string) {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"message": text, "type": "fakemodel"}})
	if api != OpenAI {
		b = anthropicError(status, text)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
