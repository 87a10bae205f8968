package worker

import (
	"encoding/json"

	"github.com/rtsandbox/rtsandbox/jsonjs"
	"github.com/rtsandbox/rtsandbox/wire"
)

// answerMessage is the assistant message of a model answer as the loop
// reads it, whatever the API (the Anthropic client rebuilds its answer
// in this shape): the content when it is a string, and the tool calls as
// the model sent them when they are an array (repairToolCalls reads
// each). Anything else, null included, is neither; other members are
// dropped.
type answerMessage struct {
	Content   wire.OptString `json:"content,omitempty"`
	ToolCalls looseArray     `json:"tool_calls,omitempty"`
}

func (m *answerMessage) UnmarshalJSON(b []byte) error {
	type plain answerMessage
	return wire.Fill(b, (*plain)(m))
}

// MarshalJSON writes the message as the chat-completions API does:
// content a string or null, tool_calls when there are any.
func (m answerMessage) MarshalJSON() ([]byte, error) {
	var content *string
	if m.Content.Set {
		content = &m.Content.Value
	}
	return jsonjs.Marshal(struct {
		Content   *string           `json:"content"`
		ToolCalls []json.RawMessage `json:"tool_calls,omitempty"`
	}{content, m.ToolCalls})
}

// looseArray is the items of a JSON array, each as sent; any other
// value, null included, is no array (nil).
type looseArray []json.RawMessage

func (a *looseArray) UnmarshalJSON(b []byte) error {
	*a, _ = array(b)
	return nil
}

// TakesNull makes looseArray a wire.NullTaker: a null tool_calls is none.
func (*looseArray) TakesNull() {}

// chatAnswerWire is a chat-completions answer: choices a non-empty array
// whose first item is an object with a message object; the rest is
// dropped.
type chatAnswerWire struct {
	Choices firstChoiceWire `json:"choices"`
}

// firstChoiceWire is choices, read for its first item only.
type firstChoiceWire struct {
	Message answerMessage `json:"message"`
}

func (c *firstChoiceWire) UnmarshalJSON(b []byte) error {
	items, ok := array(b)
	if !ok || len(items) == 0 {
		return errModelResponse
	}
	type plain firstChoiceWire
	return wire.Fill(items[0], (*plain)(c))
}

// modelMessage extracts choices[0].message from a chat-completions answer.
func modelMessage(raw json.RawMessage) (*answerMessage, error) {
	var w chatAnswerWire
	if wire.Fill(raw, &w) != nil {
		return nil, errModelResponse
	}
	return &w.Choices.Message, nil
}
