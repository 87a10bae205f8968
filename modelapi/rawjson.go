package modelapi

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/jsontree"
)

// kind returns the first significant byte of a raw JSON value ('{', '[',
// '"', 't', 'f', 'n' or a number's first byte), or 0 for an empty value
// such as a missing map entry. Checking the kind before decoding matters:
// encoding/json decodes null into a nil map, slice or empty string without
// error, and the rules refuse null wherever they ask for a type.
func kind(raw json.RawMessage) byte {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

// asObject decodes raw when it is a JSON object. Nested values stay raw so
// that the caller can still tell absent keys from null ones. A repeated key
// keeps its last value, as JavaScript's JSON.parse does; callers rebuild the
// object, so nothing from the dropped value is forwarded. jsontree.Split
// decodes as json.Unmarshal does, in one pass instead of two.
func asObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	m, err := jsontree.Split(raw)
	return m, err == nil
}

// asArray decodes raw when it is a JSON array, keeping the elements raw.
func asArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if kind(raw) != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

// asString decodes raw when it is a JSON string.
func asString(raw json.RawMessage) (string, bool) {
	if kind(raw) != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// refused wraps a rule violation in rtsandbox.ErrRefused. The text is for the
// operator log; the broker shows the guest a fixed message.
func refused(err error) error {
	return fmt.Errorf("%w: model input: %w", rtsandbox.ErrRefused, err)
}

// pointerToken escapes one JSON Pointer reference token (RFC 6901).
func pointerToken(s string) string {
	s = strings.ReplaceAll(s, "~", "~0")
	return strings.ReplaceAll(s, "/", "~1")
}
