package attach

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/rtsandbox/rtsandbox"
)

// Name limits of docs/session.md, "Attachments in, reply files out", and Linux's NAME_MAX, which bounds
// the bytes of one path element.
const (
	MaxNameUnits  = 120
	MaxPrefixLen  = 160
	maxNameBytes  = 255
	fallbackName  = "file"
	replacementCh = '_'
)

// ErrPrefix is FileName's refusal of a prefix that is not 1–160 of
// [a-zA-Z0-9_-]; the reference reports it as "Invalid message id".
var ErrPrefix = fmt.Errorf("%w: Invalid message id", rtsandbox.ErrInvalid)

// SanitizeName turns a guest-supplied file name into a safe one (docs/session.md, "Attachments in, reply files out"
// step 8; see the package doc). The result is always an
// wire.ValidSafeName of at most MaxNameUnits UTF-16 units.
//
// The leading-dot rule is applied again after the cut: cutting from the
// front can expose dots ("aaa…..x" → "..x"), and a name the cut turned
// into a hidden file is no better than one that started as one. The
// reference applies it before the cut only; this is stricter.
func SanitizeName(name string) string {
	name = norm.NFC.String(strings.ToValidUTF8(name, string(replacementCh)))
	name = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || unicode.IsControl(r) {
			return replacementCh
		}
		return r
	}, name)
	name = suffixUTF16(collapseLeadingDots(name), MaxNameUnits)
	if name = collapseLeadingDots(name); name == "" {
		return fallbackName
	}
	return name
}

// collapseLeadingDots replaces a leading run of dots with one '_'.
func collapseLeadingDots(name string) string {
	rest := strings.TrimLeft(name, ".")
	if len(rest) == len(name) {
		return name
	}
	return string(replacementCh) + rest
}

// suffixUTF16 returns the longest suffix of s of at most n UTF-16 units
// that does not split a character: the mirror of rtsandbox.PrefixUTF16.
func suffixUTF16(s string, n int) string {
	u := 0
	for i := len(s); i > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		u += max(utf16.RuneLen(r), 1) // as rtsandbox.UTF16Len counts
		if u > n {
			return s[i:]
		}
		i -= size
	}
	return s
}

// suffixBytes returns the longest suffix of s of at most n bytes that
// does not split a character.
func suffixBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// FileName is the on-disk name of attachment index of a message:
// "<prefix>-<index>-<SanitizeName(name)>" (docs/session.md, "Attachments in, reply files out"). prefix
// must be 1–160 of [a-zA-Z0-9_-] (ErrPrefix) and index ≥ 0. Where the
// whole would pass NAME_MAX (255 bytes: 120 units of CJK are 360 bytes),
// the name is cut further from the front, so the result can always be
// created and is always an wire.ValidSafeName.
func FileName(prefix string, index int, name string) (string, error) {
	if !validPrefix(prefix) {
		return "", ErrPrefix
	}
	if index < 0 {
		return "", fmt.Errorf("%w: attachment index %d", rtsandbox.ErrInvalid, index)
	}
	head := prefix + "-" + strconv.Itoa(index) + "-"
	return head + suffixBytes(SanitizeName(name), maxNameBytes-len(head)), nil
}

// validPrefix reports whether prefix matches ^[a-zA-Z0-9_-]{1,160}$.
func validPrefix(prefix string) bool {
	if prefix == "" || len(prefix) > MaxPrefixLen {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidPrefix reports whether prefix may start an attachment's file name
// (FileName): 1–160 of [a-zA-Z0-9_-].
func ValidPrefix(prefix string) bool { return validPrefix(prefix) }
