package upstream

import (
	"bytes"
	"encoding/binary"
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
// large answers: strings without escapes are checked in place, and only
// strings with escapes are decoded, into one reused buffer.
//
// It accepts exactly what encoding/json accepts (FuzzCheckJSON compares the
// two). Like encoding/json it lets invalid UTF-8 through inside strings;
// such bytes are compared raw, where a decoder would see U+FFFD, which only
// matters for a credential that itself contains U+FFFD.
type scanner struct {
	b     []byte
	i     int
	forms *matcher
	buf   []byte // a string with JSON escapes, decoded
	ent   entityDecoder
	hit   bool
}

// scan returns whether b is one valid JSON text and whether a string in it
// holds one of forms.
func scan(b []byte, forms [][]byte) (valid, reflected bool) {
	return scanWith(b, newMatcher(forms))
}

// scanWith is scan with the forms' matcher built once by the caller (the
// stream scanner checks every event with the same one).
func scanWith(b []byte, m *matcher) (valid, reflected bool) {
	s := &scanner{b: b, forms: m}
	s.ws()
	if !s.value(0) {
		return false, s.hit
	}
	s.ws()
	return s.i == len(s.b), s.hit
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
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
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

func (s *scanner) object(depth int) bool {
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' || !s.str() {
			return false
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if !s.value(depth) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
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
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
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
	if s.i >= len(s.b) {
		return false
	}
	if s.b[s.i] == '0' {
		s.i++
	} else if !s.digits() {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
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
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// str scans a string at s.i and checks its decoded value.
func (s *scanner) str() bool {
	s.i++ // opening quote
	start := s.i
	s.i = plainRun(s.b, s.i)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.check(s.b[start:s.i])
			s.i++
			return true
		case c == '\\':
			return s.escapedStr(start)
		case c < 0x20:
			return false
		}
		s.i++
	}
	return false
}

// escapedStr finishes a string that contains escapes, decoding it into
// s.buf from start (the first byte after the opening quote).
func (s *scanner) escapedStr(start int) bool {
	s.buf = append(s.buf[:0], s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.check(s.buf)
			s.i++
			return true
		case c < 0x20:
			return false
		case c != '\\':
			s.buf = append(s.buf, c)
			s.i++
			continue
		}
		if !s.escape() {
			return false
		}
	}
	return false
}

// escape decodes one backslash escape at s.i into s.buf.
func (s *scanner) escape() bool {
	if s.i+1 >= len(s.b) {
		return false
	}
	c := s.b[s.i+1]
	s.i += 2
	switch c {
	case '"', '\\', '/':
		s.buf = append(s.buf, c)
	case 'b':
		s.buf = append(s.buf, '\b')
	case 'f':
		s.buf = append(s.buf, '\f')
	case 'n':
		s.buf = append(s.buf, '\n')
	case 'r':
		s.buf = append(s.buf, '\r')
	case 't':
		s.buf = append(s.buf, '\t')
	case 'u':
		return s.unicodeEscape()
	default:
		return false
	}
	return true
}

// unicodeEscape decodes \uXXXX (s.i is past the 'u'), joining surrogate
// pairs; a lone surrogate becomes U+FFFD as encoding/json does.
func (s *scanner) unicodeEscape() bool {
	r, ok := s.hex4()
	if !ok {
		return false
	}
	if utf16.IsSurrogate(r) {
		if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
			save := s.i
			s.i += 2
			r2, ok := s.hex4()
			if !ok {
				return false
			}
			if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
				s.buf = utf8.AppendRune(s.buf, dec)
				return true
			}
			s.i = save
		}
		r = utf8.RuneError
	}
	s.buf = utf8.AppendRune(s.buf, r)
	return true
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	s.i += 4
	return r, true
}

// Word-at-a-time constants: lo has 0x01 in every byte, hi has 0x80.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// plainRun returns the index of the first byte at or after i that may end
// a plain run of string bytes: '"', '\\' or a control character. It looks
// at eight bytes at a time, so long strings (the bulk of a model answer)
// cost a fraction of a byte loop; the exact byte is then found by the
// caller's loop.
func plainRun(b []byte, i int) int {
	for i+32 <= len(b) {
		c := b[i : i+32 : i+32]
		if special(binary.LittleEndian.Uint64(c[0:8]))|special(binary.LittleEndian.Uint64(c[8:16]))|
			special(binary.LittleEndian.Uint64(c[16:24]))|special(binary.LittleEndian.Uint64(c[24:32])) != 0 {
			break
		}
		i += 32
	}
	for ; i+8 <= len(b); i += 8 {
		if special(binary.LittleEndian.Uint64(b[i:])) != 0 {
			return i
		}
	}
	return i
}

// special is non-zero when some byte of w is a control character (< 0x20),
// '"' or '\\'.
func special(w uint64) uint64 {
	ctl := (w - lo*0x20) &^ w & hi
	quote := w ^ (lo * '"')
	back := w ^ (lo * '\\')
	return ctl | ((quote - lo) &^ quote & hi) | ((back - lo) &^ back & hi)
}

// check looks for the forms in str as decoded from JSON and, when str
// holds an ampersand, with its character references decoded too: a chat
// client or markdown renderer may show "&#x2d;" as "-". Strings without an
// ampersand (nearly all) cost nothing more.
func (s *scanner) check(str []byte) {
	if s.hit || len(s.forms.forms) == 0 {
		return
	}
	if s.forms.contains(str) || s.forms.containsDecoded(&s.ent, str) {
		s.hit = true
	}
}
