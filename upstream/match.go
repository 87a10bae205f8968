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
// checks it against a 4096-bit filter of the forms' windows and, only on a
// filter hit, verifies the forms around that position. Forms shorter than
// minGramLen, and strings shorter than sampleMin (where a few short
// searches cost less than building the filter), use bytes.Contains. The
// filter is built on first use and lives only as long as one CheckJSON or
// CheckText call: nothing derived from the credential outlives it.
type matcher struct {
	forms  [][]byte
	minLen int
	step   int
	built  bool
	filter [4096 / 64]uint64
	// bytes marks every byte some form holds: a text decoded into other
	// bytes only (see entityDecoder) cannot take part in a match.
	bytes [256]bool
}

const (
	gram       = 8
	minGramLen = 2 * gram // below this the sampling step would be too short to pay
	sampleMin  = 1024     // shorter strings are searched directly
)

func newMatcher(forms [][]byte) *matcher {
	m := &matcher{forms: forms}
	if len(forms) == 0 {
		return m
	}
	m.minLen = len(forms[0])
	for _, f := range forms {
		m.minLen = min(m.minLen, len(f))
		for _, c := range f {
			m.bytes[c] = true
		}
	}
	if m.minLen >= minGramLen {
		m.step = m.minLen - gram + 1
	}
	return m
}

// build fills the filter with every 8-byte window of every form.
func (m *matcher) build() {
	for _, f := range m.forms {
		for i := 0; i+gram <= len(f); i++ {
			h := filterSlot(binary.LittleEndian.Uint64(f[i:]))
			m.filter[h/64] |= 1 << (h % 64)
		}
	}
	m.built = true
}

func filterSlot(w uint64) uint64 { return (w * 0x9E3779B97F4A7C15) >> 52 } // 12 bits

// contains reports whether s holds any form.
func (m *matcher) contains(s []byte) bool {
	if len(m.forms) == 0 || len(s) < m.minLen {
		return false
	}
	if m.step == 0 || len(s) < sampleMin {
		for _, f := range m.forms {
			if bytes.Contains(s, f) {
				return true
			}
		}
		return false
	}
	if !m.built {
		m.build()
	}
	for j := 0; j+gram <= len(s); j += m.step {
		h := filterSlot(binary.LittleEndian.Uint64(s[j:]))
		if m.filter[h/64]&(1<<(h%64)) != 0 && m.verify(s, j) {
			return true
		}
	}
	return false
}

// containsDecoded reports whether s with its HTML character references
// decoded holds a form that s itself does not; the caller checks s.
func (m *matcher) containsDecoded(d *entityDecoder, s []byte) bool {
	if len(m.forms) == 0 || bytes.IndexByte(s, '&') < 0 {
		return false
	}
	return d.segments(s, &m.bytes, m.contains)
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
