package modelapi

import (
	"context"
	"encoding/json"
	"errors"
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

// fields reads the members names of raw when it is a JSON object into
// vals (nil for an absent member; the last of a repeated one, as
// JavaScript's JSON.parse keeps). Callers rebuild the object from them, so
// nothing else of it is forwarded, or even kept.
func fields(b *jsontree.Budget, raw json.RawMessage, names []string, vals []json.RawMessage) bool {
	if kind(raw) != '{' {
		clear(vals)
		return false
	}
	_, _, ok := b.Fields(raw, names, vals)
	return ok
}

// asString decodes raw when it is a JSON string.
func asString(b *jsontree.Budget, raw json.RawMessage) (string, bool) {
	if kind(raw) != '"' {
		return "", false
	}
	return b.String(raw)
}

// budgetFor is the Budget a body is read under: b when the caller gave
// one, else one of the body's size that never stops.
func budgetFor(b *jsontree.Budget, body map[string]json.RawMessage) *jsontree.Budget {
	if b != nil {
		return b
	}
	size := 0
	for k, v := range body {
		size += len(k) + len(v)
	}
	return jsontree.NewBudget(context.Background(), jsontree.NodesFor(size))
}

// budgetError is the budget's refusal once a normalisation is done,
// whatever the rules decided meanwhile: a read it stopped looked to them
// like a value of the wrong kind. Over the node count (jsontree.ErrBudget)
// the request is refused; once the context ended (jsontree.ErrStopped)
// the call is over, and the error is no refusal.
func budgetError(b *jsontree.Budget) error {
	err := b.Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jsontree.ErrBudget):
		return refused(err)
	}
	return fmt.Errorf("model input: %w", err)
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
