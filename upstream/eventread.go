package upstream

import (
	"bytes"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// fieldReader reads one event's data, keeping the parts streamFields
// assembles: the raw strings of a few objects, a few indexes and types.
// Nothing is built for the rest, names are compared in place, and its
// buffers are reused from event to event (a token-sized event costs about
// a microsecond with its window: docs/benchmarks.md).
//
// It reads every value that json.Valid accepts as encoding/json does
// (nesting at most 10000 deep), and refuses what breaks the grammar of
// objects, arrays, numbers and literals; inside a string it looks only
// for the closing quote, as a valid string places it, and not for the
// control bytes and bad escapes that make a string invalid. Such an event
// is read, not skipped: every client rejects it and stops there, so what
// the check makes of it cannot hide anything a client assembles.
type fieldReader struct {
	b     []byte
	i     int
	arena []byte   // decoded names and types; only appended to during a read
	names [][]byte // the member names of the string objects being read
	ev    eventFields
	bad   bool // the event is JSON the check cannot read as every client does
}

// eventFields is what fieldReader keeps of one event.
type eventFields struct {
	typ     []byte
	index   indexValue
	choices []choiceFields
	delta   objectStrings // the top-level "delta" (Messages)
	block   objectStrings // "content_block"
	// usage and msgUsage are the raw values of the top-level "usage"
	// and of "message"."usage", nil when absent: the usage counts the
	// broker's watcher reads (StreamEvent). They are matched as
	// encoding/json matches a field name (case folded, the last one
	// wins) and never make an event uncheckable: no client assembles
	// them.
	usage, msgUsage []byte
	// typDecoded: typ was decoded from escapes into the reader's arena,
	// which the next read reuses; otherwise it is in the data.
	typDecoded bool
}

type choiceFields struct {
	index indexValue
	delta objectStrings
	call  objectStrings // delta.function_call
	tools []toolFields
}

type toolFields struct {
	index    indexValue
	function objectStrings
}

// indexValue is an "index" member: absent, a small non-negative integer,
// or bad (anything else).
type indexValue struct {
	present, bad bool
	n            int
}

// objectStrings are the string members of an object, in order.
type objectStrings struct {
	strs []stringMember
}

// stringMember is a string member: its decoded name and its raw value
// (between the quotes), which holds an escape when esc.
type stringMember struct {
	name, raw []byte
	esc       bool
}

func (o objectStrings) get(name string) (stringMember, bool) {
	for _, s := range o.strs {
		if string(s.name) == name {
			return s, true
		}
	}
	return stringMember{}, false
}

// read reads data. ok is false for data that is not one JSON value (it is
// then skipped); err is ErrUncheckable for JSON the check cannot read as
// every client does.
func (r *fieldReader) read(data []byte) (*eventFields, bool, error) {
	r.b, r.i, r.bad = data, 0, false
	r.arena = r.arena[:0]
	ev := &r.ev
	ev.typ, ev.index, ev.usage, ev.msgUsage, ev.typDecoded = nil, indexValue{}, nil, nil, false
	ev.choices, ev.delta.strs, ev.block.strs = ev.choices[:0], ev.delta.strs[:0], ev.block.strs[:0]
	r.ws()
	var ok bool
	if r.at('{') {
		ok = r.root()
	} else {
		ok = r.value(0)
	}
	r.ws()
	switch {
	case !ok || r.i != len(r.b):
		return nil, false, nil
	case r.bad:
		return nil, true, ErrUncheckable
	}
	return ev, true, nil
}

func (r *fieldReader) ws() {
	if r.i < len(r.b) && r.b[r.i] > ' ' {
		return
	}
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

func (r *fieldReader) at(c byte) bool { return r.i < len(r.b) && r.b[r.i] == c }

// Member kinds of the objects the reader interprets.
const (
	mOther = iota
	mType
	mIndex
	mChoices
	mDelta
	mContentBlock
	mFunction
	mToolCalls
	mFunctionCall
)

// The names each interpreted object reads: a member whose name equals
// one only under case folding (as encoding/json's match would take it)
// makes the event uncheckable, as does a repeated one.
var (
	rootNames   = []string{mType: "type", mIndex: "index", mChoices: "choices", mDelta: "delta", mContentBlock: "content_block"}
	choiceNames = []string{mIndex: "index", mDelta: "delta"}
	toolNames   = []string{mIndex: "index", mFunction: "function"}
)

// kindOf is the kind of name among names (mOther for none), marking the
// event bad for a fold-only match or a repeat (seen records the kinds
// seen in this object).
func (r *fieldReader) kindOf(name []byte, names []string, seen *uint16) int {
	k := mOther
	switch string(name) {
	case "type":
		k = mType
	case "index":
		k = mIndex
	case "choices":
		k = mChoices
	case "delta":
		k = mDelta
	case "content_block":
		k = mContentBlock
	case "function":
		k = mFunction
	default:
		if !foldFree(name) {
			for _, n := range names {
				if n != "" && strings.EqualFold(string(name), n) {
					r.bad = true
				}
			}
		}
		return mOther
	}
	if k >= len(names) || names[k] == "" {
		return mOther
	}
	if *seen&(1<<k) != 0 {
		r.bad = true
	}
	*seen |= 1 << k
	return k
}

// foldFree reports whether name has no uppercase ASCII letter and no byte
// past ASCII: no other such name equals it under case folding
// (bytes.EqualFold, which also folds the Kelvin sign and the long s).
func foldFree(name []byte) bool {
	for _, c := range name {
		if 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// object reads an object at r.i (its '{'), calling member with each
// decoded name once the reader stands at the value, which member must
// read.
func (r *fieldReader) object(depth int, member func(name []byte) bool) bool {
	if depth >= maxEventDepth {
		return false
	}
	r.i++ // '{'
	r.ws()
	if r.at('}') {
		r.i++
		return true
	}
	for {
		if !r.at('"') {
			return false
		}
		name, ok := r.decodedStr()
		if !ok {
			return false
		}
		r.ws()
		if !r.at(':') {
			return false
		}
		r.i++
		r.ws()
		if !member(name) {
			return false
		}
		if done, ok := r.next('}'); done || !ok {
			return ok
		}
	}
}

// next reads what follows a member or an element: a comma (more to
// come) or closing, which ends the object or array (done).
func (r *fieldReader) next(closing byte) (done, ok bool) {
	r.ws()
	switch {
	case r.at(','):
		r.i++
		r.ws()
		return false, true
	case r.at(closing):
		r.i++
		return true, true
	}
	return false, false
}

// array reads an array at r.i (its '['), calling element for each
// element with the reader at it.
func (r *fieldReader) array(depth int, element func() bool) bool {
	if depth >= maxEventDepth {
		return false
	}
	r.i++ // '['
	r.ws()
	if r.at(']') {
		r.i++
		return true
	}
	for {
		if !element() {
			return false
		}
		if done, ok := r.next(']'); done || !ok {
			return ok
		}
	}
}

func (r *fieldReader) root() bool {
	ev := &r.ev
	var seen uint16
	return r.object(0, func(name []byte) bool {
		switch r.kindOf(name, rootNames, &seen) {
		case mType:
			if r.at('"') {
				arena := len(r.arena)
				s, ok := r.decodedStr()
				ev.typ, ev.typDecoded = s, len(r.arena) > arena
				return ok
			}
		case mIndex:
			return r.index(&ev.index)
		case mChoices:
			if r.at('[') {
				return r.array(1, func() bool { return r.choice(2) })
			}
		case mDelta:
			if r.at('{') {
				return r.strings(1, &ev.delta, nil)
			}
		case mContentBlock:
			if r.at('{') {
				return r.strings(1, &ev.block, nil)
			}
		case mOther:
			switch {
			case bytes.EqualFold(name, usageName):
				return r.raw(1, &ev.usage)
			case bytes.EqualFold(name, messageName) && r.at('{'):
				return r.object(1, func(name []byte) bool {
					if bytes.EqualFold(name, usageName) {
						return r.raw(2, &ev.msgUsage)
					}
					return r.value(2)
				})
			}
		}
		return r.value(1)
	})
}

var (
	usageName   = []byte("usage")
	messageName = []byte("message")
)

// raw reads a value and keeps its bytes in v.
func (r *fieldReader) raw(depth int, v *[]byte) bool {
	start := r.i
	if !r.value(depth) {
		return false
	}
	*v = r.b[start:r.i:r.i]
	return true
}

func (r *fieldReader) choice(depth int) bool {
	if !r.at('{') {
		return r.value(depth)
	}
	ev := &r.ev
	k := len(ev.choices)
	ev.choices = grow(ev.choices)
	c := &ev.choices[k]
	c.index, c.delta.strs, c.call.strs, c.tools = indexValue{}, c.delta.strs[:0], c.call.strs[:0], c.tools[:0]
	var seen uint16
	return r.object(depth, func(name []byte) bool {
		c := &ev.choices[k]
		switch r.kindOf(name, choiceNames, &seen) {
		case mIndex:
			return r.index(&c.index)
		case mDelta:
			if r.at('{') {
				return r.strings(depth+1, &c.delta, func(name []byte) (bool, bool) { return r.deltaMember(depth+1, k, name) })
			}
		}
		return r.value(depth + 1)
	})
}

// deltaMember reads the members of a chat completion's delta that are not
// strings to assemble: its tool calls and its function call (the API's
// older form of one).
func (r *fieldReader) deltaMember(depth, k int, name []byte) (handled, ok bool) {
	switch {
	case string(name) == "tool_calls" && r.at('['):
		return true, r.array(depth+1, func() bool { return r.tool(depth+2, k) })
	case string(name) == "function_call" && r.at('{'):
		return true, r.strings(depth+1, &r.ev.choices[k].call, nil)
	}
	return false, false
}

// grow extends s by one element, reusing the element's old buffers.
func grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s[:len(s)+1]
	}
	var zero T
	return append(s, zero)
}

func (r *fieldReader) tool(depth, k int) bool {
	if !r.at('{') {
		return r.value(depth)
	}
	c := &r.ev.choices[k]
	t := len(c.tools)
	c.tools = grow(c.tools)
	c.tools[t].index, c.tools[t].function.strs = indexValue{}, c.tools[t].function.strs[:0]
	var seen uint16
	return r.object(depth, func(name []byte) bool {
		tf := &r.ev.choices[k].tools[t]
		switch r.kindOf(name, toolNames, &seen) {
		case mIndex:
			return r.index(&tf.index)
		case mFunction:
			if r.at('{') {
				return r.strings(depth+1, &tf.function, nil)
			}
		}
		return r.value(depth + 1)
	})
}

// strings reads an object keeping its string members; other, when not
// nil, may read a member itself (handled, ok). Its strings are assembled
// by member name, so every name must be one that no other name equals
// under case folding, which encoding/json's match applies and a
// JavaScript or SDK client does not: a name with an uppercase or
// non-ASCII letter, a repeated name or more than maxMembers members mark
// the event bad.
func (r *fieldReader) strings(depth int, o *objectStrings, other func(name []byte) (handled, ok bool)) bool {
	base := len(r.names) // this object's names, above those of the objects it is in
	defer func() { r.names = r.names[:base] }()
	return r.object(depth, func(name []byte) bool {
		switch {
		case len(r.names)-base == maxMembers, !foldFree(name):
			r.bad = true
		default:
			for _, m := range r.names[base:] {
				if string(m) == string(name) {
					r.bad = true
				}
			}
			r.names = append(r.names, name)
		}
		if other != nil {
			if handled, ok := other(name); handled {
				return ok
			}
		}
		if !r.at('"') {
			return r.value(depth + 1)
		}
		raw, esc, ok := r.str()
		if ok {
			o.strs = append(o.strs, stringMember{name: name, raw: raw, esc: esc})
		}
		return ok
	})
}

// index reads an index member's value.
func (r *fieldReader) index(v *indexValue) bool {
	start := r.i
	if !r.value(1) {
		return false
	}
	lit := r.b[start:r.i]
	*v = indexValue{present: true, bad: true}
	if len(lit) > maxIndexDigits || len(lit) > 1 && lit[0] == '0' {
		return true
	}
	for _, c := range lit {
		if c < '0' || c > '9' {
			return true
		}
	}
	n, err := strconv.Atoi(string(lit))
	v.n, v.bad = n, err != nil
	return true
}

// value reads and validates any JSON value.
func (r *fieldReader) value(depth int) bool {
	if r.i >= len(r.b) {
		return false
	}
	switch c := r.b[r.i]; {
	case c == '"':
		_, _, ok := r.str()
		return ok
	case c == '{':
		return r.object(depth, func([]byte) bool { return r.value(depth + 1) })
	case c == '[':
		return r.array(depth, func() bool { return r.value(depth + 1) })
	case c == '-' || '0' <= c && c <= '9':
		return r.number()
	case c == 't':
		return r.literal("true")
	case c == 'f':
		return r.literal("false")
	case c == 'n':
		return r.literal("null")
	}
	return false
}

func (r *fieldReader) literal(w string) bool {
	if len(r.b)-r.i < len(w) || string(r.b[r.i:r.i+len(w)]) != w {
		return false
	}
	r.i += len(w)
	return true
}

// number reads a number as the JSON grammar has it.
func (r *fieldReader) number() bool {
	if r.at('-') {
		r.i++
	}
	switch {
	case r.at('0'):
		r.i++
	case r.i < len(r.b) && '1' <= r.b[r.i] && r.b[r.i] <= '9':
		r.digits()
	default:
		return false
	}
	if r.at('.') {
		r.i++
		if !r.digits() {
			return false
		}
	}
	if r.at('e') || r.at('E') {
		r.i++
		if r.at('+') || r.at('-') {
			r.i++
		}
		if !r.digits() {
			return false
		}
	}
	return true
}

func (r *fieldReader) digits() bool {
	start := r.i
	for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
		r.i++
	}
	return r.i > start
}

// str reads a string at r.i (its '"') and returns its raw content,
// between the quotes, and whether it holds an escape. The closing quote
// is the first one after an even run of backslashes, as in a valid string.
func (r *fieldReader) str() (raw []byte, esc, ok bool) {
	b := r.b
	start := r.i + 1
	// Names, types and a token's delta are short: a byte at a time first.
	for i, lim := start, min(len(b), start+32); i < lim; i++ {
		if c := b[i]; c == '"' {
			r.i = i + 1
			return b[start:i:i], false, true
		} else if c == '\\' {
			break
		}
	}
	q := bytes.IndexByte(b[start:], '"')
	if q < 0 {
		return nil, false, false
	}
	q += start
	switch {
	case q == start || b[q-1] != '\\':
		// The first quote ends it: most strings.
		esc = bytes.IndexByte(b[start:q], '\\') >= 0
	default:
		// An escaped quote: a short string quote by quote, a long one
		// (code, JSON in a string) 64 bytes at a time.
		for q-start < 128 {
			k := q
			for k > start && b[k-1] == '\\' {
				k--
			}
			if (q-k)%2 == 0 {
				break
			}
			n := bytes.IndexByte(b[q+1:], '"')
			if n < 0 {
				return nil, false, false
			}
			q += 1 + n
		}
		if q-start >= 128 {
			if q = quoteEnd(b, start); q < 0 {
				return nil, false, false
			}
		}
		esc = true
	}
	r.i = q + 1
	return b[start:q:q], esc, true
}

// quoteEnd returns the index of the first quote of b from start on that
// no backslash escapes, or -1, from the marks of 64-byte blocks
// (marks.mark) and the bytes their backslashes escape (escapedBy).
func quoteEnd(b []byte, start int) int {
	mk := markPool.Get().(*marks)
	defer markPool.Put(mk)
	escaped := false // the next block's first byte is escaped
	for base := start; base < len(b); base += 64 * markWords {
		end := min(len(b), base+64*markWords)
		mk.mark(b[base:end])
		for w := range (end - base + 63) / 64 {
			back := mk.back[w]
			if escaped {
				back &^= 1 // an escaped backslash starts nothing
			}
			esc, carry := escapedBy(back)
			if escaped {
				esc |= 1
			}
			escaped = carry
			if q := mk.quote[w] &^ esc; q != 0 {
				return base + 64*w + bits.TrailingZeros64(q)
			}
		}
	}
	return -1
}

// decodedStr reads a string and returns it decoded (into the arena when
// it holds an escape): a name or a type, which are short.
func (r *fieldReader) decodedStr() ([]byte, bool) {
	raw, esc, ok := r.str()
	if !ok || !esc {
		return raw, ok
	}
	from := len(r.arena)
	r.arena = appendDecoded(r.arena, raw)
	return r.arena[from:len(r.arena):len(r.arena)], true
}

// appendDecoded appends the raw content of a JSON string, decoded as
// encoding/json decodes a valid one: escapes, a surrogate pair combined
// and a lone surrogate as U+FFFD. A bad escape (an invalid string) is
// appended as it is. Invalid UTF-8 is left to the caller (appendValidUTF8).
func appendDecoded(dst, raw []byte) []byte {
	for {
		e := bytes.IndexByte(raw, '\\')
		if e < 0 || e+1 >= len(raw) {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:e]...)
		if d := escapeByte[raw[e+1]]; d != 0 {
			dst, raw = append(dst, d), raw[e+2:]
			continue
		}
		if raw[e+1] == 'u' {
			if rn, n, ok := uRune(raw, e); ok {
				dst, raw = utf8.AppendRune(dst, rn), raw[n:]
				continue
			}
		}
		dst, raw = append(dst, raw[e:e+2]...), raw[e+2:]
	}
}

// escapeByte is the byte a two-byte escape decodes to (0 for none).
var escapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// uRune decodes the \u escape at b[j] (and the low half of a surrogate
// pair after it) as encoding/json does: a lone surrogate is U+FFFD.
func uRune(b []byte, j int) (rune, int, bool) {
	r1, ok := hex4(b, j+2)
	if !ok {
		return 0, 0, false
	}
	next := j + 6
	if utf16.IsSurrogate(r1) {
		if next+6 <= len(b) && b[next] == '\\' && b[next+1] == 'u' {
			if r2, ok := hex4(b, next+2); ok {
				if dec := utf16.DecodeRune(r1, r2); dec != utf8.RuneError {
					return dec, next + 6, true
				}
			}
		}
		return utf8.RuneError, next, true
	}
	return r1, next, true
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// appendValidUTF8 appends s with each invalid UTF-8 byte replaced by U+FFFD, as
// encoding/json decodes a string.
func appendValidUTF8(dst, s []byte) []byte {
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}
