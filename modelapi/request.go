package modelapi

// ChatRequest is the rebuilt upstream chat-completions body. Field order is
// the wire order: model, messages, tools (only when the guest sent tools),
// stream, max_tokens. Tools uses omitzero so that a nil slice is left out
// while an empty, non-nil one is sent as [].
type ChatRequest struct {
	Model     string    `json:"model"`
	Messages  []Message `json:"messages"`
	Tools     []Tool    `json:"tools,omitzero"`
	Stream    bool      `json:"stream"`
	MaxTokens int       `json:"max_tokens"`
}

// BuildChatRequest wraps normalised input in the upstream body. model and
// maxTokens come from the operator (validated at setup, not here); stream is
// always false because sealed turns do not stream. The result shares in's
// slices.
func BuildChatRequest(model string, in *ChatInput, maxTokens int) ChatRequest {
	req := ChatRequest{Model: model, Messages: in.Messages, MaxTokens: maxTokens}
	if req.Messages == nil {
		req.Messages = []Message{} // upstream expects an array, never null
	}
	if in.HasTools {
		req.Tools = in.Tools
		if req.Tools == nil {
			req.Tools = []Tool{}
		}
	}
	return req
}
