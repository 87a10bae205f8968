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
// holds (or a bad one), or a reference that decodes to a byte a form holds.
// Where it does not, every decoded string is raw pieces joined by bytes no
// form or reference holds, and every reference in them decodes to itself
// or to bytes no form holds, so a form in the decoded text is in data
// itself, which the stream's raw search has checked: event mode then
// skips the decoded check (StreamScanner.checkEvents), which costs several
// times more.
func (k *KeyForms) revealing(data []byte) bool {
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
		n := entitySpan(data[i:])
		for _, followed := range []bool{true, false} {
			if dec := decodeSpan(data[i:i+n], followed); dec != string(data[i:i+n]) && !barrier(dec, k.base.bytes) {
				return true
			}
		}
		i += n
	}
	return back && k.tab.revealingEscape(data)
}

// revealingEscape reports whether data holds an escape that is no barrier
// (see scanner.str), or a bad one.
func (t *scanTables) revealingEscape(data []byte) bool {
	mk := markPool.Get().(*marks)
	defer markPool.Put(mk)
	escaped := false // the next word's first byte is an escape's letter
	for base := 0; base < len(data); base += 64 * markWords {
		end := min(len(data), base+64*markWords)
		mk.mark(data[base:end])
		for w := range (end - base + 63) / 64 {
			bs := mk.back[w]
			if escaped {
				bs &^= 1 // an escaped backslash starts nothing
			}
			esc, carry := escapedBy(bs)
			wb := base + 64*w
			for starts := bs &^ esc; starts != 0; starts &= starts - 1 {
				if !t.barrierEscape(data, wb+bits.TrailingZeros64(starts)) {
					return true
				}
			}
			escaped = carry
		}
	}
	return false
}

// barrierEscape reports whether the escape at b[i] (a backslash) is a
// valid barrier (see scanner.str).
func (t *scanTables) barrierEscape(b []byte, i int) bool {
	if i+1 >= len(b) {
		return false
	}
	switch t.escLen[b[i+1]] {
	case 2:
		return true
	case 6:
		return t.uBarrierAt(b, i+2)
	}
	return false
}

// uBarrierAt reports whether the \u escape whose four digits start at
// b[p] is a valid barrier, taken alone: a code point outside ASCII when no
// form holds such bytes (a surrogate too, paired or not: it decodes to
// bytes outside ASCII either way), or an ASCII byte no form holds.
func (t *scanTables) uBarrierAt(b []byte, p int) bool {
	if p+4 > len(b) {
		return false
	}
	r := hexRune(b[p : p+4])
	switch {
	case r < 0:
		return false
	case r < utf8.RuneSelf:
		return !t.keep[r]
	}
	return !t.keepHigh
}
