// Package door is the last check on the host before anything leaves for a
// guest (issue 21 item 2): whatever path a secret took through a turn
// (a reply a worker wrote, a preview, a reply file, a notice, a research
// report, an owner command's answer), the router hands nothing to a
// surface that holds, in any form, a credential the host holds.
//
// A Door is given the host's credentials as names and readers, never as
// values: each value is read on every check (so a rotated key is checked
// at once and none is kept in the Door), its forms made for that check
// (upstream.KeyForms: raw, URL-encoded, base64 at every alignment in both
// alphabets and their cores, hex in both cases, and the text with its HTML
// character references decoded), and dropped with it. A text is checked as
// it is and, when it holds characters a reader does not see (control and
// format characters: a zero-width space inside a key hides it from a
// search, not from the reader), once more without them. A hit is an error
// wrapping rtsandbox.ErrCredential that names the credential by its
// config key, never its value: the router replaces what it was about to
// post with the fixed failure text and logs the error under its own class.
//
// It is one rule in one place for every surface and both modes: the
// router calls it for every chunk it delivers (the whole text before it
// is cut into chunks, so a key split across two chunks is found), every
// preview (the whole text so far) and every file (its name and bytes).
package door

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// Secret is one credential the host holds: the config key that names it
// (what the operator log says) and its reader, called on every check.
type Secret struct {
	Name string
	Read func() rtsandbox.Secret
}

// Door checks what is about to leave for a guest. It is safe for
// concurrent use and keeps no secret value.
type Door struct {
	secrets []Secret
}

// New returns the Door of secrets; a reader that returns "" (an unset
// variable) checks nothing that time.
func New(secrets []Secret) *Door {
	return &Door{secrets: append([]Secret(nil), secrets...)}
}

// Check reports, as an error wrapping rtsandbox.ErrCredential that names
// the credential and where it was found (never its value), whether text
// or any of files (their names and bytes) holds a credential of the host
// in any form; nil when none does.
func (d *Door) Check(text string, files []rtsandbox.File) error {
	// Each text as it is and, when it holds characters a reader does not
	// see, as the reader sees it: made once for every credential.
	texts := views([]byte(text))
	type fileViews struct{ name, data [][]byte }
	fv := make([]fileViews, len(files))
	for i, f := range files {
		fv[i] = fileViews{views([]byte(f.Name)), views(f.Data)}
	}
	for _, s := range d.secrets {
		v := s.Read()
		if v == "" {
			continue
		}
		c := upstream.NewTextChecker(string(v))
		if found(c, texts) {
			return fmt.Errorf("%w: %s in the text", rtsandbox.ErrCredential, s.Name)
		}
		for i := range fv {
			if found(c, fv[i].name) || found(c, fv[i].data) {
				return fmt.Errorf("%w: %s in file %d", rtsandbox.ErrCredential, s.Name, i+1)
			}
		}
	}
	return nil
}

func found(c *upstream.TextChecker, texts [][]byte) bool {
	for _, t := range texts {
		if len(t) > 0 && c.CheckBytes(t) != nil {
			return true
		}
	}
	return false
}

// views returns b, and b as a reader sees it when that differs (see
// visible).
func views(b []byte) [][]byte {
	if v, ok := visible(b); ok {
		return [][]byte{b, v}
	}
	return [][]byte{b}
}

// visible returns b without the characters a reader does not see, and
// whether it held any: control characters other than newline, carriage
// return and tab (a terminal drops them: console.Printable) and format
// characters (Unicode Cf: U+200B ZERO WIDTH SPACE, U+00AD SOFT HYPHEN,
// U+2060 WORD JOINER, U+FEFF, the bidirectional controls …), which chat
// clients show as nothing. A key cut by them is whole on the reader's
// screen. Plain ASCII text, nearly every reply, is looked at once.
func visible(b []byte) ([]byte, bool) {
	i := 0
	for ; i < len(b); i++ {
		c := b[i]
		if c >= utf8.RuneSelf || c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c == 0x7f {
			break
		}
	}
	if i == len(b) {
		return nil, false
	}
	out := make([]byte, 0, len(b))
	out = append(out, b[:i]...)
	dropped := false
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r != '\n' && r != '\r' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			dropped = true
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out, dropped
}

// String keeps a print of the Door to its type's name.
func (d *Door) String() string { return "door.Door" }

// GoString is String for %#v.
func (d *Door) GoString() string { return d.String() }
