package jsontree

// Token is one token of a Scan: Kind is '{', '}', '[' or ']' for a
// delimiter, ':' for an object's key, '"' for a string value, '0' for a
// number, 't', 'f' or 'n' for a literal. Raw is the token's exact bytes
// within the scanned data (a key or string with its quotes).
type Token struct {
	Kind byte
	Raw  []byte
}

// String decodes a key or string token as Decode would.
func (t Token) String() string {
	s, _ := (*Budget)(nil).String(t.Raw)
	return s
}

// Scan reads data, one JSON value with only whitespace around it, calling
// fn with each of its tokens in order, as encoding/json's Decoder.Token
// gives them (a key as its own token before its value), without keeping
// or decoding anything: a schema check walks a schema of any size in one
// pass. It stops when fn returns false. ok is false when data is not
// valid JSON, fn stopped it, or the budget refused.
func (b *Budget) Scan(data []byte, fn func(Token) bool) (ok bool) {
	d := newDecoder(data, b)
	defer d.done()
	d.space()
	if d.stopped() || !d.tokens(fn) {
		return false
	}
	return d.atEnd()
}

// tokens scans the value at pos, handing its tokens to fn.
func (d *decoder) tokens(fn func(Token) bool) bool {
	if !d.due(d.pos) {
		return false
	}
	start := d.pos
	switch c := d.peek(); c {
	case '{':
		if !fn(Token{Kind: '{', Raw: d.data[start : start+1]}) || !d.enter() {
			return false
		}
		if !d.closes('}') {
			for {
				key := d.pos
				if d.peek() != '"' || !d.skipString() || !fn(Token{Kind: ':', Raw: d.data[key:d.pos]}) {
					return false
				}
				d.space()
				if d.peek() != ':' {
					return false
				}
				d.pos++
				d.space()
				if !d.tokens(fn) {
					return false
				}
				done, ok := d.next('}')
				if !ok {
					return false
				}
				if done {
					break
				}
			}
		}
		return fn(Token{Kind: '}', Raw: d.data[d.pos-1 : d.pos]})
	case '[':
		if !fn(Token{Kind: '[', Raw: d.data[start : start+1]}) || !d.enter() {
			return false
		}
		if !d.closes(']') {
			for {
				if !d.tokens(fn) {
					return false
				}
				done, ok := d.next(']')
				if !ok {
					return false
				}
				if done {
					break
				}
			}
		}
		return fn(Token{Kind: ']', Raw: d.data[d.pos-1 : d.pos]})
	}
	if _, ok := d.value(false); !ok {
		return false
	}
	kind := d.data[start]
	if kind == '-' || kind >= '0' && kind <= '9' {
		kind = '0'
	}
	return fn(Token{Kind: kind, Raw: d.data[start:d.pos]})
}
