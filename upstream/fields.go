package upstream

import (
	"bytes"
	"strconv"
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
// Most of a long delta need not be looked at again: when the event's
// escapes and character references reveal nothing (KeyForms.revealing,
// which the event's own check computes), every form inside one string is
// in the raw stream, which the byte scan searched, and an escape is a
// barrier no form crosses. Only the runs at a string's two ends can join
// another event's text: a window is fed the run before its first escape
// (at most headRun bytes), then, after a barrier, the run after its last
// escape (at most tailRun bytes). An event that reveals something has its
// strings decoded whole.
//
// Why by hand: the reader must see exactly the text encoding/json and the
// SDKs see (a repeated member, which json.Unmarshal silently resolves,
// must be refused) and read each event once at the speed of the stream;
// no JSON library reports repeated members or leaves strings undecoded.
// FuzzFieldReaderAgreesWithJSON holds it to encoding/json.

const (
	// maxFields bounds the assembled fields of one answer: a real answer
	// has a few per choice and per tool call or block.
	maxFields = 1024
	// maxMembers bounds the members of an object whose strings are
	// assembled (a delta, a function, a content block): a real one has
	// a handful, and each is compared with the others.
	maxMembers = 64
	// maxIndexDigits bounds an index: six digits.
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
	// last is the window fed last, and its field: a stream's deltas
	// mostly feed one field in a row.
	last struct {
		kind   byte
		i, j   int
		member []byte
		w      *textWindow
	}
	rd     fieldReader
	starts int // content_block_start events so far
	// none and zero record, per level, an absent index and an explicit
	// 0: clients disagree on whether they name one field (the Go SDK's
	// zero value) or two (a JavaScript client's "undefined"), so an
	// answer that uses both fails.
	none, zero [levels]bool
	// collect keeps the preview text of the events read since the last
	// reset in visible: a chat completion's choice 0 "content" and a
	// Messages answer's text blocks, in order, decoded exactly.
	collect bool
	visible []byte
	// exact decodes every string whole and exactly (invalid UTF-8 as
	// U+FFFD): a form holds a byte past ASCII, which invalid UTF-8 could
	// hide or reveal.
	exact bool
	text  []byte // a decoded string, reused
}

func newStreamFields(k *KeyForms, m *matcher) *streamFields {
	f := &streamFields{kf: k, m: m, windows: make(map[string]*textWindow)}
	for c := utf8.RuneSelf; c < 256; c++ {
		f.exact = f.exact || m.bytes[c]
	}
	return f
}

// event reads one event's data and feeds its assembled fields to their
// windows: ErrReflect when a field's text so far holds a form,
// ErrUncheckable as described above, nil otherwise (data that is not
// JSON included). revealing is KeyForms.revealing of data. read reports
// whether data was read as JSON the check can read (f.rd.ev then holds
// what was found), whatever the windows made of it.
func (f *streamFields) event(data []byte, revealing bool) (read bool, err error) {
	ev, ok, err := f.rd.read(data)
	if err != nil || !ok {
		return false, err
	}
	return true, f.fields(ev, revealing)
}

// fields feeds the assembled fields of one event read to their windows.
func (f *streamFields) fields(ev *eventFields, revealing bool) error {
	for i := range ev.choices {
		if err := f.choice(&ev.choices[i], revealing); err != nil {
			return err
		}
	}
	switch string(ev.typ) {
	case "content_block_start":
		return f.blockStart(ev, revealing)
	case "content_block_delta":
		return f.blockDelta(ev, revealing)
	}
	return nil
}

func (f *streamFields) choice(c *choiceFields, rev bool) error {
	ci, err := f.index(levelChoice, c.index)
	if err != nil {
		return err
	}
	for _, s := range c.delta.strs {
		if err := f.feed(s, rev, 'c', ci, noIndex); err != nil {
			return err
		}
		if f.collect && (ci == 0 || ci == noIndex) && string(s.name) == "content" {
			f.show(s)
		}
	}
	for _, s := range c.call.strs {
		if err := f.feed(s, rev, 'f', ci, noIndex); err != nil {
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
			if err := f.feed(s, rev, 'c', ci, ti); err != nil {
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

func (f *streamFields) blockStart(ev *eventFields, rev bool) error {
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
	member, ok := startMember[f.typeOf(ev.block)]
	if !ok {
		return nil
	}
	if err := f.blockText(ev.block, member, bi, rev); err != nil {
		return err
	}
	if member == "thinking" {
		return f.blockText(ev.block, "signature", bi, rev)
	}
	return nil
}

func (f *streamFields) blockDelta(ev *eventFields, rev bool) error {
	bi, err := f.index(levelBlock, ev.index)
	if err != nil {
		return err
	}
	member, ok := deltaMember[f.typeOf(ev.delta)]
	if !ok {
		return nil
	}
	return f.blockText(ev.delta, member, bi, rev)
}

// typeOf is the decoded "type" of o ("" when it has none).
func (f *streamFields) typeOf(o objectStrings) string {
	s, ok := o.get("type")
	switch {
	case !ok:
		return ""
	case !s.esc:
		return string(s.raw)
	}
	return string(appendDecoded(nil, s.raw))
}

func (f *streamFields) blockText(o objectStrings, member string, bi int, rev bool) error {
	s, ok := o.get(member)
	if !ok {
		return nil
	}
	if f.collect && member == "text" {
		f.show(s)
	}
	return f.feed(s, rev, 'b', bi, noIndex)
}

// show appends the decoded text of s to the preview text.
func (f *streamFields) show(s stringMember) {
	from := len(f.visible)
	f.visible = appendDecoded(f.visible, s.raw)
	if !utf8.Valid(f.visible[from:]) {
		fixed := appendValidUTF8(nil, f.visible[from:])
		f.visible = append(f.visible[:from], fixed...)
	}
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

// feed adds the text of s to the window of the field named by kind, its
// indexes and s's name: see the file comment.
func (f *streamFields) feed(s stringMember, rev bool, kind byte, i, j int) error {
	if len(f.m.forms) == 0 || len(s.raw) == 0 {
		return nil
	}
	w, err := f.window(kind, i, j, s.name)
	if err != nil {
		return err
	}
	raw := s.raw
	// An event that reveals something, a key with bytes past ASCII, a
	// reference the held text leaves unfinished, or one this text ends
	// in that an escaped '&' begins (the one escape that is no barrier
	// in an event that reveals nothing: the reference it begins may end
	// in a later piece): the whole text.
	if f.exact || rev || pendingRef(w.held) >= 0 || s.esc && escapedPendingRef(raw) {
		f.text = appendDecoded(f.text[:0], raw)
		if f.exact && !utf8.Valid(f.text) {
			f.text = appendValidUTF8(nil, f.text)
		}
		_, err := w.add(f.text, false)
		return err
	}
	head, tail := w.hold+maxPending+1, w.hold+maxPending
	if !s.esc && len(raw) <= head+tail {
		_, err := w.add(raw, true)
		return err
	}
	// Only the two end runs, with a barrier between them.
	end := len(raw)
	if s.esc {
		end = bytes.IndexByte(raw, '\\')
	}
	if _, err := w.add(raw[:min(end, head)], true); err != nil {
		return err
	}
	w.reset()
	from := tailStart(raw, tail)
	if a := pendingRef(raw); a >= 0 && a < from {
		from = a // a reference the next piece may finish, whole
	}
	_, err = w.add(raw[from:], true)
	return err
}

// tailStart returns where the run fed as a long string's end begins:
// its last n bytes, but after its last escape, and never inside a
// reference span the cut would split (back to its '&', found within
// maxPending bytes, when no escape is in between).
func tailStart(raw []byte, n int) int {
	from := max(0, len(raw)-n)
	lo := max(0, from-6) // an escape is at most six bytes
	if k := bytes.LastIndexByte(raw[lo:], '\\'); k >= 0 {
		from = max(from, escapeEnd(raw, lo+k))
	}
	j := from
	for j > 0 && from-j < maxPending && spanByte(raw[j-1]) {
		j--
	}
	if j > 0 && raw[j-1] == '&' && j < from {
		from = j - 1
	}
	return from
}

// escapeEnd returns where the escape that holds the backslash at k ends:
// k starts one, or ends one (the second of an escaped backslash).
func escapeEnd(raw []byte, k int) int {
	s := k
	for s > 0 && raw[s-1] == '\\' {
		s--
	}
	switch {
	case (k-s+1)%2 == 0:
		return k + 1
	case k+1 < len(raw) && raw[k+1] == 'u':
		return min(k+6, len(raw))
	}
	return min(k+2, len(raw))
}

// spanByte reports whether c may continue a character reference span
// (entitySpan): a letter, a digit or '#'.
func spanByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '#'
}

// escapedPendingRef reports whether the raw content of a JSON string ends
// in a character reference whose '&' is the escape \u0026.
func escapedPendingRef(raw []byte) bool {
	i := len(raw)
	for i > 0 && spanByte(raw[i-1]) {
		i-- // the escape's own letters and digits included
	}
	return i > 0 && raw[i-1] == '\\' && bytes.HasPrefix(raw[i:], []byte("u0026"))
}

// pendingRef returns where a character reference that reaches the end of
// s unfinished begins (its '&'), or -1: more text may change what it
// decodes to, so the window must hold it whole.
func pendingRef(s []byte) int {
	i := len(s)
	for i > 0 && spanByte(s[i-1]) {
		i--
	}
	switch {
	case i > 0 && s[i-1] == '&':
		return i - 1
	}
	return -1
}

// window returns the window of the field named by kind, its indexes and
// member, made at its first use.
func (f *streamFields) window(kind byte, i, j int, member []byte) (*textWindow, error) {
	l := &f.last
	if l.w != nil && l.kind == kind && l.i == i && l.j == j && string(l.member) == string(member) {
		return l.w, nil
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
			return nil, ErrUncheckable
		}
		w = newWindow(f.kf, f.m, &f.ent, false)
		f.windows[string(n)] = w
	}
	l.kind, l.i, l.j, l.w, l.member = kind, i, j, w, append(l.member[:0], member...)
	return w, nil
}
