package upstream

import (
	"bytes"
	"html"
)

// entityDecoder looks at a text with its HTML character references
// decoded exactly as html.UnescapeString decodes them ("&#114;", "&#x2d;",
// "&amp;", "&lt", …), without building more of the decoded text than a
// match could need.
//
// html.UnescapeString copies the whole string twice, and a megabyte of
// prose with a single "R&D" in it would pay that in full. Here the text
// between ampersands is found with bytes.IndexByte, and a lone '&' or a
// span that decodes to itself costs nothing more. A reference that decodes
// only to bytes no form holds (barrier, below; "&lt;", "&amp;", "&nbsp;"
// for every ordinary key) cannot be part of a match, only end one: so only
// the stretches between such references that hold a reference decoding to
// form bytes are built, and each is checked on its own. Each reference is
// decoded by html.UnescapeString itself on its own span, so the rules
// (numeric references, Windows-1252 remapping, named references with and
// without a semicolon) are the standard library's; FuzzDecodeEntities
// checks the result against html.UnescapeString. The five references HTML
// escaping writes are decoded without a call, and other spans are
// remembered, so a text that repeats "&D" or "&nbsp;" pays for each only
// once. The decoder lives for one check, like the matcher.
type entityDecoder struct {
	buf   []byte
	cache map[string]string // span → decoded, for spans followed by more text
}

// maxCachedSpans bounds the cache: an answer of distinct spans pays a call
// per span beyond it, and no more memory.
const maxCachedSpans = 1024

// segments calls check on the decoded stretches of s that a form could
// match in and that differ from s, and reports whether a call returned
// true (it then stops). A stretch runs between barrier references, those
// whose decoded bytes relevant does not mark; a nil relevant marks every
// byte, and check then sees s decoded whole, exactly as
// html.UnescapeString decodes it, when any reference in it decodes to
// something else. followed says that s is a piece of a longer text whose
// next byte is none a reference holds (not '&', '#', ';', a letter or a
// digit): a reference at the end of s is then decoded as one followed by
// more text, as it is in the whole.
//
// Why this finds every match: a match in the decoded text holds no
// barrier's bytes, so it lies between two barriers. If it holds no
// decoded reference either, it is a run of s itself, which the caller
// checks as it is; otherwise it lies in a stretch passed to check.
// Each stretch is a substring of the decoded text, so nothing is found
// that the decoded text does not hold.
func (d *entityDecoder) segments(s []byte, followed bool, relevant *[256]bool, check func([]byte) bool) bool {
	out := d.buf[:0]
	defer func() { d.buf = out[:0] }()
	start := 0     // where the current stretch starts in s: after the last barrier
	dirty := false // the stretch holds a decoded reference; out holds it up to done
	done := 0
	for i := 0; ; {
		j := bytes.IndexByte(s[i:], '&')
		if j < 0 {
			break
		}
		i += j
		n := entitySpan(s[i:])
		if tooShort(s[i : i+n]) {
			i += n
			continue
		}
		span := s[i : i+n]
		dec := d.span(span, followed || i+n < len(s))
		switch {
		case dec == string(span):
			// decodes to itself: part of the text as it is
		case barrier(dec, relevant):
			if dirty {
				out = append(out, s[done:i]...)
				if check(out) {
					return true
				}
				out, dirty = out[:0], false
			}
			start = i + n
		default:
			if !dirty {
				if cap(out) < len(s)-start {
					out = make([]byte, 0, len(s)-start) // at most the rest, once
				}
				out, done, dirty = out[:0], start, true
			}
			out = append(out, s[done:i]...)
			out = append(out, dec...)
			done = i + n
		}
		i += n
	}
	if dirty {
		out = append(out, s[done:]...)
		return check(out)
	}
	return false
}

// barrier reports whether no byte of dec is marked in relevant.
func barrier(dec string, relevant *[256]bool) bool {
	if relevant == nil {
		return false
	}
	for i := 0; i < len(dec); i++ {
		if relevant[dec[i]] {
			return false
		}
	}
	return true
}

// span decodes one span (see decodeSpan), from the common references or
// the cache when it can.
func (d *entityDecoder) span(span []byte, followed bool) string {
	switch string(span) {
	case "&amp;":
		return "&"
	case "&lt;":
		return "<"
	case "&gt;":
		return ">"
	case "&quot;":
		return `"`
	case "&#39;":
		return "'"
	}
	if !followed {
		return decodeSpan(span, false)
	}
	if dec, ok := d.cache[string(span)]; ok {
		return dec
	}
	dec := decodeSpan(span, true)
	if d.cache == nil {
		d.cache = make(map[string]string)
	}
	if len(d.cache) < maxCachedSpans {
		d.cache[string(span)] = dec
	}
	return dec
}

// tooShort reports whether span (as entitySpan cuts it) is a lone '&', or
// '&' and one letter or digit ("R&D", "Q&A", "&b;"): no reference is that
// short (TestShortSpansNeverDecode).
func tooShort(span []byte) bool {
	n := len(span)
	return n == 1 || n == 2 || n == 3 && span[1] != '#' && span[2] == ';'
}

// entitySpan returns the length of the run at s[0] == '&' that a character
// reference can occupy: the ampersand, the letters, digits and '#' after
// it, and one ';' after those. html.UnescapeString reads a reference no
// further than that and never past another '&', so decoding each span on
// its own and copying the rest gives the same text.
func entitySpan(s []byte) int {
	i := 1
	for i < len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '#' {
			i++
			continue
		}
		if c == ';' {
			i++
		}
		break
	}
	return i
}

// decodeSpan decodes one span. When more text follows the span in the
// original, a space stands in for it: html.UnescapeString decides some
// references (a bare "&#5") by whether any byte follows, and a space, like
// the byte that ended the span, is never part of a reference.
func decodeSpan(span []byte, followed bool) string {
	if !followed {
		return html.UnescapeString(string(span))
	}
	dec := html.UnescapeString(string(span) + " ")
	return dec[:len(dec)-1]
}
