package upstream

import (
	"bytes"
	"encoding/binary"
)

// matcher finds any of a few long patterns (the credential's forms, see
// searchForms) in large texts without scanning the text once per pattern.
//
// bytes.Contains per form costs one pass per form, and on ordinary prose
// each pass stops at every occurrence of the form's first byte: about 3 ms
// per MiB of model answer for six forms. The matcher instead samples the text: every
// occurrence of a form of length m contains, at some position that is a
// multiple of step = minLen-gram+1, an 8-byte window that is one of that
// form's own 8-byte windows. So it reads one 8-byte word every step bytes,
// checks it against a bit filter of the forms' windows and, only on a
// filter hit, verifies the forms around that position. A hit that no form
// verifies costs about as much as a hundred samples, so the filter for a
// large text has 2^16 bits: the ~600 windows of a long key fill about 1 %
// of it. For a small text, where building dominates, it has 2^13.
//
// Forms shorter than minGramLen use bytes.Contains, and so do texts
// shorter than sampleMin until the filter is built (a few short searches
// cost less than building it): the JSON scan builds it at once for a body
// of sampleMin bytes or more, whose strings it then checks piece by piece,
// each piece sampled on its own (an occurrence inside a piece still holds
// a sampled window). The filters live as long as the KeyForms they were
// built for (one CheckJSON or CheckText call, or what a caller that made
// them keeps): nothing derived from the credential outlives it.
type matcher struct {
	forms  [][]byte
	minLen int
	step   int
	// bytes marks every byte some form holds: a text decoded into other
	// bytes only (see entityDecoder) cannot take part in a match.
	bytes *[256]bool
	kf    *KeyForms // where the filters are built, once
	built bool
	// filter is the forms' filter chosen for the first text long enough
	// (build), shared with every matcher of the same KeyForms.
	filter []uint64
	shift  uint // 64 minus the log2 of the filter's bits
}

const (
	gram       = 8
	minGramLen = 2 * gram // below this the sampling step would be too short to pay
	sampleMin  = 1024     // shorter strings are searched directly
	largeText  = 64 << 10 // texts of this size or more get the large filter
)

// newMatcher is the matcher of forms (as searchForms returns them) for one
// text.
func newMatcher(forms [][]byte) *matcher { return keyFormsOf(forms).matcher() }

// build chooses the filter for a text of n bytes.
func (m *matcher) build(n int) {
	if m.built || m.step == 0 {
		return
	}
	log := uint(13)
	if n >= largeText {
		log = 16
	}
	m.filter, m.shift = m.kf.filter(log), 64-log
	m.built = true
}

func (m *matcher) slot(w uint64) uint64 { return slot(w, m.shift) }

// slot is the filter bit of an 8-byte window, for a filter of 2^(64-shift)
// bits.
func slot(w uint64, shift uint) uint64 { return (w * 0x9E3779B97F4A7C15) >> shift }

func load64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// contains reports whether s holds any form.
func (m *matcher) contains(s []byte) bool {
	if len(m.forms) == 0 || len(s) < m.minLen {
		return false
	}
	if m.step == 0 || !m.built && len(s) < sampleMin {
		for _, f := range m.forms {
			if bytes.Contains(s, f) {
				return true
			}
		}
		return false
	}
	m.build(len(s))
	for j := 0; j+gram <= len(s); j += m.step {
		h := m.slot(binary.LittleEndian.Uint64(s[j:]))
		if m.filter[h/64]&(1<<(h%64)) != 0 && m.verify(s, j) {
			return true
		}
	}
	return false
}

// containsDecoded reports whether s with its HTML character references
// decoded holds a form that s itself does not; the caller checks s.
// followed tells whether s is part of a longer text whose next byte is
// not one a reference can hold (see entityDecoder.segments).
func (m *matcher) containsDecoded(d *entityDecoder, s []byte, followed bool) bool {
	if len(m.forms) == 0 || bytes.IndexByte(s, '&') < 0 {
		return false
	}
	return d.segments(s, followed, m.bytes, m.contains)
}

// verify looks for a form overlapping the 8-byte window at j.
func (m *matcher) verify(s []byte, j int) bool {
	for _, f := range m.forms {
		lo, hi := max(0, j+gram-len(f)), min(len(s), j+len(f))
		if bytes.Contains(s[lo:hi], f) {
			return true
		}
	}
	return false
}
