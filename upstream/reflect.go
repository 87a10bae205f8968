package upstream

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/rtsandbox/rtsandbox/jsonjs"
)

// Forms returns every form in which a reflected credential is looked for:
//
//   - the six of the reference (docs/broker.md, "Credential reflection: the forms, and where each check runs"): the key raw,
//     encodeURIComponent, standard base64 with padding, base64url without
//     padding, and lower- and uppercase hex of its UTF-8 bytes;
//   - the key's base64 cores (see appendCores): its base64 in both
//     alphabets at each of the three byte alignments, without the
//     characters that depend on the bytes around it. They find the key
//     inside a longer encoded text, such as an echoed "Bearer <key>" line
//     or header block encoded whole, or followed by a line break;
//   - the base64 cores of "Bearer <key>", the value the client sends. They
//     add something only for keys of up to 6 bytes, whose own cores are
//     too short to look for; for longer keys each contains a core of the
//     key. "Authorization: Bearer <key>" needs no forms of its own: any
//     base64 of it contains a core of "Bearer <key>".
//
// Each form is a substring to find. The list may hold duplicates and forms
// that contain others; the check searches only the rest (searchForms).
func Forms(key string) []string {
	var out []string
	for _, f := range keyForms([]byte(key), true) {
		out = append(out, string(f))
	}
	return out
}

// keyForms returns the forms of Forms, in its order when all is set.
// Without all, it leaves out the forms that contain one of the others by
// construction when the key has all six cores: the full base64 forms
// (each starts with an alignment-0 core) and the "Bearer " cores (each
// contains the key's core at the alignment "Bearer " shifts it to).
func keyForms(key []byte, all bool) [][]byte {
	std := base64.StdEncoding.EncodeToString(key)
	lower := hex.EncodeToString(key)
	forms := [][]byte{key, []byte(jsonjs.EncodeURIComponent(string(key)))}
	full := [][]byte{[]byte(std), []byte(base64.RawURLEncoding.EncodeToString(key))}
	if all {
		forms = append(forms, full...)
	}
	forms = append(forms, []byte(lower), []byte(strings.ToUpper(lower)))
	n := len(forms)
	forms = appendCores(forms, key)
	if all || len(forms)-n < 6 {
		if !all {
			forms = append(forms, full...)
		}
		forms = appendCores(forms, append([]byte("Bearer "), key...))
	}
	return forms
}

// minCore is the shortest base64 core looked for, in characters. The
// cores of a short key are short runs of letters and digits that ordinary
// text or unrelated base64 may hold by chance (a 2-byte key has 2-character
// cores); 8 characters carry 48 bits of the key. A key of n bytes has cores
// of about 4n/3-2 characters, so keys of 7 bytes or more have all six, and
// real credentials (16 bytes or more) have cores longer than themselves.
// The reference's own six forms are kept whatever their length.
const minCore = 8

// appendCores appends the base64 cores of b, standard alphabet then URL
// alphabet for each alignment. In a base64 text, b starts after 0, 1 or 2
// bytes of its 3-byte group, and each alignment encodes it differently. At
// alignment p the encoding of b's bits runs from bit 8p of its first
// group; character j covers bits 6j to 6j+6, so the characters that depend
// on b alone are those from ceil(8p/6) to floor(8(p+n)/6): the ones before
// depend on the bytes before b, the one after on the bytes after it.
// Padding never falls inside a core. The two alphabets differ only in
// '+' '/' against '-' '_'.
func appendCores(forms [][]byte, b []byte) [][]byte {
	buf := make([]byte, 2+len(b)) // two stand-in bytes before b
	copy(buf[2:], b)
	enc := make([]byte, base64.StdEncoding.EncodedLen(len(buf)))
	for p := range 3 {
		lo, hi := (4*p+2)/3, 4*(p+len(b))/3
		if hi-lo < minCore {
			continue
		}
		base64.StdEncoding.Encode(enc, buf[2-p:])
		std := bytes.Clone(enc[lo:hi])
		url := bytes.Clone(std)
		for i, c := range url {
			switch c {
			case '+':
				url[i] = '-'
			case '/':
				url[i] = '_'
			}
		}
		forms = append(forms, std, url)
	}
	return forms
}

// searchForms returns the forms of key the matcher looks for: those of
// Forms without duplicates and without any form that contains another (a
// text holds a form exactly when it holds one of those kept), shortest
// first. For a key of 7 bytes or more that leaves the key raw and
// encodeURIComponent (one form when equal), the two hex forms and the
// key's distinct cores.
func searchForms(key string) [][]byte {
	if key == "" {
		return nil
	}
	forms := keyForms([]byte(key), false)
	slices.SortStableFunc(forms, func(a, b []byte) int { return cmp.Compare(len(a), len(b)) })
	out := forms[:0]
next:
	for _, f := range forms {
		for _, g := range out {
			if bytes.Contains(f, g) {
				continue next
			}
		}
		out = append(out, f)
	}
	return out
}

// CheckJSON reports whether body is exactly one JSON value and, when key is
// not empty, whether any decoded string value or object key, or the same
// string with its HTML character references decoded, contains key in one
// of its forms. It returns nil, ErrNotJSON or ErrReflect.
//
// The scan (scan.go) sees every string rather than decoding into maps:
// duplicate object keys, which a map decode would drop, cannot hide a
// reflected key that the raw bytes still carry. Escapes are decoded first,
// so "\u002d" cannot hide one either, and character references next, so
// "&#x2d;" (what an HTML encoder that escapes every non-alphanumeric
// character writes) cannot. Splitting a key across strings, markup or
// other encodings are not detected: this is defence in depth.
func CheckJSON(body []byte, key string) error {
	valid, reflected := scanWith(body, NewKeyForms(key).matcher())
	switch {
	case reflected:
		return ErrReflect
	case !valid:
		return ErrNotJSON
	}
	return nil
}

// CheckText reports ErrReflect when text, or text with its HTML character
// references decoded, contains key in one of its forms, and nil otherwise
// (always for an empty key). It is the check for answers passed on as text
// after the caller decoded and rewrote them (search results, a webhook's
// text), run on exactly what is passed on.
func CheckText(text, key string) error {
	return NewTextChecker(key).Check(text)
}

// TextChecker is CheckText for one key, its forms and matcher made once,
// for a caller that checks many texts against the same key (the broker's
// preview tap checks the text of every delta of an answer). It holds the
// key's forms: keep it no longer than the answer it checks. It prints as
// its type's name only.
type TextChecker struct {
	m   *matcher
	ent entityDecoder
}

// NewTextChecker returns the checker of key; an empty key finds nothing.
func NewTextChecker(key string) *TextChecker { return NewKeyForms(key).TextChecker() }

// TextChecker returns a checker of the key's forms.
func (k *KeyForms) TextChecker() *TextChecker { return &TextChecker{m: k.matcher()} }

// Check is CheckText(text, key) for the checker's key.
func (c *TextChecker) Check(text string) error {
	if len(c.m.forms) == 0 {
		return nil
	}
	return c.CheckBytes([]byte(text))
}

// CheckBytes is Check for a text held as bytes, such as a file's: its
// bytes as they are, and with their HTML character references decoded.
func (c *TextChecker) CheckBytes(b []byte) error {
	if len(c.m.forms) == 0 {
		return nil
	}
	if c.m.contains(b) || c.m.containsDecoded(&c.ent, b, false) {
		return ErrReflect
	}
	return nil
}

// String keeps the key's forms out of any print of the checker.
func (c *TextChecker) String() string { return "upstream.TextChecker" }

// GoString is String for %#v.
func (c *TextChecker) GoString() string { return c.String() }

func containsAny(s string, forms []string) bool {
	for _, f := range forms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}
