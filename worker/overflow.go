package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/rtsandbox/rtsandbox/brokerclient"
	"github.com/rtsandbox/rtsandbox/wire"
)

// This file recognises a model call the upstream refused because the
// request is over the model's context window (docs/session.md, "Routes and statuses"
// keeps such a refusal's status and body for the worker), so that the
// session worker can compact and retry the call once (sessioncompact.go).

// errContextOverflow marks a model call refused as over the model's
// context window. It is not a *failure: the refusal it wraps still
// classifies as before (broker_refused, status 400).
var errContextOverflow = errors.New("model context overflow")

// maxOverflowMessage bounds the bytes of the error's message that
// contextOverflow reads: the phrases it looks for open the message.
const maxOverflowMessage = 1024

// overflowCode is OpenAI's error.code for an over-long request.
const overflowCode = "context_length_exceeded"

// overflowPhrases are what the dialects' error messages say of an
// over-long request, lower-case: Anthropic's "prompt is too long: 210000
// tokens > 200000 maximum" and "input length and `max_tokens` exceed
// context limit: …", OpenAI's "This model's maximum context length is …
// tokens", and the OpenAI code where a compatible server writes it into
// the message.
var overflowPhrases = []string{"prompt is too long", "exceed context limit", "maximum context length", overflowCode}

// contextOverflow is the rule: a 400 whose body is a JSON object with an
// "error" object whose code is context_length_exceeded, or whose message
// contains one of overflowPhrases within its first maxOverflowMessage
// bytes, both case-insensitive. Anything else (another status, no JSON,
// an error that is a string, another message) is not an overflow. body is
// untrusted and already bounded (brokerclient.MaxErrorBody); only the two
// members are decoded, and a member that is not a string is ignored.
func contextOverflow(status int, body []byte) bool {
	if status != http.StatusBadRequest {
		return false
	}
	// encoding/json's own struct decoding, names folded as they always
	// were: an upstream's error body, not the protocol's.
	var b struct {
		Error *struct {
			Code    wire.OptString `json:"code"`
			Message wire.OptString `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil || b.Error == nil {
		return false
	}
	if b.Error.Code.Set && strings.EqualFold(b.Error.Code.Value, overflowCode) {
		return true
	}
	msg := b.Error.Message.Value
	msg = strings.ToLower(msg[:min(len(msg), maxOverflowMessage)])
	for _, p := range overflowPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// overflowed marks err with errContextOverflow when it is a refusal that
// contextOverflow recognises, and returns any other err as it is.
func overflowed(err error) error {
	var status *brokerclient.StatusError
	if errors.As(err, &status) && contextOverflow(status.Status, status.Body) {
		return fmt.Errorf("%w: %w", errContextOverflow, err)
	}
	return err
}
