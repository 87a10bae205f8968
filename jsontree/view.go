package jsontree

import (
	"bytes"
	"encoding/json"
)

// Views: reading a rule's few members and counted arrays straight from the
// bytes, keeping nothing else. A value is its exact bytes within the
// caller's data (no copy), so absent and null stay different.
//
// Array and Fields read data that a validating read has passed (a value
// of Split, or of an Array or Fields of one): they skip a value by its
// brackets and its strings by their closing quote (bytes.IndexByte), so
// that a rule's reading of nested levels costs a fast scan per level, not
// a validation. On data that is not valid JSON their answer is not
// specified, but their cost is bounded all the same. String, Valid and
// Compact check what they read.

// Array reads data, one JSON array, up to its element max+1: n is the
// elements counted, at most max+1, and items the first min(n, max) of
// them. Elements past max+1 are never read, so that a rule that refuses
// more than max elements refuses on n alone, before the rest is scanned,
// whatever it holds. ok is false when data is not an array (absent,
// invalid, another kind) or the budget refuses.
func (b *Budget) Array(data []byte, max int) (items []json.RawMessage, n int, ok bool) {
	d := newDecoder(data, b)
	defer d.done()
	d.space()
	if d.stopped() || d.peek() != '[' || !d.enter() {
		return nil, 0, false
	}
	items = make([]json.RawMessage, 0, min(max, 16))
	if d.closes(']') {
		if !d.atEnd() {
			return nil, 0, false
		}
		return items, 0, true
	}
	for {
		start := d.pos
		if !d.skipValid() {
			return nil, 0, false
		}
		if n++; n > max {
			return items, n, true
		}
		items = append(items, d.data[start:d.pos:d.pos])
		done, ok := d.next(']')
		if !ok {
			return nil, 0, false
		}
		if done {
			if !d.atEnd() {
				return nil, 0, false
			}
			return items, n, true
		}
	}
}

// Fields reads the object data in one pass: vals[i] becomes the value of
// the member named names[i] (the last one when the name repeats, as
// JSON.parse keeps it; nil when absent). other is the least key, in byte
// order, that names does not list, when hasOther: a rule that allows only
// names can name it in its log. ok is false when data is not an object
// or the budget refuses. The members are not kept: an object of a million
// members costs a scan, not a map.
func (b *Budget) Fields(data []byte, names []string, vals []json.RawMessage) (other string, hasOther, ok bool) {
	clear(vals)
	d := newDecoder(data, b)
	defer d.done()
	d.space()
	if d.stopped() || d.peek() != '{' || !d.enter() {
		return "", false, false
	}
	if d.closes('}') {
		return "", false, d.atEnd()
	}
	for {
		key, ok := d.key()
		if !ok {
			return "", false, false
		}
		start := d.pos
		if !d.skipValid() {
			return "", false, false
		}
		if i := index(names, key); i >= 0 {
			vals[i] = d.data[start:d.pos:d.pos]
		} else if !hasOther || string(key) < other {
			other, hasOther = string(key), true
		}
		done, ok := d.next('}')
		if !ok {
			return "", false, false
		}
		if done {
			return other, hasOther, d.atEnd()
		}
	}
}

// skipValid moves pos past the value at pos, in data that is valid JSON:
// a string to its closing quote, a container to its closing bracket
// (counting brackets outside strings), a number or literal to the byte
// that ends it.
func (d *decoder) skipValid() bool {
	depth := 0
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case '"':
			if !d.skipValidString() {
				return false
			}
			if depth == 0 {
				return true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // a number or literal ended
				return true
			}
			if depth--; depth == 0 {
				d.pos++
				return true
			}
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return true
			}
		}
		d.pos++
		if d.pos >= d.checkAt && !d.due(d.pos) {
			return false
		}
	}
	return depth == 0
}

// skipValidString moves pos past the valid string at pos: to the first
// quote after it that an even run of backslashes precedes. Under a
// budget, the length of a long string is remembered by the address of its
// opening quote, so that the views of the levels above it, which all scan
// it, find its end once; a short one ends within its first longString
// bytes and is never looked up.
func (d *decoder) skipValidString() bool {
	start := d.pos
	i := start + 1
	if j := bytes.IndexByte(d.data[i:min(len(d.data), i+longString)], '"'); j >= 0 && (j == 0 || d.data[i+j-1] != '\\') {
		d.pos = i + j + 1
		return true
	}
	if n, ok := d.b.known(&d.data[start]); ok && start+n <= len(d.data) {
		d.pos = start + n
		return true
	}
	for {
		end := len(d.data)
		if d.b != nil {
			end = min(end, i+CheckBytes)
		}
		j := bytes.IndexByte(d.data[i:end], '"')
		if j < 0 {
			if end == len(d.data) || !d.due(end) {
				return false
			}
			i = end
			continue
		}
		q, n := i+j, 0
		for k := q - 1; k > start && d.data[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			d.pos = q + 1
			if d.pos-start >= longString {
				d.b.remember(&d.data[start], d.pos-start)
			}
			return true
		}
		i = q + 1
	}
}

// index is the position of key in names, or -1.
func index(names []string, key []byte) int {
	for i, n := range names {
		if n == string(key) {
			return i
		}
	}
	return -1
}

// key reads a member's key and the colon after it, leaving pos at the
// value. The key is its bytes within data when they need no decoding (no
// escape, only ASCII), else its decoded form.
func (d *decoder) key() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	start := d.pos + 1
	var key []byte
	if i := d.scan(start, true); i < len(d.data) && d.data[i] == '"' {
		key, d.pos = d.data[start:i], i+1
	} else {
		s, ok := d.strSlow(start, i)
		if !ok {
			return nil, false
		}
		key = []byte(s)
	}
	d.space()
	if d.peek() != ':' {
		return nil, false
	}
	d.pos++
	d.space()
	return key, true
}

// String decodes data when it is one JSON string, as Decode would.
func (b *Budget) String(data []byte) (string, bool) {
	d := newDecoder(data, b)
	defer d.done()
	d.space()
	if d.stopped() || d.peek() != '"' {
		return "", false
	}
	s, ok := d.str()
	return s, ok && d.atEnd()
}

// Valid reports whether data is one JSON value with only whitespace
// around it, as json.Valid does.
func (b *Budget) Valid(data []byte) bool {
	d := newDecoder(data, b)
	defer d.done()
	d.space()
	if d.stopped() {
		return false
	}
	_, ok := d.value(false)
	return ok && d.atEnd()
}

// Compact appends data, one JSON value, to dst without its insignificant
// whitespace, as json.Compact does: strings and numbers stay byte for
// byte. ok is false when data is not valid JSON.
func (b *Budget) Compact(dst, data []byte) ([]byte, bool) {
	if !b.Valid(data) {
		return dst, false
	}
	d := newDecoder(data, b)
	defer d.done()
	for d.pos < len(d.data) {
		if !d.due(d.pos) {
			return dst, false
		}
		switch c := d.data[d.pos]; c {
		case ' ', '\t', '\n', '\r':
			d.pos++
		case '"':
			start := d.pos
			if !d.skipString() {
				return dst, false
			}
			dst = append(dst, d.data[start:d.pos]...)
		default:
			start := d.pos
			for d.pos < len(d.data) && !isSpace(d.data[d.pos]) && d.data[d.pos] != '"' && d.pos-start < CheckBytes {
				d.pos++
			}
			dst = append(dst, d.data[start:d.pos]...)
		}
	}
	return dst, true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
