package upstream

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds nesting exactly as encoding/json does (10000 nested
// objects or arrays pass, 10001 do not), so a hostile answer cannot exhaust
// the stack.
const maxDepth = 10000

// scanner validates one JSON text and checks every decoded string (values
// and object keys), and the same string with its HTML character references
// decoded, for the credential forms, in a single pass over the bytes. It
// replaces a json.Decoder token walk that dominated the broker's cost on
// large answers: strings are checked in place, between the escapes that no
// form can hold, and only pieces with other escapes are decoded, into one
// reused buffer (see str).
//
// It accepts exactly what encoding/json accepts (FuzzCheckJSON compares the
// two) and finds a form exactly where decoding every string and searching
// it would (scan_ref_test.go compares the two). Like encoding/json it lets invalid UTF-8 through inside strings;
// such bytes are compared raw, where a decoder would see U+FFFD, which only
// matters for a credential that itself contains U+FFFD.
type scanner struct {
	b     []byte
	i     int
	forms *matcher
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
	buf    []byte // a piece of a string with escapes, decoded
	// quote is the first '"' at or after the last longRun; when b held
	// none, it is len(b) as it was, the point the next search resumes.
	quote int
	ent   entityDecoder
	hit   bool
	// src, when set, is where b comes from while it is still arriving
	// (scanFrom): it returns b with more bytes appended, or false when
	// none will follow. b is then what has arrived so far, and every
	// place that would take its end for the end of the text asks src
	// first (fill).
	src func(b []byte) ([]byte, bool)
	// member, when set, keeps the raw value of one top-level member.
	member *member
}

// scan returns whether b is one valid JSON text and whether a string in it
// holds one of forms.
func scan(b []byte, forms [][]byte) (valid, reflected bool) {
	return scanWith(b, newMatcher(forms))
}

// scanWith is scan with the forms' matcher built once by the caller (the
// stream scanner checks every event with the same one).
func scanWith(b []byte, m *matcher) (valid, reflected bool) {
	return newScanner(b, m, len(b), nil).run()
}

// scanFrom is scan on a text that is still arriving: b holds what has
// arrived (it may be empty) and src appends the rest (see scanner.src),
// so the scan runs while the text is read and ends soon after its last
// byte. size is the text's expected length (it sizes the matcher's
// filter). It decides exactly as scan on the whole text would.
func scanFrom(b []byte, src func([]byte) ([]byte, bool), forms [][]byte, size int, m *member) (valid, reflected bool) {
	s := newScanner(b, newMatcher(forms), size, src)
	s.member = m
	return s.run()
}

func newScanner(b []byte, m *matcher, size int, src func([]byte) ([]byte, bool)) *scanner {
	s := &scanner{b: b, forms: m, minLen: math.MaxInt, quote: -1, src: src}
	if len(m.forms) > 0 {
		s.minLen = s.forms.minLen
		s.keep = s.forms.bytes
		for _, c := range []byte("&#;0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") {
			s.keep[c] = true
		}
		for c := utf8.RuneSelf; c < len(s.keep); c++ {
			s.keepHigh = s.keepHigh || s.keep[c]
		}
		if size >= sampleMin {
			s.forms.build(size)
		}
	}
	for c, v := range simpleEscapes {
		if v != 0 && !s.keep[v] {
			s.escLen[c] = 2
		}
	}
	s.escLen['u'] = 6
	return s
}

func (s *scanner) run() (valid, reflected bool) {
	s.ws()
	if !s.value(0) {
		return false, s.hit
	}
	s.ws()
	return s.i == len(s.b), s.hit
}

// avail reports whether b holds n bytes, waiting for them while the text
// is still arriving.
func (s *scanner) avail(n int) bool { return n <= len(s.b) || s.fill(n) }

// fill grows b from src until it holds n bytes or nothing more will come,
// and reports whether it holds n.
func (s *scanner) fill(n int) bool {
	for n > len(s.b) && s.src != nil {
		b, ok := s.src(s.b)
		s.b = b
		if !ok {
			s.src = nil
		}
	}
	return n <= len(s.b)
}

// ws skips whitespace. Compact JSON has none, so the common case (any
// byte above ' ') costs no call.
func (s *scanner) ws() {
	if s.i < len(s.b) && s.b[s.i] > ' ' {
		return
	}
	s.skipWS()
}

func (s *scanner) skipWS() {
	for s.avail(s.i + 1) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(depth int) bool {
	if !s.avail(s.i + 1) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return depth < maxDepth && s.object(depth+1)
	case c == '[':
		return depth < maxDepth && s.array(depth+1)
	case c == '"':
		return s.str()
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

func (s *scanner) literal(word string) bool {
	s.fill(s.i + len(word))
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

func (s *scanner) object(depth int) bool {
	s.i++ // {
	s.ws()
	if s.avail(s.i+1) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		key := s.i
		if !s.avail(s.i+1) || s.b[s.i] != '"' || !s.str() {
			return false
		}
		keep := depth == 1 && s.member != nil && s.member.key(s.b[key+1:s.i-1])
		s.ws()
		if !s.avail(s.i+1) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		start := s.i
		if !s.value(depth) {
			return false
		}
		if keep {
			s.member.start, s.member.end = start, s.i
		}
		s.ws()
		if !s.avail(s.i + 1) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

func (s *scanner) array(depth int) bool {
	s.i++ // [
	s.ws()
	if s.avail(s.i+1) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.ws()
		if !s.avail(s.i + 1) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// number follows RFC 8259: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	if !s.avail(s.i + 1) {
		return false
	}
	if s.b[s.i] == '0' {
		s.i++
	} else if !s.digits() {
		return false
	}
	if s.avail(s.i+1) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.avail(s.i+1) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.avail(s.i+1) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

func (s *scanner) digits() bool {
	start := s.i
	for s.avail(s.i+1) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// str scans the string at s.i (its opening quote) and checks its decoded
// value, without decoding it where it can.
//
// A form holds only the bytes the matcher marks (keep), so no match in the
// decoded string spans an escape that decodes to other bytes (a barrier:
// "\n", "\"" or a CJK "\u4e16" for every ordinary key). The string is
// checked piece by piece between barriers, each piece in place when it
// holds no other escape and decoded into s.buf otherwise; on real answers
// (escapes every few bytes in code, nearly all of them barriers) that
// copies almost nothing. Bytes that a character reference is made of ('&',
// '#', ';', letters and digits) are kept as well, so a reference never
// spans a barrier either and each piece's references decode on their own.
//
// This loop handles plain bytes, barrier escapes and the closing quote,
// which is all of nearly every string; a piece with any other escape (or a
// bad escape or a control byte) is left to decodePiece.
func (s *scanner) str() bool {
	b, minLen, escLen := s.b, s.minLen, &s.escLen
	i := s.i + 1 // past the opening quote
	start := i   // the piece since the last barrier
	for {
		// The hot loop: short runs of plain bytes, the two-byte barrier
		// escapes of code ("\\\"", "\n") and the \u barriers of
		// non-ASCII text ("\u4e16", uBarrier) while the piece is too
		// short to check. Anything else is left to the rest of the loop.
		for i+8 <= len(b) {
			if b[i] == '\\' {
				n := int(escLen[b[i+1]])
				if n == 6 {
					if i+12 > len(b) {
						break
					}
					n = s.uBarrier(i)
				}
				if n == 0 || i-start >= minLen {
					break
				}
				i += n
				start = i
				continue
			}
			m := special(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8 // plain: the rest of the run is plainRun's
				break
			}
			i += bits.TrailingZeros64(m) / 8
			if b[i] != '\\' {
				break
			}
		}
		// The next quote, backslash or control byte, when the hot loop
		// stopped before one.
		if i >= len(b) || b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
			i = s.plainRun(i)
		}
		if i >= len(b) && s.fill(i+1) {
			b = s.b // more of a text still arriving
			continue
		}
		if i+12 > len(b) && i < len(b) && b[i] == '\\' {
			s.fill(i + 12) // the escape, and a surrogate pair's low half
			b = s.b
		}
		n := 0 // the length of a barrier escape at i
		if i < len(b) && b[i] == '"' {
			if i-start >= minLen {
				s.check(b[start:i], false)
			}
			s.i = i + 1
			return true
		}
		if i+1 < len(b) && b[i] == '\\' {
			n = int(escLen[b[i+1]])
			if n == 6 {
				n = s.uBarrier(i)
			}
		}
		if n > 0 {
			if i-start >= minLen {
				s.check(b[start:i], true)
			}
			i += n
		} else {
			// Another escape, a bad one, a control byte or the end.
			switch s.decodePiece(start, i) {
			case stringEnded:
				return true
			case badString:
				return false
			}
			b, i = s.b, s.i
		}
		start = i
	}
}

// Outcomes of decodePiece.
const (
	pieceEnded  = iota // at a barrier escape, which it consumed
	stringEnded        // at the closing quote, which it consumed
	badString          // at a bad escape, a control byte or the end of b
)

// decodePiece scans the piece of a string that starts at start and holds
// an escape at i that str does not take as a barrier, up to the piece's
// end, decoding it into s.buf and checking it. It leaves s.i after what
// ended the piece.
func (s *scanner) decodePiece(start, i int) int {
	b := s.b
	s.buf = s.buf[:0]
	decoded := false // s.buf holds the piece decoded up to start
	for {
		i = s.plainRun(i)
		if i >= len(b) && s.fill(i+1) {
			b = s.b
			continue
		}
		if i >= len(b) || b[i] < 0x20 {
			return badString
		}
		if b[i] == '"' {
			s.endPiece(start, i, decoded, false)
			s.i = i + 1
			return stringEnded
		}
		s.i = i
		s.fill(i + 12) // the escape, and a surrogate pair's low half
		b = s.b
		dec, ok := s.escape()
		if !ok {
			return badString
		}
		if s.barrier(dec) {
			s.endPiece(start, i, decoded, true)
			return pieceEnded
		}
		s.buf = append(append(s.buf, b[start:i]...), dec.bytes()...)
		decoded, start = true, s.i
		i = s.i
	}
}

// endPiece checks the piece of a string from start to end (see str);
// followed tells whether the string goes on after it (see
// entityDecoder.segments).
func (s *scanner) endPiece(start, end int, decoded, followed bool) {
	if !decoded {
		s.check(s.b[start:end], followed)
		return
	}
	s.buf = append(s.buf, s.b[start:end]...)
	s.check(s.buf, followed)
}

// uBarrier returns the length of the \u escape at s.b[i] when it is a
// valid barrier: 6, or 12 for a surrogate pair. It returns 0 when escape
// must decide: a kept ASCII byte, non-ASCII when a form holds such bytes,
// or a bad escape. A high surrogate not followed by its low half is U+FFFD
// on its own, as in unicodeEscape.
func (s *scanner) uBarrier(i int) int {
	b := s.b
	if s.keepHigh || i+6 > len(b) {
		return 0
	}
	r := hexRune(b[i+2 : i+6])
	switch {
	case r < 0:
		return 0
	case r < utf8.RuneSelf:
		if s.keep[r] {
			return 0
		}
		return 6
	case r < 0xd800 || r > 0xdbff:
		return 6
	}
	if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
		if r2 := hexRune(b[i+8 : i+12]); 0xdc00 <= r2 && r2 <= 0xdfff {
			return 12
		}
	}
	return 6
}

// hexRune decodes four hex digits, or returns -1.
func hexRune(h []byte) rune {
	_ = h[3]
	a, b, c, d := hexDigits[h[0]], hexDigits[h[1]], hexDigits[h[2]], hexDigits[h[3]]
	if a|b|c|d < 0 {
		return -1
	}
	return rune(a)<<12 | rune(b)<<8 | rune(c)<<4 | rune(d)
}

// hexDigits maps a hex digit to its value and every other byte to -1.
var hexDigits = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i, c := range []byte("0123456789abcdef") {
		t[c] = int8(i)
	}
	for i, c := range []byte("ABCDEF") {
		t[c] = int8(10 + i)
	}
	return t
}()

// decoded is the value of one escape: a byte, or a rune's UTF-8 bytes.
type decoded struct {
	b [utf8.UTFMax]byte
	n int
}

func (d *decoded) bytes() []byte { return d.b[:d.n] }

// barrier reports whether no byte of d is kept: nothing to look for, or
// bytes that neither a form nor a character reference holds.
func (s *scanner) barrier(d decoded) bool {
	for _, c := range d.bytes() {
		if s.keep[c] {
			return false
		}
	}
	return true
}

// simpleEscapes maps the byte after a backslash to its value; 0 marks
// 'u' and the bytes that are no escape.
var simpleEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escape decodes the backslash escape at s.i and moves past it.
func (s *scanner) escape() (decoded, bool) {
	if s.i+1 >= len(s.b) {
		return decoded{}, false
	}
	c := s.b[s.i+1]
	s.i += 2
	if v := simpleEscapes[c]; v != 0 {
		return decoded{b: [utf8.UTFMax]byte{v}, n: 1}, true
	}
	if c != 'u' {
		return decoded{}, false
	}
	r, ok := s.unicodeEscape()
	if !ok {
		return decoded{}, false
	}
	var d decoded
	d.n = utf8.EncodeRune(d.b[:], r)
	return d, true
}

// unicodeEscape decodes \uXXXX (s.i is past the 'u'), joining surrogate
// pairs; a lone surrogate becomes U+FFFD as encoding/json does.
func (s *scanner) unicodeEscape() (rune, bool) {
	r, ok := s.hex4()
	if !ok {
		return 0, false
	}
	if !utf16.IsSurrogate(r) {
		return r, true
	}
	if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
		save := s.i
		s.i += 2
		r2, ok := s.hex4()
		if !ok {
			return 0, false
		}
		if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
			return dec, true
		}
		s.i = save
	}
	return utf8.RuneError, true
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	r := hexRune(s.b[s.i : s.i+4])
	s.i += 4
	return r, r >= 0
}

// Word-at-a-time constants: lo has 0x01 in every byte, hi has 0x80.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// plainRun returns the index of the first byte at or after i that ends a
// plain run of string bytes: '"', '\\' or a control character, or len(b).
// It looks at eight bytes at a time for short runs (code, between
// escapes) and leaves long ones (prose) to longRun.
func (s *scanner) plainRun(i int) int {
	b := s.b
	for k := 0; k < 3 && i+8 <= len(b); k++ {
		if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		i += 8
	}
	if i+8 <= len(b) {
		return s.longRun(i)
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

// longRun is plainRun for long runs: the next quote and backslash are
// found with bytes.IndexByte, many bytes an instruction, and only control
// bytes need a word-at-a-time pass. The next quote is remembered (s.quote):
// a string with many escapes would otherwise search for the same distant
// quote after each one. When none has arrived yet, the search resumes
// where it stopped, so no byte is searched twice.
func (s *scanner) longRun(i int) int {
	b := s.b
	if s.quote < i {
		s.quote = i
	}
	if s.quote < len(b) && b[s.quote] != '"' {
		if q := bytes.IndexByte(b[s.quote:], '"'); q >= 0 {
			s.quote += q
		} else {
			s.quote = len(b)
		}
	}
	end := s.quote
	if k := bytes.IndexByte(b[i:end], '\\'); k >= 0 {
		end = i + k
	}
	return i + firstControl(b[i:end])
}

// firstControl returns the index of the first byte of b below 0x20, or
// len(b).
func firstControl(b []byte) int {
	i := 0
	for ; i+32 <= len(b); i += 32 {
		c := b[i : i+32 : i+32]
		w0, w1 := binary.LittleEndian.Uint64(c[0:8]), binary.LittleEndian.Uint64(c[8:16])
		w2, w3 := binary.LittleEndian.Uint64(c[16:24]), binary.LittleEndian.Uint64(c[24:32])
		if ((w0-lo*0x20)&^w0|(w1-lo*0x20)&^w1|(w2-lo*0x20)&^w2|(w3-lo*0x20)&^w3)&hi != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if m := (w - lo*0x20) &^ w & hi; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return i
		}
	}
	return i
}

// special has the high bit set in the lowest byte of w (the first in
// memory) that is a control character (< 0x20), '"' or '\\', if any. Bytes
// above that one may be marked when they are not: only the lowest mark is
// exact.
//
// Flipping bit 1 of every byte maps '"' (0x22) to 0x20 and the control
// characters onto themselves, and nothing else below 0x21, so one
// comparison finds both.
func special(w uint64) uint64 {
	low := w ^ (lo * 0x02) // below 0x21: a control character or '"'
	back := w ^ (lo * '\\')
	return ((low-lo*0x21)&^low | (back-lo)&^back) & hi
}

// check looks for the forms in a piece of a string (see str) as decoded
// from JSON and, when it holds an ampersand, with its character references
// decoded too: a chat client or markdown renderer may show "&#x2d;" as "-".
// A piece shorter than every form cannot hold one, whichever way it is
// decoded (decoding references never lengthens a text).
func (s *scanner) check(piece []byte, followed bool) {
	if s.hit || len(s.forms.forms) == 0 || len(piece) < s.forms.minLen {
		return
	}
	if s.forms.contains(piece) || s.forms.containsDecoded(&s.ent, piece, followed) {
		s.hit = true
	}
}

// member finds one member of a top-level object while the scan runs, so
// that a caller needing one field of a large answer (the broker's usage
// count) need not decode the whole of it again. It matches a key as
// encoding/json matches a struct field's name (case aside), and stays
// unsure whenever a decoder could see it otherwise: a top-level key with
// an escape or a byte outside ASCII, or the name twice.
type member struct {
	name       string
	start, end int // the value's bytes, when found once
	found      int
	unsure     bool
}

// key reports whether the raw top-level key k is the member's name.
func (m *member) key(k []byte) bool {
	for _, c := range k {
		if c == '\\' || c >= utf8.RuneSelf {
			m.unsure = true
			return false
		}
	}
	if !bytes.EqualFold(k, []byte(m.name)) {
		return false
	}
	m.found++
	m.unsure = m.unsure || m.found > 1
	return m.found == 1
}
