package rtsandbox

import "fmt"

// ValidModelAPI reports whether api names a model API a turn may carry:
// "" (openai), ModelAPIOpenAI or ModelAPIAnthropic.
func ValidModelAPI(api string) bool {
	return api == "" || api == ModelAPIOpenAI || api == ModelAPIAnthropic
}

// ThinkingBudget is the largest extended-thinking budget, in tokens, of a
// host-judged thinking level (docs/protocol.md, "Model calls"); ok is false for any other level, "" included.
func ThinkingBudget(level string) (budget int, ok bool) {
	switch level {
	case "low":
		return 2048, true
	case "medium":
		return 8192, true
	case "high":
		return 16384, true
	case "xhigh":
		return 32768, true
	}
	return 0, false
}

// Reply is the JSON the worker prints on stdout when the turn ends. A
// worker that exits 0 also returns the channel's State after the turn
// (memory with this turn's changes, history with this exchange when it
// ended in a final answer); the host checks and stores it and never passes
// it on, so a Reply that leaves the sandbox runtime has State nil.
type Reply struct {
	OK    bool          `json:"ok"`
	Text  string        `json:"text"`
	State *ChannelState `json:"state,omitempty"`
}

// Validate checks what a reply may carry whoever built it: text of at
// most MaxReplyText UTF-16 units. State is checked against its limits by
// the state store before it is kept.
func (r Reply) Validate() error {
	if n := UTF16Len(r.Text); n > MaxReplyText {
		return fmt.Errorf("text has %d UTF-16 units", n)
	}
	return nil
}

// WorkerFailedText is the reply a worker prints, with exit code 1, when
// anything goes wrong inside the container.
const WorkerFailedText = "The sandbox worker failed."
