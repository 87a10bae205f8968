// Package jsonjs encodes JSON the way JavaScript's JSON.stringify does, so
// that byte budgets measured by the reference (prompt slices, payload sizes,
// tool results) mean the same thing here.
//
// encoding/json differs from JSON.stringify in two ways that change sizes:
// it escapes <, > and & (unless told not to) and it always escapes U+2028
// and U+2029. JSON.stringify escapes only '"', '\' and control characters
// below U+0020. Marshal runs encoding/json without HTML escaping and then
// rewrites the \u2028 and \u2029 escapes back to raw UTF-8. No library does
// this rewrite, which is why this small package exists. It imports only the
// standard library, so the in-container worker may use it.
package jsonjs

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Marshal returns the JSON encoding of v as JSON.stringify would write it
// (struct field order and map key order as encoding/json chooses them).
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return unescapeSeparators(out), nil
}

// Size returns len(Marshal(v)), or -1 if v cannot be encoded.
func Size(v any) int {
	b, err := Marshal(v)
	if err != nil {
		return -1
	}
	return len(b)
}

// StringSize returns the length in bytes of s encoded as a JSON string by
// JSON.stringify, quotes included.
func StringSize(s string) int {
	b, _ := Marshal(s) // a string always encodes
	return len(b)
}

// unescapeSeparators replaces the escapes \u2028 and \u2029 that
// encoding/json writes inside strings with the raw characters. It walks the
// escapes so that an escaped backslash followed by "u2028" is left alone.
func unescapeSeparators(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u202`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out = append(out, c)
			continue
		}
		if b[i+1] == 'u' && i+5 < len(b) && b[i+2] == '2' && b[i+3] == '0' && b[i+4] == '2' && (b[i+5] == '8' || b[i+5] == '9') {
			if b[i+5] == '8' {
				out = append(out, "\u2028"...)
			} else {
				out = append(out, "\u2029"...)
			}
			i += 5
			continue
		}
		out = append(out, c, b[i+1])
		i++
	}
	return out
}

// EncodeURIComponent percent-encodes s like JavaScript's
// encodeURIComponent: A-Z a-z 0-9 and - _ . ! ~ * ' ( ) stay as they are;
// every other UTF-8 byte becomes %XX with uppercase hex. (url.QueryEscape
// differs: it writes spaces as + and escapes ! ' ( ) * ~.) Invalid UTF-8 is
// first replaced by U+FFFD, where JS would throw on a lone surrogate.
func EncodeURIComponent(s string) string {
	const hex = "0123456789ABCDEF"
	s = strings.ToValidUTF8(s, "\uFFFD")
	var sb strings.Builder
	sb.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			sb.WriteByte(c)
			continue
		}
		sb.WriteByte('%')
		sb.WriteByte(hex[c>>4])
		sb.WriteByte(hex[c&15])
	}
	return sb.String()
}

func unreserved(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.!~*'()", c) >= 0
}
