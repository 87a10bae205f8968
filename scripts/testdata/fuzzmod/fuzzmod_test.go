package fuzzmod

import (
	"strings"
	"testing"
)

func FuzzWords(f *testing.F) {
	f.Add("a b")
	f.Fuzz(func(t *testing.T, s string) {
		for _, w := range Words(s) {
			if w == "" || strings.ContainsAny(w, " \t\n") {
				t.Fatalf("Words(%q) gave %q", s, w)
			}
		}
	})
}
