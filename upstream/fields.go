package upstream

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The fields a client assembles from a streamed answer's events, in both
// dialects, as the official SDKs (and the worker) assemble them:
//
//   - chat completions (OpenAI): per choice (its "index"), every string
//     member of "delta" ("content", "refusal", "reasoning_content", …),
//     and per tool call of "delta.tool_calls" (its "index"), every string
//     member of "function" ("name", "arguments");
//   - Messages (Anthropic): per content block (the event's "index"), the
//     text of a content_block_start's text or thinking block and of the
//     content_block_delta events after it: "text" of a text_delta,
//     "thinking" of a thinking_delta, "partial_json" of an
//     input_json_delta, "signature" of a signature_delta.
//
// Each such field has its own textWindow, fed the decoded text of each
// event in order, so a key cut into deltas of any size is found in the
// text the client assembles, whatever the events between them carry
// (other fields, other indexes). A field is named exactly as a client
// names it: an event the check cannot read as every client does (a
// repeated member, a member whose name differs only in case from one
// that is read, as encoding/json's case-insensitive match would take it,
// an index that is not a small integer, an index missing where another
// event gave one, a content block started out of order) fails with
// ErrUncheckable; data that is not JSON is skipped, as clients reject it.
// Every other string of an event is checked within the event
// (StreamScanner.checkEvents); no client joins it to another event's.
//
// Why by hand: the reader must see exactly the text encoding/json and
// the SDKs see (a repeated member, which json.Unmarshal silently
// resolves, must be refused), read each event once at the speed of the
// stream, and validate as json.Valid does; FuzzEventFieldsAgreeWithJSON
// holds it to encoding/json.

const (
	// maxFields bounds the assembled fields of one answer: a real answer
	// has a few per choice and per tool call or block.
	maxFields = 1024
	// maxMembers bounds the members of an object whose strings are
	// assembled (a delta, a function, a content block): a real one has
	// a handful, and each is compared with the others.
	maxMembers = 64
	// maxIndex bounds an index: six digits.
	maxIndexDigits = 6
	// maxEventDepth is encoding/json's nesting limit.
	maxEventDepth = 10000
)

// Index levels, for the absent-index rule.
const (
	levelChoice = iota
	levelTool
	levelBlock
	levels
)

// noIndex stands for an absent index in a field's name.
const noIndex = -1

// streamFields holds the field windows of one streamed answer.
type streamFields struct {
	kf      *KeyForms
	m       *matcher
	ent     entityDecoder
	windows map[string]*textWindow
	name    []byte // a field's name, built per string
	rd      fieldReader
	starts  int // content_block_start events so far
	// none and zero record, per level, an absent index and an explicit
	// 0: clients disagree on whether they name one field (the Go SDK's
	// zero value) or two (a JavaScript client's "undefined"), so an
	// answer that uses both fails.
	none, zero [levels]bool
	// collect keeps the preview text of the events read since the last
	// reset in visible: a chat completion's choice 0 "content" and a
	// Messages answer's text blocks, in order.
	collect bool
	visible []byte
}

func newStreamFields(k *KeyForms, m *matcher) *streamFields {
	return &streamFields{kf: k, m: m, windows: make(map[string]*textWindow)}
}

// event reads one event's data and feeds its assembled fields to their
// windows: ErrReflect when a field's text so far holds a form,
// ErrUncheckable as described above, nil otherwise (data that is not
// JSON included).
func (f *streamFields) event(data []byte) error {
	ev, ok, err := f.rd.read(data, f.m.bytes)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	for i := range ev.choices {
		if err := f.choice(&ev.choices[i]); err != nil {
			return err
		}
	}
	switch ev.typ {
	case "content_block_start":
		return f.blockStart(ev)
	case "content_block_delta":
		return f.blockDelta(ev)
	}
	return nil
}

func (f *streamFields) choice(c *choiceFields) error {
	ci, err := f.index(levelChoice, c.index)
	if err != nil {
		return err
	}
	for _, s := range c.delta.strs {
		if err := f.feed(s.text, s.checked, 'c', ci, noIndex, s.name); err != nil {
			return err
		}
		if f.collect && (ci == 0 || ci == noIndex) && s.name == "content" {
			f.visible = append(f.visible, s.text...)
		}
	}
	for _, s := range c.call.strs {
		if err := f.feed(s.text, s.checked, 'f', ci, noIndex, s.name); err != nil {
			return err
		}
	}
	for i := range c.tools {
		t := &c.tools[i]
		ti, err := f.index(levelTool, t.index)
		if err != nil {
			return err
		}
		for _, s := range t.function.strs {
			if err := f.feed(s.text, s.checked, 'c', ci, ti, s.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// The member a Messages block type (content_block_start) and a delta type
// (content_block_delta) assemble; clients skip other types.
var (
	startMember = map[string]string{"text": "text", "thinking": "thinking"}
	deltaMember = map[string]string{
		"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json", "signature_delta": "signature",
	}
)

func (f *streamFields) blockStart(ev *eventFields) error {
	bi, err := f.index(levelBlock, ev.index)
	if err != nil {
		return err
	}
	// Clients append a started block, whatever its index says, and
	// address deltas by index: the two agree only in order.
	if bi != f.starts {
		return ErrUncheckable
	}
	f.starts++
	typ, _ := ev.block.get("type")
	member, ok := startMember[string(typ.text)]
	if !ok {
		return nil
	}
	if err := f.blockText(ev.block, member, bi); err != nil {
		return err
	}
	if member == "thinking" {
		return f.blockText(ev.block, "signature", bi)
	}
	return nil
}

func (f *streamFields) blockDelta(ev *eventFields) error {
	bi, err := f.index(levelBlock, ev.index)
	if err != nil {
		return err
	}
	typ, _ := ev.delta.get("type")
	member, ok := deltaMember[string(typ.text)]
	if !ok {
		return nil
	}
	return f.blockText(ev.delta, member, bi)
}

func (f *streamFields) blockText(o objectStrings, member string, bi int) error {
	s, ok := o.get(member)
	if !ok {
		return nil
	}
	if f.collect && member == "text" {
		f.visible = append(f.visible, s.text...)
	}
	return f.feed(s.text, s.checked, 'b', bi, noIndex, member)
}

// index applies the absent-index rule of level to v.
func (f *streamFields) index(level int, v indexValue) (int, error) {
	switch {
	case v.bad:
		return 0, ErrUncheckable
	case !v.present:
		f.none[level] = true
	case v.n == 0:
		f.zero[level] = true
	}
	if f.none[level] && f.zero[level] {
		return 0, ErrUncheckable
	}
	if !v.present {
		return noIndex, nil
	}
	return v.n, nil
}

// feed adds text to the window of the field named by kind, its indexes
// and member.
func (f *streamFields) feed(text []byte, checked bool, kind byte, i, j int, member string) error {
	if len(f.m.forms) == 0 || len(text) == 0 {
		return nil
	}
	n := append(f.name[:0], kind)
	n = strconv.AppendInt(n, int64(i), 10)
	n = append(n, '.')
	n = strconv.AppendInt(n, int64(j), 10)
	n = append(n, '.')
	n = append(n, member...)
	f.name = n
	w, ok := f.windows[string(n)]
	if !ok {
		if len(f.windows) >= maxFields {
			return ErrUncheckable
		}
		w = newWindow(f.kf, f.m, &f.ent, false)
		f.windows[string(n)] = w
	}
	_, err := w.add(text, checked)
	return err
}

// eventFields is what fieldReader keeps of one event.
type eventFields struct {
	typ     string
	index   indexValue
	choices []choiceFields
	delta   objectStrings // the top-level "delta" (Messages)
	block   objectStrings // "content_block"
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

type stringMember struct {
	name    string
	text    []byte // set once the event is read
	checked bool   // see textWindow.add
	// where the text is: raw (its bytes in the event) or arena[start:end]
	raw        []byte
	start, end int
}

func (o objectStrings) get(name string) (stringMember, bool) {
	for _, s := range o.strs {
		if s.name == name {
			return s, true
		}
	}
	return stringMember{}, false
}

// fieldReader reads one event's data as encoding/json would, validating
// all of it and keeping the parts streamFields assembles. Its buffers are
// reused from event to event.
type fieldReader struct {
	b     []byte
	i     int
	form  *[256]bool // the bytes a form holds: an escape decoding to one is no barrier
	arena []byte     // decoded strings, addressed by offset: it may move as it grows
	ev    eventFields
	bad   bool // ErrUncheckable: the event is JSON the check cannot read as every client does
}

// read reads data. ok is false for data that is not one JSON value (it is
// then skipped); err is ErrUncheckable for JSON the check cannot read as
// every client does.
func (r *fieldReader) read(data []byte, form *[256]bool) (*eventFields, bool, error) {
	r.b, r.i, r.form, r.bad = data, 0, form, false
	r.arena = r.arena[:0]
	ev := &r.ev
	ev.typ, ev.index = "", indexValue{}
	ev.choices, ev.delta.strs, ev.block.strs = ev.choices[:0], ev.delta.strs[:0], ev.block.strs[:0]
	r.ws()
	ok := false
	if r.i < len(r.b) && r.b[r.i] == '{' {
		ok = r.root()
	} else {
		ok = r.value(0)
	}
	r.ws()
	if !ok || r.i != len(r.b) {
		return nil, false, nil
	}
	if r.bad {
		return nil, true, ErrUncheckable
	}
	r.texts(&ev.delta)
	r.texts(&ev.block)
	for i := range ev.choices {
		c := &ev.choices[i]
		r.texts(&c.delta)
		r.texts(&c.call)
		for j := range c.tools {
			r.texts(&c.tools[j].function)
		}
	}
	return ev, true, nil
}

// texts sets the text of o's strings, now that the arena is final.
func (r *fieldReader) texts(o *objectStrings) {
	for i := range o.strs {
		s := &o.strs[i]
		if s.raw != nil {
			s.text = s.raw
		} else {
			s.text = r.arena[s.start:s.end:s.end]
		}
	}
}

func (r *fieldReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// interpreted names, per object kind: a member whose name equals one of
// them only under case folding makes the event uncheckable.
var (
	rootNames   = []string{"type", "index", "choices", "delta", "content_block"}
	choiceNames = []string{"index", "delta"}
	toolNames   = []string{"index", "function"}
)

// members reads an object at r.i (its '{'), calling member with each
// decoded name once the reader stands at the value, which member must
// read. names are the members the caller interprets: a repeated one, or
// one only equal under case folding, marks the event bad.
func (r *fieldReader) members(depth int, names []string, member func(name string) bool) bool {
	if depth >= maxEventDepth {
		return false
	}
	r.i++ // '{'
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == '}' {
		r.i++
		return true
	}
	var seen uint64 // the interpreted names seen
	for {
		if r.i >= len(r.b) || r.b[r.i] != '"' {
			return false
		}
		name, _, ok := r.str(true)
		if !ok {
			return false
		}
		r.ws()
		if r.i >= len(r.b) || r.b[r.i] != ':' {
			return false
		}
		r.i++
		r.ws()
		for k, n := range names {
			if strings.EqualFold(string(name), n) {
				if string(name) != n || seen&(1<<k) != 0 {
					r.bad = true
				}
				seen |= 1 << k
			}
		}
		if !member(string(name)) {
			return false
		}
		r.ws()
		if r.i >= len(r.b) {
			return false
		}
		switch r.b[r.i] {
		case ',':
			r.i++
			r.ws()
		case '}':
			r.i++
			return true
		default:
			return false
		}
	}
}

// elements reads an array at r.i (its '['), calling element for each
// element with the reader at it.
func (r *fieldReader) elements(depth int, element func() bool) bool {
	if depth >= maxEventDepth {
		return false
	}
	r.i++ // '['
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == ']' {
		r.i++
		return true
	}
	for {
		if !element() {
			return false
		}
		r.ws()
		if r.i >= len(r.b) {
			return false
		}
		switch r.b[r.i] {
		case ',':
			r.i++
			r.ws()
		case ']':
			r.i++
			return true
		default:
			return false
		}
	}
}

func (r *fieldReader) at(c byte) bool { return r.i < len(r.b) && r.b[r.i] == c }

func (r *fieldReader) root() bool {
	ev := &r.ev
	return r.members(0, rootNames, func(name string) bool {
		switch name {
		case "type":
			if r.at('"') {
				s, _, ok := r.str(true)
				ev.typ = string(s)
				return ok
			}
		case "index":
			return r.index(&ev.index)
		case "choices":
			if r.at('[') {
				return r.elements(1, func() bool { return r.choice(2) })
			}
		case "delta":
			if r.at('{') {
				return r.strings(1, &ev.delta)
			}
		case "content_block":
			if r.at('{') {
				return r.strings(1, &ev.block)
			}
		}
		return r.value(1)
	})
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
	return r.members(depth, choiceNames, func(name string) bool {
		c := &ev.choices[k]
		switch name {
		case "index":
			return r.index(&c.index)
		case "delta":
			if r.at('{') {
				return r.deltaObject(depth+1, k)
			}
		}
		return r.value(depth + 1)
	})
}

// deltaObject reads a chat completion's delta: its strings, its tool
// calls and its function call (the API's older form of one).
func (r *fieldReader) deltaObject(depth, k int) bool {
	ev := &r.ev
	return r.stringsWith(depth, &ev.choices[k].delta, func(name string) (bool, bool) {
		switch {
		case name == "tool_calls" && r.at('['):
			return true, r.elements(depth+1, func() bool { return r.tool(depth+2, k) })
		case name == "function_call" && r.at('{'):
			return true, r.strings(depth+1, &r.ev.choices[k].call)
		}
		return false, false
	})
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
	return r.members(depth, toolNames, func(name string) bool {
		tf := &r.ev.choices[k].tools[t]
		switch name {
		case "index":
			return r.index(&tf.index)
		case "function":
			if r.at('{') {
				return r.strings(depth+1, &tf.function)
			}
		}
		return r.value(depth + 1)
	})
}

// strings reads an object keeping its string members.
func (r *fieldReader) strings(depth int, o *objectStrings) bool {
	return r.stringsWith(depth, o, func(string) (bool, bool) { return false, false })
}

// stringsWith reads an object keeping its string members; other lets the
// caller read a member itself (handled, ok). Its strings are assembled
// by member name, so every name must be one that no other name equals
// under case folding, which encoding/json's match applies and a
// JavaScript or SDK client does not: a name with an uppercase or
// non-ASCII letter, a repeated name or more than maxMembers members mark
// the event bad.
func (r *fieldReader) stringsWith(depth int, o *objectStrings, other func(name string) (handled, ok bool)) bool {
	var names [maxMembers]string
	n := 0
	return r.members(depth, nil, func(name string) bool {
		switch {
		case n == maxMembers, !foldFree(name):
			r.bad = true
		default:
			for _, m := range names[:n] {
				if m == name {
					r.bad = true
				}
			}
			names[n] = name
			n++
		}
		if handled, ok := other(name); handled {
			return ok
		}
		if !r.at('"') {
			return r.value(depth + 1)
		}
		start := len(r.arena)
		s, checked, ok := r.str(true)
		if !ok {
			return false
		}
		m := stringMember{name: name, checked: checked, start: start, end: len(r.arena)}
		if m.end == m.start {
			m.raw = s[:len(s):len(s)]
			if m.raw == nil {
				m.raw = []byte{}
			}
		}
		o.strs = append(o.strs, m)
		return true
	})
}

// foldFree reports whether name has no uppercase ASCII letter and no
// byte past ASCII: no other such name equals it under case folding
// (strings.EqualFold, which also folds the Kelvin sign and the long s).
func foldFree(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// index reads an index member's value.
func (r *fieldReader) index(v *indexValue) bool {
	start := r.i
	if !r.value(1) {
		return false
	}
	lit := r.b[start:r.i]
	v.present, v.bad, v.n = true, true, 0
	if len(lit) > 0 && len(lit) <= maxIndexDigits && (lit[0] != '0' || len(lit) == 1) {
		n, err := strconv.Atoi(string(lit))
		if err == nil && n >= 0 && strings.Trim(string(lit), "0123456789") == "" {
			v.bad, v.n = false, n
		}
	}
	return true
}

// value reads and validates any JSON value.
func (r *fieldReader) value(depth int) bool {
	if r.i >= len(r.b) {
		return false
	}
	switch c := r.b[r.i]; {
	case c == '{':
		return r.members(depth, nil, func(string) bool { return r.value(depth + 1) })
	case c == '[':
		return r.elements(depth, func() bool { return r.value(depth + 1) })
	case c == '"':
		_, _, ok := r.str(false)
		return ok
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

// str reads a string at r.i (its '"'). A string without escapes or
// invalid UTF-8 is returned as its raw bytes; with keep, any other is
// decoded (as encoding/json decodes it) into the arena and returned from
// there, valid until the arena grows; without keep it is only validated
// (and the result is nil unless raw).
func (r *fieldReader) str(keep bool) ([]byte, bool, bool) {
	r.i++ // '"'
	start := r.i
	j := stringStop(r.b, r.i)
	if j < len(r.b) && r.b[j] == '"' {
		raw := r.b[start:j]
		r.i = j + 1
		if !utf8.Valid(raw) {
			if !keep {
				return nil, false, true
			}
			from := len(r.arena)
			r.arena = appendValidUTF8(r.arena, raw)
			return r.arena[from:], false, true
		}
		return raw, true, true
	}
	from := len(r.arena)
	checked := true
	for first := true; ; first = false {
		if !first {
			j = stringStop(r.b, r.i)
		}
		if j >= len(r.b) || r.b[j] < 0x20 {
			return nil, false, false
		}
		if keep {
			r.arena = append(r.arena, r.b[r.i:j]...)
		}
		if r.b[j] == '"' {
			r.i = j + 1
			break
		}
		// An escape.
		if j+1 >= len(r.b) {
			return nil, false, false
		}
		var dec [utf8.UTFMax]byte
		n := 0
		switch e := r.b[j+1]; e {
		case '"', '\\', '/':
			dec[0], n = e, 1
			r.i = j + 2
		case 'b':
			dec[0], n, r.i = '\b', 1, j+2
		case 'f':
			dec[0], n, r.i = '\f', 1, j+2
		case 'n':
			dec[0], n, r.i = '\n', 1, j+2
		case 'r':
			dec[0], n, r.i = '\r', 1, j+2
		case 't':
			dec[0], n, r.i = '\t', 1, j+2
		case 'u':
			rn, next, ok := uRune(r.b, j)
			if !ok {
				return nil, false, false
			}
			n, r.i = utf8.EncodeRune(dec[:], rn), next
		default:
			return nil, false, false
		}
		for _, c := range dec[:n] {
			if r.form != nil && r.form[c] {
				checked = false
			}
		}
		if keep {
			r.arena = append(r.arena, dec[:n]...)
		}
	}
	if !keep {
		return nil, false, true
	}
	out := r.arena[from:]
	if !utf8.Valid(out) {
		fixed := appendValidUTF8(nil, out)
		r.arena = append(r.arena[:from], fixed...)
		out, checked = r.arena[from:], false
	}
	return out, checked, true
}

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

// appendValidUTF8 appends s with each invalid byte replaced by U+FFFD, as
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

// stringStop returns the index of the first byte of b from i on that
// ends a plain run inside a JSON string: a quote, a backslash or a
// control byte; len(b) when there is none. Eight bytes at a time.
func stringStop(b []byte, i int) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q := w ^ ('"' * ones)
		bs := w ^ ('\\' * ones)
		// A byte is marked when it is zero in q or bs, or below 0x20.
		m := (q - ones) &^ q
		m |= (bs - ones) &^ bs
		m |= (w - 0x20*ones) &^ w
		if m&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(b)
}
