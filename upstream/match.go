package upstream

import (
	"bytes"
	"encoding/binary"
)

// matcher finds any of a few long patterns (the credential's six forms) in
// large texts without scanning the text once per pattern.
//
// bytes.Contains per form costs six passes, and on ordinary prose each
// pass stops at every occurrence of the form's first byte: about 3 ms per
// MiB of model answer. The matcher instead samples the text: every
// occurrence of a form of length m contains, at some position that is a
// multiple of step = minLen-gram+1, an 8-byte window that is one of that
// form's own 8-byte windows. So it reads one 8-byte word every step bytes,
// checks it against a 4096-bit filter of the forms' windows and, only on a
// filter hit, verifies the forms around that position. Forms shorter than
// minGramLen use bytes.Contains.
type matcher struct {
	forms  [][]byte
	minLen int
	step   int
	filter [4096 / 64]uint64
	grams  map[uint64]struct{}
}

const (
	gram       = 8
	minGramLen = 2 * gram // below this the sampling step would be too short to pay
)

func newMatcher(forms [][]byte) *matcher {
	m := &matcher{forms: forms}
	if len(forms) == 0 {
		return m
	}
	m.minLen = len(forms[0])
	for _, f := range forms {
		m.minLen = min(m.minLen, len(f))
	}
	if m.minLen < minGramLen {
		return m
	}
	m.step = m.minLen - gram + 1
	m.grams = make(map[uint64]struct{})
	for _, f := range forms {
		for i := 0; i+gram <= len(f); i++ {
			w := binary.LittleEndian.Uint64(f[i:])
			m.grams[w] = struct{}{}
			h := filterSlot(w)
			m.filter[h/64] |= 1 << (h % 64)
		}
	}
	return m
}

func filterSlot(w uint64) uint64 { return (w * 0x9E3779B97F4A7C15) >> 52 } // 12 bits

// contains reports whether s holds any form.
func (m *matcher) contains(s []byte) bool {
	if len(m.forms) == 0 || len(s) < m.minLen {
		return false
	}
	if m.step == 0 {
		for _, f := range m.forms {
			if bytes.Contains(s, f) {
				return true
			}
		}
		return false
	}
	for j := 0; j+gram <= len(s); j += m.step {
		w := binary.LittleEndian.Uint64(s[j:])
		h := filterSlot(w)
		if m.filter[h/64]&(1<<(h%64)) == 0 {
			continue
		}
		if _, ok := m.grams[w]; ok && m.verify(s, j) {
			return true
		}
	}
	return false
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
