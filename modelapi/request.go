package modelapi

// ChatRequest is the rebuilt upstream chat-completions body. Field order is
// the wire order: model, messages, tools (only when the guest sent tools),
// stream, stream_options (only when set), max_tokens. Tools uses omitzero so that a nil slice is left out
// while an empty, non-nil one is sent as [].
type ChatRequest struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools,omitzero"`
	Stream   bool      `json:"stream"`
	// StreamOptions asks a streamed answer for its usage chunk; the
	// broker sets it on the streamed calls it allows, never the guest.
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens"`
}

// StreamOptions is the stream_options of a streamed chat request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// BuildChatRequest wraps normalised input in the upstream body. model and
// maxTokens come from the operator (validated at setup, not here); stream is
// false: the broker sets it (and StreamOptions) only where the host allows
// streaming. The result shares in's
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
