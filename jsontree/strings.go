package jsontree

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// str decodes the string at pos (its opening quote) as encoding/json
// does: escapes per RFC 8259, a surrogate pair combined, a lone or
// malformed surrogate escape and each invalid UTF-8 byte as U+FFFD, and a
// control byte below 0x20 refused.
func (d *decoder) str() (string, bool) {
	start := d.pos + 1
	i := d.scan(start, true)
	if i < len(d.data) && d.data[i] == '"' {
		d.pos = i + 1
		return string(d.data[start:i]), true
	}
	return d.strSlow(start, i)
}

// strSlow decodes the rest of a string whose bytes from start to i need
// no decoding.
func (d *decoder) strSlow(start, i int) (string, bool) {
	end := d.stringEnd(i)
	if d.stop != nil {
		return "", false
	}
	var b strings.Builder
	b.Grow(end - start)
	b.Write(d.data[start:i])
	for i < len(d.data) {
		if !d.due(i) {
			return "", false
		}
		c := d.data[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return b.String(), true
		case c == '\\':
			n, ok := escape(&b, d.data[i:])
			if !ok {
				return "", false
			}
			i += n
		case c < 0x20:
			return "", false
		default:
			j := d.scan(i, false)
			if d.stop != nil {
				return "", false
			}
			if seg := d.data[i:j]; utf8.Valid(seg) {
				b.Write(seg)
			} else {
				writeInvalid(&b, seg)
			}
			i = j
		}
	}
	return "", false
}

// writeInvalid writes seg with each invalid UTF-8 byte as U+FFFD.
func writeInvalid(b *strings.Builder, seg []byte) {
	for len(seg) > 0 {
		r, size := utf8.DecodeRune(seg)
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.Write(seg[:size])
		}
		seg = seg[size:]
	}
}

// stringEnd is the position of the first quote from i that an even run
// of backslashes precedes, or the end of data: a size for the decoded
// string's buffer, found with bytes.IndexByte (the decode checks the
// string; a wrong size only costs the buffer's growth).
func (d *decoder) stringEnd(i int) int {
	for {
		end := len(d.data)
		if d.b != nil {
			end = min(end, i+CheckBytes)
		}
		j := bytes.IndexByte(d.data[i:end], '"')
		if j < 0 {
			if end == len(d.data) || !d.due(end) {
				return len(d.data)
			}
			i = end
			continue
		}
		q, n := i+j, 0
		for k := q - 1; k >= i && d.data[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
}

// scan is special on data from i, in steps of CheckBytes under a budget,
// with a look at it between them. A stop returns len(d.data), where no
// string ends.
func (d *decoder) scan(i int, nonASCII bool) int {
	if d.b == nil {
		return special(d.data, i, nonASCII)
	}
	for {
		end := min(len(d.data), i+CheckBytes)
		j := special(d.data[:end], i, nonASCII)
		if j < end || end == len(d.data) {
			return j
		}
		if !d.due(end) {
			return len(d.data)
		}
		i = end
	}
}

// Eight bytes at a time: ones has 1 in every byte, highs the high bit of
// every byte.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special is the position from i of the first byte of s that ends a run
// of string content: '"', '\\', a control byte below 0x20 or, with
// nonASCII, a byte from 0x80; len(s) when there is none. It tests eight
// bytes at a time: a byte is zero (x-1)&^x sets its high bit, and a
// borrow can only set high bits above the first byte found.
func special(s []byte, i int, nonASCII bool) int {
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		m := (x - ones*0x20) &^ x
		m |= (quote - ones) &^ quote
		m |= (backslash - ones) &^ backslash
		if nonASCII {
			m |= x
		}
		if m &= highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' || c < 0x20 || nonASCII && c >= utf8.RuneSelf {
			return i
		}
	}
	return len(s)
}

// escape writes the character of the escape at the start of s and returns
// the escape's length.
func escape(b *strings.Builder, s []byte) (int, bool) {
	if len(s) < 2 {
		return 0, false
	}
	switch c := s[1]; c {
	case '"', '\\', '/':
		b.WriteByte(c)
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		r, ok := hex4(s)
		if !ok {
			return 0, false
		}
		if !utf16.IsSurrogate(r) {
			b.WriteRune(r)
			return 6, true
		}
		// A pair takes the next escape; anything else leaves it to be
		// read on its own and this half becomes U+FFFD.
		if r2, ok := hex4(s[6:]); ok {
			if pair := utf16.DecodeRune(r, r2); pair != unicode.ReplacementChar {
				b.WriteRune(pair)
				return 12, true
			}
		}
		b.WriteRune(unicode.ReplacementChar)
		return 6, true
	default:
		return 0, false
	}
	return 2, true
}

// hex4 reads the \uXXXX escape at the start of s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skipString checks the string at pos without decoding it: only escapes
// and control bytes can make it invalid.
func (d *decoder) skipString() bool {
	i := d.pos + 1
	for {
		i = d.scan(i, false)
		if i >= len(d.data) || !d.due(i) {
			return false
		}
		switch d.data[i] {
		case '"':
			d.pos = i + 1
			return true
		case '\\':
			n, ok := skipEscape(d.data[i:])
			if !ok {
				return false
			}
			i += n
		default:
			return false // a control byte
		}
	}
}

// skipEscape checks the escape at the start of s and returns its length.
func skipEscape(s []byte) (int, bool) {
	if len(s) < 2 {
		return 0, false
	}
	switch s[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, true
	case 'u':
		_, ok := hex4(s)
		return 6, ok
	}
	return 0, false
}
