package container

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rtsandbox/rtsandbox"
)

// ParseReply validates a worker's stdout: a JSON object with a boolean "ok"
// and a string "text" of at most rtsandbox.MaxReplyText UTF-16 units, and
// an optional "state" object {"memory": […], "history": […]} decoded by
// type only (the runtime's state store checks its limits before it keeps
// anything). Other fields are dropped. Errors wrap ErrInvalidReply. The
// caller bounds stdout and checks the exit code first: a reply only counts
// when the worker exited with 0.
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
	if raw, ok := fields["state"]; ok {
		st, err := parseState(raw)
		if err != nil {
			return rtsandbox.Reply{}, fmt.Errorf("%w: state: %v", ErrInvalidReply, err)
		}
		r.State = st
	}
	return r, nil
}

// parseState decodes the state object: both lists present and arrays, every
// field of every item a string.
func parseState(raw json.RawMessage) (*rtsandbox.ChannelState, error) {
	var fields struct {
		Memory  []map[string]json.RawMessage `json:"memory"`
		History []map[string]json.RawMessage `json:"history"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	if fields.Memory == nil || fields.History == nil {
		return nil, errors.New("memory and history must be arrays")
	}
	st := &rtsandbox.ChannelState{
		Memory:  make([]rtsandbox.MemoryEntry, len(fields.Memory)),
		History: make([]rtsandbox.HistoryEntry, len(fields.History)),
	}
	for i, m := range fields.Memory {
		e := &st.Memory[i]
		if err := stringFields(m, map[string]*string{"scope": &e.Scope, "key": &e.Key, "text": &e.Text}); err != nil {
			return nil, fmt.Errorf("memory %d: %w", i, err)
		}
	}
	for i, h := range fields.History {
		e := &st.History[i]
		if err := stringFields(h, map[string]*string{"role": &e.Role, "content": &e.Content}); err != nil {
			return nil, fmt.Errorf("history %d: %w", i, err)
		}
	}
	return st, nil
}

// stringFields decodes the named fields of obj, each of which must be a
// JSON string.
func stringFields(obj map[string]json.RawMessage, dst map[string]*string) error {
	if obj == nil {
		return errors.New("not an object")
	}
	for name, p := range dst {
		raw := bytes.TrimSpace(obj[name])
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, p) != nil {
			return fmt.Errorf("%s is not a string", name)
		}
	}
	return nil
}
