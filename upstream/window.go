package upstream

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
)

// This file is the check of a text that arrives in pieces: the text a
// client assembles from the deltas of a streamed answer (a content
// field, a tool call's argument fragments), and the preview a guest
// watches grow. A key cut into deltas of a few bytes is contiguous in
// neither the raw stream (the bytes between two deltas are the JSON and
// SSE framing of the next event) nor any one event, only in the text the
// client builds; so that text is checked, as it grows, by a window that
// carries what a form completed by later pieces could begin with.

// ErrUncheckable fails a streamed answer whose assembled text cannot be
// checked within the window's bounds: a field the check cannot tell apart
// from another (a repeated member, a member name that only differs in
// case, an index that is not a small integer), more assembled fields than
// maxFields, or a held tail that character references padded past
// maxHeld. No real model answer is shaped so; the check fails closed.
var ErrUncheckable = fmt.Errorf("%w: streamed answer cannot be checked", rtsandbox.ErrUpstream)

// heldFactor bounds what a window holds: at most heldFactor raw bytes for
// each byte of the decoded text it must keep (hold), plus a reference in
// progress (maxPending). HTML character references make a raw text longer
// than its decoded text ("&#x73;" is six bytes for one); real text stays
// far below 16 bytes a byte, while a reference padded with zeros
// ("&#0000000115;") could make the held tail as long as the stream, and
// the check of each piece costs the held tail's length.
const (
	heldFactor = 16
	maxPending = 64
)

// textWindow checks one text that arrives in pieces for the forms of a
// key, as CheckText would check the text assembled so far, at a cost
// linear in the pieces: it keeps held, the shortest tail of the text that
// a form completed by a later piece could begin in, both as the raw text
// and as the text with its HTML character references decoded, and
// searches each new piece together with it. What it no longer holds is
// released: no later piece can make it part of a form.
//
// held starts where no character reference is cut: at the text's start or
// at a cut made by cut, which never falls inside a reference span.
type textWindow struct {
	m    *matcher
	ent  *entityDecoder // shared by the windows of one stream, used by one goroutine
	hold int            // the longest form less one byte (KeyForms.Hold)
	max  int            // the bound on held
	// release makes add return the released text, cut at a rune
	// boundary; without it add skips building the released text.
	release bool
	held    []byte
	buf     []byte   // the held text and the new piece, reused
	spans   [][2]int // cut's scratch
}

// newWindow returns a window of k's forms sharing m and ent.
func newWindow(k *KeyForms, m *matcher, ent *entityDecoder, release bool) *textWindow {
	hold := k.Hold()
	return &textWindow{m: m, ent: ent, hold: hold, max: heldFactor*hold + maxPending, release: release}
}

// add checks the text assembled so far, which ends in p, and returns what
// the window releases (valid until the next call; nil unless release):
// ErrReflect when it holds a form, raw or with its references decoded,
// and ErrUncheckable when the held tail would pass its bound. checked
// says that every form inside p alone was already searched for in the raw
// stream (p's bytes are contiguous there, or joined by escapes that
// decode to no byte a form holds): only the forms that begin in the held
// tail are then looked for.
func (w *textWindow) add(p []byte, checked bool) ([]byte, error) {
	if len(w.m.forms) == 0 {
		return p, nil // no key: nothing to find, nothing to hold
	}
	if !w.release && checked && len(p) >= w.hold && bytes.IndexByte(w.held, '&') < 0 && bytes.IndexByte(p, '&') < 0 {
		// The common case of a long plain delta: only the junction.
		j := append(append(w.buf[:0], w.held...), p[:w.hold]...)
		w.buf = j
		if w.m.contains(j) {
			return nil, ErrReflect
		}
		w.held = append(w.held[:0], p[len(p)-w.hold:]...)
		return nil, nil
	}
	s := append(append(w.buf[:0], w.held...), p...)
	w.buf = s
	n := len(w.held)
	from, to := max(0, n-w.hold), len(s)
	if checked {
		to = min(to, n+w.hold)
	}
	if w.m.contains(s[from:to]) {
		return nil, ErrReflect
	}
	amp := bytes.IndexByte(s, '&') >= 0
	if amp && w.m.containsDecoded(w.ent, s, false) {
		return nil, ErrReflect
	}
	c := len(s) - w.hold
	if amp {
		c = w.cut(s)
	}
	c = max(c, 0)
	if w.release {
		for c > 0 && c < len(s) && !utf8.RuneStart(s[c]) {
			c--
		}
	}
	if len(s)-c > w.max {
		return nil, ErrUncheckable
	}
	w.held = append(w.held[:0], s[c:]...)
	if !w.release {
		return nil, nil
	}
	return s[:c], nil
}

// reset forgets the held tail: the text goes on after a barrier, a byte
// no form and no character reference holds, so nothing before it can be
// part of a form with what follows.
func (w *textWindow) reset() { w.held = w.held[:0] }

// flush returns the held tail of a text that ended and forgets it: no
// later piece can complete a form in it, and it was checked when it came.
func (w *textWindow) flush() []byte {
	out := w.held
	w.held = nil
	return out
}

// cut returns where the held tail of s starts: no later than the last
// hold raw bytes, nor than the raw text of the last hold decoded bytes
// (the text with its references decoded as html.UnescapeString does), nor
// than a reference that reaches the end of s unfinished (more text may
// change what it decodes to); and never inside a reference span.
func (w *textWindow) cut(s []byte) int {
	spans := w.spans[:0]
	for i := 0; ; {
		j := bytes.IndexByte(s[i:], '&')
		if j < 0 {
			break
		}
		i += j
		n := entitySpan(s[i:])
		spans = append(spans, [2]int{i, i + n})
		i += n
	}
	w.spans = spans
	c := len(s) - w.hold
	if last := spans[len(spans)-1]; last[1] == len(s) && s[len(s)-1] != ';' {
		c = min(c, last[0]) // a reference in progress
	}
	// The raw text of the last hold decoded bytes, walking back over
	// the literal runs (a byte each) and the spans (what they decode to).
	need, pos := w.hold, len(s)
	for k := len(spans) - 1; k >= 0 && need > 0; k-- {
		sp := spans[k]
		lit := pos - sp[1]
		if lit >= need {
			pos -= need
			need = 0
			break
		}
		need -= lit
		need -= w.decodedLen(s[sp[0]:sp[1]], sp[1] < len(s))
		pos = sp[0]
	}
	if need > 0 {
		pos = max(0, pos-need)
	}
	c = min(c, pos)
	for _, sp := range spans { // never inside a span
		if sp[0] < c && c < sp[1] {
			c = sp[0]
			break
		}
	}
	return c
}

// decodedLen is the length of what one reference span decodes to.
func (w *textWindow) decodedLen(span []byte, followed bool) int {
	if tooShort(span) {
		return len(span)
	}
	return len(w.ent.span(span, followed))
}

// TextHold checks a text that arrives in pieces, such as the text of a
// streamed answer a guest watches grow, for a key's forms, and releases
// only what no later piece can make part of one: a form split across any
// number of pieces is refused before any of it is released, as CheckText
// would refuse the text assembled so far. It holds at most a short tail
// (the longest form, or its text as character references, and a
// reference in progress); a text whose tail grows past that bound fails
// with ErrUncheckable. It prints as its type's name only.
type TextHold struct {
	w   *textWindow
	ent entityDecoder
	err error
}

// TextHold returns a hold of the key's forms for one text.
func (k *KeyForms) TextHold() *TextHold {
	h := &TextHold{}
	h.w = newWindow(k, k.matcher(), &h.ent, true)
	return h
}

// Add checks the text so far, which ends in piece, and returns the part
// that may be shown now (cut at a rune boundary), or the error that
// stopped it: ErrReflect or ErrUncheckable, and every later call fails
// too.
func (h *TextHold) Add(piece string) (string, error) {
	if h.err != nil {
		return "", h.err
	}
	out, err := h.w.add([]byte(piece), false)
	if err != nil {
		h.err = err
		h.w.held = nil
		return "", err
	}
	return string(out), nil
}

// Flush returns the held tail of a text that ended cleanly ("" after an
// error): it was checked when it came, and no more text can complete a
// form.
func (h *TextHold) Flush() string {
	if h.err != nil {
		return ""
	}
	return string(h.w.flush())
}

// String keeps the key's forms out of any print.
func (h *TextHold) String() string { return "upstream.TextHold" }

// GoString is String for %#v.
func (h *TextHold) GoString() string { return h.String() }
