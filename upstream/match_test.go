package upstream

import (
	"bytes"
	"strings"
	"testing"
)

func naiveContains(s []byte, forms [][]byte) bool {
	for _, f := range forms {
		if bytes.Contains(s, f) {
			return true
		}
	}
	return false
}

func formBytes(key string) [][]byte {
	var out [][]byte
	for _, f := range Forms(key) {
		out = append(out, []byte(f))
	}
	return out
}

var matcherCases = []struct {
	name, key, text string
}{
	{"absent", "sk-proj-abcdefghijklmnop0123456789", strings.Repeat("The quick brown fox. ", 100)},
	{"at-start", "sk-proj-abcdefghijklmnop0123456789", "sk-proj-abcdefghijklmnop0123456789 and more text"},
	{"at-end", "sk-proj-abcdefghijklmnop0123456789", strings.Repeat("x", 97) + "sk-proj-abcdefghijklmnop0123456789"},
	{"exact", "sk-proj-abcdefghijklmnop0123456789", "sk-proj-abcdefghijklmnop0123456789"},
	{"hex-in-prose", "sk-proj-abcdefghijklmnop0123456789", "id " + strings.ToUpper("736b2d70726f6a2d6162636465666768696a6b6c6d6e6f70303132333435363738") + "39 end"},
	{"one-byte-short", "sk-proj-abcdefghijklmnop0123456789", "sk-proj-abcdefghijklmnop012345678"},
	{"short-key-fallback", "k1", "a k1 b"},
	{"short-key-absent", "k1", "a k2 b"},
	{"sixteen-byte-key", "0123456789abcdef", strings.Repeat("-", 31) + "0123456789abcdef"},
}

func TestMatcherAgreesWithNaiveSearch(t *testing.T) {
	for _, tt := range matcherCases {
		t.Run(tt.name, func(t *testing.T) {
			forms := formBytes(tt.key)
			want := naiveContains([]byte(tt.text), forms)
			if got := newMatcher(forms).contains([]byte(tt.text)); got != want {
				t.Errorf("contains(%.60q) = %v; want %v", tt.text, got, want)
			}
		})
	}
}

// Every placement of the key in a text is found, whatever its offset
// relative to the sampling step.
func TestMatcherFindsEveryOffset(t *testing.T) {
	key := "sk-proj-abcdefghijklmnop0123456789"
	m := newMatcher(formBytes(key))
	for _, form := range Forms(key) {
		for off := range 80 {
			// Long enough for the sampled path (sampleMin).
			text := []byte(strings.Repeat("y", sampleMin+off) + form + strings.Repeat("z", 7))
			if !m.contains(text) {
				t.Fatalf("form %q at offset %d not found", form, off)
			}
		}
	}
}

func FuzzMatcher(f *testing.F) {
	for _, tt := range matcherCases {
		f.Add(tt.key, tt.text, uint16(0))
		f.Add(tt.key, tt.text, uint16(len(tt.text)/2))
	}
	f.Fuzz(func(t *testing.T, key, text string, at uint16) {
		if key == "" {
			return
		}
		// The matcher runs on the searched forms; the naive search on all
		// of them, so pruning is checked too.
		m := newMatcher(searchForms(key))
		if got, want := m.contains([]byte(text)), naiveContains([]byte(text), formBytes(key)); got != want {
			t.Fatalf("contains(%q) with key %q = %v; want %v", text, key, got, want)
		}
		// Insert a form and it must be found, on the sampled path too.
		text += strings.Repeat(" ", int(at)%2*sampleMin)
		pos := int(at) % (len(text) + 1)
		all := Forms(key)
		form := all[int(at)%len(all)]
		with := text[:pos] + form + text[pos:]
		if !m.contains([]byte(with)) {
			t.Fatalf("inserted form %q at %d of %q not found", form, pos, text)
		}
	})
}
