package upstream

import (
	"bytes"
	"crypto/subtle"
	"math"
	"math/bits"
	"sync"
	"unicode/utf8"
)

// KeyForms is a credential's forms made ready once for every check of one
// call or one turn: the reduced forms the matcher looks for (searchForms),
// the JSON scan's tables and the matcher's filters, each filter built at
// its first use. A broker call checks its answer's headers, its body and
// the text it previews against the same key, and a turn makes many calls
// with it: making the forms costs a few microseconds and two dozen
// allocations each time, about what the scan of a 16 KiB answer costs.
//
// It is read-only once made and may be shared between goroutines. It holds
// the key and what is derived from it: keep it no longer than the call or
// turn whose key it is. It prints as its type's name only.
type KeyForms struct {
	key     string
	base    matcher // the forms, without a filter
	longest int     // the longest form searched for
	tab     scanTables
	hold    struct {
		once sync.Once
		n    int // the longest form of Forms, less one byte
	}
	filters [2]struct {
		once sync.Once
		bits []uint64
	}
}

// NewKeyForms makes key's forms ready; an empty key finds nothing.
func NewKeyForms(key string) *KeyForms {
	k := keyFormsOf(searchForms(key))
	k.key = key
	return k
}

// keyFormsOf makes forms ready, as searchForms returns them.
func keyFormsOf(forms [][]byte) *KeyForms {
	k := &KeyForms{}
	m := &k.base
	m.forms, m.bytes, m.kf = forms, new([256]bool), k
	if len(forms) > 0 {
		m.minLen = len(forms[0])
	}
	for _, f := range forms {
		m.minLen = min(m.minLen, len(f))
		k.longest = max(k.longest, len(f))
		for _, c := range f {
			m.bytes[c] = true
		}
	}
	if m.minLen >= minGramLen {
		m.step = m.minLen - gram + 1
	}
	k.tab.fill(m)
	return k
}

// For reports whether k was made for key (in constant time), so that a
// holder can tell when the key it is asked to check changed.
func (k *KeyForms) For(key string) bool {
	return subtle.ConstantTimeCompare([]byte(k.key), []byte(key)) == 1
}

// Hold is the length of the longest form of Forms less one byte: a text
// checked piece by piece can release all but that many bytes of its end
// (a form that the next piece completes begins in them).
func (k *KeyForms) Hold() int {
	k.hold.once.Do(func() {
		if k.key != "" {
			for _, f := range keyForms([]byte(k.key), true) {
				k.hold.n = max(k.hold.n, len(f)-1)
			}
		}
	})
	return k.hold.n
}

// String keeps the key's forms out of any print.
func (k *KeyForms) String() string { return "upstream.KeyForms" }

// GoString is String for %#v.
func (k *KeyForms) GoString() string { return k.String() }

// matcher returns a matcher of the forms for one text or stream.
func (k *KeyForms) matcher() *matcher {
	m := k.base
	return &m
}

// filter returns the filter of 2^log bits (log 13 or 16) of every 8-byte
// window of every form, built at the first call.
func (k *KeyForms) filter(log uint) []uint64 {
	f := &k.filters[0]
	if log > 13 {
		f = &k.filters[1]
	}
	f.once.Do(func() {
		f.bits = make([]uint64, 1<<log/64)
		for _, form := range k.base.forms {
			for i := 0; i+gram <= len(form); i++ {
				h := slot(load64(form[i:]), 64-log)
				f.bits[h/64] |= 1 << (h % 64)
			}
		}
	})
	return f.bits
}

// scanTables are the scan's tables for one set of forms (see scanner).
type scanTables struct {
	// keep marks the bytes a form or a character reference can hold; an
	// escape that decodes to none of them is a barrier (see str). With no
	// forms to look for, no byte is kept.
	keep     [256]bool
	keepHigh bool // keep marks a byte of 0x80 or more
	// escLen maps the byte after a backslash to 2 when that is a
	// barrier escape of two bytes, to 6 for 'u' (see uBarrier) and to 0
	// otherwise.
	escLen [256]uint8
	// minLen is the length of the shortest form: a shorter piece cannot
	// hold one. With no forms it is larger than any piece.
	minLen int
	// fast is set when str may take a whole word of barrier escapes and
	// short pieces at once (see block): '"' and '\\' are barriers.
	fast bool
	// uOnly is set when every two-byte escape is a barrier: only a \u
	// escape can decode to a byte a form or a reference holds.
	uOnly bool
	// runShifts are the shifts after which a word holds a bit only
	// where a run of minLen set bits starts (see checkPieces); nil when
	// minLen is larger than a word, empty for a one-byte form.
	runShifts []uint
}

func (t *scanTables) fill(m *matcher) {
	t.minLen = math.MaxInt
	if len(m.forms) > 0 {
		t.minLen = m.minLen
		t.keep = *m.bytes
		for _, c := range []byte("&#;0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") {
			t.keep[c] = true
		}
		for c := utf8.RuneSelf; c < len(t.keep); c++ {
			t.keepHigh = t.keepHigh || t.keep[c]
		}
	}
	for c, v := range simpleEscapes {
		if v != 0 && !t.keep[v] {
			t.escLen[c] = 2
		}
	}
	t.escLen['u'] = 6
	t.fast = t.escLen['"'] == 2 && t.escLen['\\'] == 2
	t.uOnly = t.fast
	for _, c := range []byte("/bfnrt") {
		t.uOnly = t.uOnly && t.escLen[c] == 2
	}
	if t.minLen <= 64 {
		t.runShifts = []uint{}
		for n := 1; n < t.minLen; {
			s := min(n, t.minLen-n)
			t.runShifts = append(t.runShifts, uint(s))
			n += s
		}
	}
}

// revealing reports whether decoding the JSON strings of data, and their
// character references, could reveal a form that data's raw bytes do not
// hold: data holds an escape that decodes to a byte a form or a reference
// holds, or a reference that decodes to a byte a form holds. Where it
// does not, every decoded string is raw pieces joined by bytes no form or
// reference holds, and every reference in them decodes to itself or to
// bytes no form holds, so a form in the decoded text is in data itself,
// which the stream's raw search has checked: event mode then skips the
// decoded check (StreamScanner.checkEvents), which costs several times
// more. A bad escape reveals nothing, since the decoded check stops at it;
// revealing may still count one, which only costs that check. r keeps the
// verdicts on references across the calls of one stream.
func (k *KeyForms) revealing(data []byte, r *revealer) bool {
	back := bytes.IndexByte(data, '\\') >= 0
	if !back && bytes.IndexByte(data, '&') < 0 {
		return false // prose, as most text deltas are
	}
	for i := 0; ; {
		j := bytes.IndexByte(data[i:], '&')
		if j < 0 {
			break
		}
		i += j
		span := data[i : i+entitySpan(data[i:])]
		if k.revealingSpan(span, r) {
			return true
		}
		i += len(span)
	}
	return back && k.revealingEscape(data, r)
}

// revealer is the state of KeyForms.revealing across the events of one
// stream: its reference decoder and the verdict on each reference span
// seen, so that a stream which repeats "&nbsp;" decodes it once.
type revealer struct {
	d     entityDecoder
	spans map[string]bool // span → revealingSpan, at most maxCachedSpans
}

// revealingSpan reports whether the reference span (as entitySpan cuts
// it) decodes, with more text after it or not, to bytes other than itself
// that a form holds.
func (k *KeyForms) revealingSpan(span []byte, r *revealer) bool {
	if tooShort(span) {
		return false
	}
	if v, ok := r.spans[string(span)]; ok {
		return v
	}
	v := false
	for _, followed := range []bool{true, false} {
		if dec := r.d.span(span, followed); dec != string(span) && !barrier(dec, k.base.bytes) {
			v = true
			break
		}
	}
	if len(r.spans) < maxCachedSpans {
		if r.spans == nil {
			r.spans = make(map[string]bool)
		}
		r.spans[string(span)] = v
	}
	return v
}

// revealingAmp reports whether the '&' that the escape at data[i] (\u0026,
// which Go's encoder writes for every '&') decodes to starts a reference
// that decodes to a byte a form holds. The reference is '&' and the raw
// reference bytes after the escape: an escape after them decodes to a byte
// no reference holds, or is no barrier and revealing for itself.
func (k *KeyForms) revealingAmp(data []byte, i int, r *revealer) bool {
	rest := data[i+6:]
	var buf [48]byte // '&' and the longest span html.UnescapeString reads
	ref := append(append(buf[:0], '&'), rest[:min(len(rest), len(buf)-8)]...)
	return k.revealingSpan(ref[:entitySpan(ref)], r)
}

// revealingEscape reports whether data holds an escape that is no barrier
// (see scanner.str), or, unless revealingU decides, a bad one; a \u0026
// only when its '&' starts a revealing reference (revealingAmp). As in
// scanner.block, the escaped bytes of each word are found at once, and an
// escaped '"' or '\\' needs no look when both are barriers.
func (k *KeyForms) revealingEscape(data []byte, rv *revealer) bool {
	if k.tab.uOnly {
		return k.revealingU(data, rv)
	}
	t := &k.tab
	mk := markPool.Get().(*marks)
	defer markPool.Put(mk)
	escaped := false // the next word's first byte is an escaped byte
	for base := 0; base < len(data); base += 64 * markWords {
		end := min(len(data), base+64*markWords)
		mk.mark(data[base:end])
		for w := range (end - base + 63) / 64 {
			bs, qs := mk.back[w], mk.quote[w]
			starts := bs
			if escaped {
				starts &^= 1 // an escaped backslash starts nothing
			}
			esc, carry := escapedBy(starts)
			if escaped {
				esc |= 1
			}
			if t.fast {
				esc &^= qs | bs
			}
			wb := base + 64*w
			for ; esc != 0; esc &= esc - 1 {
				j := wb + bits.TrailingZeros64(esc) // the escaped byte
				if j >= len(data) {
					return true // data ends in a backslash
				}
				switch t.escLen[data[j]] {
				case 2:
					continue
				case 6:
					if r := t.uBarrierRune(data, j+1); r == -1 || r == '&' && !k.revealingAmp(data, j-1, rv) {
						continue
					}
				}
				return true
			}
			escaped = carry
		}
	}
	return escaped // data ends in a backslash
}

// revealingU is revealingEscape for forms whose tables are uOnly: only a
// \u escape can reveal anything, so it looks at those alone, found from
// the marks of the backslashes and of the 'u' bytes (markEscapes) without
// a look at any other escape. A bad escape, or data that ends in a
// backslash, reveals nothing: the decoded check stops there
// (decodePiece's badString) and has then checked only what the raw
// search saw.
func (k *KeyForms) revealingU(data []byte, rv *revealer) bool {
	t := &k.tab
	mk := markPool.Get().(*marks)
	defer markPool.Put(mk)
	escaped := false // the next word's first byte is an escaped byte
	for base := 0; base < len(data); base += 64 * markWords {
		end := min(len(data), base+64*markWords)
		mk.markEscapes(data[base:end])
		for w := range (end - base + 63) / 64 {
			starts, us := mk.back[w], mk.u[w]
			if escaped {
				starts &^= 1 // an escaped backslash starts nothing
			}
			if us == 0 && starts>>63 == 0 { // no 'u', no escape of the next word
				escaped = false
				continue
			}
			esc, carry := escapedBy(starts)
			if escaped {
				esc |= 1
			}
			escaped = carry
			wb := base + 64*w
			for ue := esc & us; ue != 0; ue &= ue - 1 {
				p := wb + bits.TrailingZeros64(ue) + 1 // the escape's digits
				// Past U+00FF an escape decodes to bytes of 0x80 or more,
				// which no form holds unless keepHigh, or it is bad.
				if p+4 > len(data) || !t.keepHigh && (data[p] != '0' || data[p+1] != '0') {
					continue
				}
				if r := t.uBarrierRune(data, p); r >= 0 && (r != '&' || k.revealingAmp(data, p-2, rv)) {
					return true
				}
			}
		}
	}
	return false
}

// uBarrierRune returns -1 when the \u escape whose four digits start at
// b[p] is a valid barrier (uBarrierAt), and otherwise the code point it
// decodes to, or -2 for a bad escape.
func (t *scanTables) uBarrierRune(b []byte, p int) rune {
	if p+4 > len(b) {
		return -2
	}
	h := b[p : p+4 : p+4]
	d0, d1, d2, d3 := hexDigits[h[0]], hexDigits[h[1]], hexDigits[h[2]], hexDigits[h[3]]
	if d0|d1|d2|d3 < 0 {
		return -2
	}
	r := rune(d0)<<12 | rune(d1)<<8 | rune(d2)<<4 | rune(d3)
	if r < utf8.RuneSelf && !t.keep[r] || r >= utf8.RuneSelf && !t.keepHigh {
		return -1
	}
	return r
}

// uBarrierAt reports whether the \u escape whose four digits start at
// b[p] is a valid barrier, taken alone: a code point outside ASCII when no
// form holds such bytes (a surrogate too, paired or not: it decodes to
// bytes outside ASCII either way), or an ASCII byte no form holds.
func (t *scanTables) uBarrierAt(b []byte, p int) bool { return t.uBarrierRune(b, p) == -1 }
