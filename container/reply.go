package container

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// ParseReply validates a worker's stdout: a JSON object with a boolean "ok"
// and a string "text" of at most rtsandbox.MaxReplyText UTF-16 units. Other
// fields are dropped. Errors wrap ErrInvalidReply. The caller checks the
// exit code first: a reply only counts when the worker exited with 0.
func ParseReply(stdout []byte) (rtsandbox.Reply, error) {
	// A map tells a missing or null field from a typed one, and keeps the
	// last of duplicate keys as JS JSON.parse does.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(stdout, &fields); err != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: %v", ErrInvalidReply, err)
	}
	if fields == nil { // the JSON value null
		return rtsandbox.Reply{}, fmt.Errorf("%w: not an object", ErrInvalidReply)
	}
	var r rtsandbox.Reply
	okRaw := bytes.TrimSpace(fields["ok"])
	switch string(okRaw) {
	case "true":
		r.OK = true
	case "false":
	default:
		return rtsandbox.Reply{}, fmt.Errorf("%w: ok is not a boolean", ErrInvalidReply)
	}
	textRaw := bytes.TrimSpace(fields["text"])
	if len(textRaw) == 0 || textRaw[0] != '"' || json.Unmarshal(textRaw, &r.Text) != nil {
		return rtsandbox.Reply{}, fmt.Errorf("%w: text is not a string", ErrInvalidReply)
	}
	if n := rtsandbox.UTF16Len(r.Text); n > rtsandbox.MaxReplyText {
		return rtsandbox.Reply{}, fmt.Errorf("%w: text has %d UTF-16 units", ErrInvalidReply, n)
	}
	return r, nil
}
