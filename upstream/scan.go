package upstream

import (
	"bytes"
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
	t     *scanTables // the forms' tables (keep, escLen, …)
	// minLen is t.minLen: a piece shorter than every form is skipped.
	minLen int
	buf    []byte // a piece of a string with escapes, decoded
	// marks holds the stops of b[mbase:mend] (see mark), a window of
	// the text, marked again further on as the scan moves.
	marks       *marks
	mbase, mend int
	ent         entityDecoder
	hit         bool
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
func scanFrom(b []byte, src func([]byte) ([]byte, bool), fm *matcher, size int, m *member) (valid, reflected bool) {
	s := newScanner(b, fm, size, src)
	s.member = m
	return s.run()
}

func newScanner(b []byte, m *matcher, size int, src func([]byte) ([]byte, bool)) *scanner {
	s := &scanner{b: b, forms: m, t: &m.kf.tab, minLen: m.kf.tab.minLen, src: src}
	if len(m.forms) > 0 && size >= sampleMin {
		m.build(size)
	}
	return s
}

func (s *scanner) run() (valid, reflected bool) {
	defer s.releaseMarks()
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
// The loop goes from stop to stop (the quotes, backslashes and control
// bytes that the marks record, see nextStop) and handles plain runs,
// barrier escapes and the closing quote, which is all of nearly every
// string; a piece with any other escape (or a bad escape or a control
// byte) is left to decodePiece.
func (s *scanner) str() bool {
	start := s.i + 1 // the piece since the last barrier
	pos := start     // where the next stop is looked for
	for {
		if pos >= s.mend || pos < s.mbase {
			if !s.avail(pos + 1) {
				return false // no closing quote
			}
			s.mark(pos)
		}
		// The stops of the 64-byte word that holds pos, from pos on;
		// the marks hold them below lim.
		wb := pos &^ 63
		k := (wb - s.mbase) >> 6 & (markWords - 1)
		lim := min(wb+64, s.mend)
		sh := uint(pos-wb) & 63
		bs, qs, cs := s.marks.back[k]>>sh<<sh, s.marks.quote[k]>>sh<<sh, s.marks.ctl[k]>>sh<<sh
		m := bs | qs | cs
		if m == 0 {
			pos = lim // a plain run
			continue
		}
		first := m & -m
		if first&qs != 0 { // the string ends at its next stop, as most do
			i := wb + bits.TrailingZeros64(m)
			if i-start >= s.minLen {
				s.check(s.b[start:i], false)
			}
			s.i = i + 1
			return true
		}
		// A word of several stops whose first is an escape may be taken
		// whole.
		if m&(m-1) != 0 && first&bs != 0 && s.t.fast && lim == wb+64 {
			if next, from, ended, ok := s.block(wb, pos, start, bs, qs, cs); ended {
				return true
			} else if ok {
				pos, start = next, from
				continue
			}
		}
		// Stop by stop.
		b := s.b
		for {
			i := wb + bits.TrailingZeros64(m)
			n := 0 // the length of a barrier escape at i
			switch b[i] {
			case '"':
				if i-start >= s.minLen {
					s.check(b[start:i], false)
				}
				s.i = i + 1
				return true
			case '\\':
				if i+12 > len(b) {
					s.fill(i + 12) // the escape, and a surrogate pair's low half
					b = s.b
				}
				if i+1 < len(b) {
					n = int(s.t.escLen[b[i+1]])
					if n == 6 {
						n = s.uBarrier(i)
					}
				}
			}
			if n == 0 {
				// Another escape, a bad one or a control byte.
				switch s.decodePiece(start, i) {
				case stringEnded:
					return true
				case badString:
					return false
				}
				start, pos = s.i, s.i
				break
			}
			if i-start >= s.minLen {
				s.check(b[start:i], true)
			}
			start, pos = i+n, i+n
			if d := pos - wb; d < 64 && pos < lim {
				if m &= ^uint64(0) << uint(d); m != 0 {
					continue
				}
				pos = lim
			}
			break
		}
	}
}

// block takes the 64-byte word of a string at wb from pos on at once when
// it holds only plain bytes, barrier escapes and perhaps the closing quote:
// it checks the pieces that end in it and are long enough to hold a form,
// and returns where str goes on and the piece in progress there, or
// ended when the string ended in the word (s.i is then past its closing
// quote). bs, qs and cs are the word's backslashes, quotes and control
// bytes from pos on; pos is no escape's second byte, and start is the
// first byte of the piece in progress at pos. It reports !ok, and leaves
// the word to str's stop-by-stop loop, when it cannot decide without
// looking at each stop: another escape, a bad one or a control byte.
//
// The escaped bytes are found for all the word's backslashes at once
// (each run of backslashes escapes every other byte from its start, and
// the byte after an odd run), so the quote that ends the string is known
// without walking the escapes.
func (s *scanner) block(wb, pos, start int, bs, qs, cs uint64) (next, from int, ended, ok bool) {
	esc, carry := escapedBy(bs)
	in := ^uint64(0) // the bytes of the word in the string
	if q := qs &^ esc; q != 0 {
		in, carry = q&-q-1, false
		ended = true
	}
	if cs&in != 0 {
		return 0, 0, false, false // a control byte
	}
	bs, esc = bs&in, esc&in
	b := s.b
	next = wb + 64
	// The escapes other than \" and \\: the two-byte barriers here, \u
	// escapes in uEscapes.
	o := esc &^ (qs | bs)
	for ; o != 0; o &= o - 1 {
		if s.t.escLen[b[wb+bits.TrailingZeros64(o)]] != 2 {
			break
		}
	}
	var digits uint64 // the hex digits of the word's \u escapes
	if o != 0 {
		if digits, next, ok = s.uEscapes(wb, o); !ok {
			return 0, 0, false, false
		}
	}
	if carry { // the word's last backslash escapes the next word's first byte
		switch {
		case next >= len(b):
			return 0, 0, false, false
		case s.t.escLen[b[next]] == 2:
			next++
		case b[next] == 'u' && s.uBarrierAt(next+1):
			next += 5
		default:
			return 0, 0, false, false
		}
	}
	// The pieces: the bytes of the string that are neither a backslash
	// nor escaped nor a \u escape's digit.
	sh := uint(pos-wb) & 63
	e := bs | esc | digits
	piece := ^e & in >> sh << sh
	quote := bits.TrailingZeros64(^in) // 64 when the string goes on
	if bits.OnesCount64(piece)+pos-start >= s.minLen {
		// The piece in progress, or the pieces after it, may be long.
		lead := uint(bits.TrailingZeros64(^(piece >> sh))) + sh
		if wb+int(lead)-start >= s.minLen && lead < 64 || bits.OnesCount64(piece>>(lead&63)) >= s.minLen && lead < 64 {
			s.checkPieces(wb, pos, start, piece, quote)
		}
	}
	if ended {
		s.i = wb + quote + 1
		return 0, 0, true, true
	}
	from = start
	if e != 0 {
		from = wb + 64 - bits.LeadingZeros64(e)
	}
	if next > wb+64 {
		from = next // the word ends inside an escape
	}
	return next, from, false, true
}

// checkPieces checks the pieces of block's word (its bits piece, from pos
// on) that end in it and may hold a form: the one in progress since start,
// and the runs of piece bits that an escape or the closing quote (at bit
// quote, 64 when the string goes on) ends. A piece that reaches the
// word's end goes on in the next.
func (s *scanner) checkPieces(wb, pos, start int, piece uint64, quote int) {
	followed := func(end uint) bool { return int(end) != quote }
	sh := uint(pos-wb) & 63
	lead := uint(bits.TrailingZeros64(^(piece >> sh))) + sh // past the piece in progress
	if lead < 64 && wb+int(lead)-start >= s.minLen {
		s.check(s.b[start:wb+int(lead)], followed(lead))
	}
	if lead >= 64 {
		return
	}
	if s.t.runShifts == nil {
		return // a run inside the word is shorter than every form
	}
	// The first bit of each run of minLen piece bits or more: where the
	// bits from it on stay set after each shift and AND.
	x := piece >> lead << lead
	long := x
	for _, t := range s.t.runShifts {
		long &= long >> (t & 63)
	}
	for long != 0 {
		r0 := uint(bits.TrailingZeros64(long))
		r1 := uint(bits.TrailingZeros64(^(x >> r0))) + r0
		if r1 >= 64 {
			return // it goes on in the next word
		}
		s.check(s.b[wb+int(r0):wb+int(r1)], followed(r1))
		long = long >> r1 << r1
	}
}

// uEscapes is block's test of the escapes o of the word at wb from the
// first that is no two-byte barrier: each must be one, or a \u barrier
// (uBarrierAt). It returns the hex digits of the \u escapes in the word
// and where the word's last escape ends (past the word when its digits
// end in the next).
func (s *scanner) uEscapes(wb int, o uint64) (digits uint64, end int, ok bool) {
	b, t := s.b, s.t
	end = wb + 64
	for ; o != 0; o &= o - 1 {
		j := bits.TrailingZeros64(o)
		c := b[wb+j]
		if t.escLen[c] == 2 {
			continue
		}
		p := wb + j + 1
		if c != 'u' || p+4 > len(b) {
			return 0, 0, false
		}
		// uBarrierRune without a call, which costs 7 % of the scan of
		// an answer whose non-ASCII text is all \u escapes.
		h := b[p : p+4 : p+4]
		d0, d1, d2, d3 := hexDigits[h[0]], hexDigits[h[1]], hexDigits[h[2]], hexDigits[h[3]]
		r := rune(d0)<<12 | rune(d1)<<8 | rune(d2)<<4 | rune(d3)
		if d0|d1|d2|d3 < 0 || r < utf8.RuneSelf && t.keep[r] || r >= utf8.RuneSelf && t.keepHigh {
			return 0, 0, false
		}
		digits |= 0x1e << j
		end = max(end, p+4)
	}
	return digits, end, true
}

// uBarrierAt is scanTables.uBarrierAt for the scanned text.
func (s *scanner) uBarrierAt(p int) bool { return s.t.uBarrierAt(s.b, p) }

// escapedBy returns the bytes of a word that its backslashes bs escape,
// bs holding no escaped byte before its first backslash, and whether the
// last escapes the next word's first byte. A run of backslashes escapes
// every other byte from its start, and the byte after it when it is odd:
// adding the runs that start on an odd bit to bs carries each past its
// end, which tells the runs of each parity apart without a loop.
func escapedBy(bs uint64) (esc uint64, carry bool) {
	const even = 0x5555555555555555
	follows := bs << 1
	odd := bs &^ even &^ follows // runs of backslashes that start on an odd bit
	seq, c := bits.Add64(odd, bs, 0)
	return (even ^ seq<<1) & follows, c != 0
}

// mark records the stops of b (see markBlocks) from the 64-byte block
// that holds i, up to markWords blocks or the end of b.
func (s *scanner) mark(i int) {
	if s.marks == nil {
		s.marks = markPool.Get().(*marks)
	}
	base := i &^ 63
	end := min(len(s.b), base+64*markWords)
	s.marks.mark(s.b[base:end])
	s.mbase, s.mend = base, end
}

// releaseMarks hands the marks back for another scan.
func (s *scanner) releaseMarks() {
	if s.marks != nil {
		markPool.Put(s.marks)
		s.marks = nil
	}
}

// nextStop returns the index of the first byte at or after i that ends a
// plain run of string bytes: '"', '\\' or a control character, or len(b).
func (s *scanner) nextStop(i int) int {
	for i < len(s.b) {
		if i >= s.mend || i < s.mbase {
			s.mark(i)
		}
		off := i - s.mbase
		k := off >> 6 & (markWords - 1)
		if m := (s.marks.back[k] | s.marks.quote[k] | s.marks.ctl[k]) >> (off & 63); m != 0 {
			return i + bits.TrailingZeros64(m)
		}
		i = min(s.mbase+(off|63)+1, s.mend)
	}
	return len(s.b)
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
		i = s.nextStop(i)
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
	if s.t.keepHigh || i+6 > len(b) {
		return 0
	}
	r := hexRune(b[i+2 : i+6])
	switch {
	case r < 0:
		return 0
	case r < utf8.RuneSelf:
		if s.t.keep[r] {
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
		if s.t.keep[c] {
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
