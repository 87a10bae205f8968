package parse

import "testing"

func FuzzPair(f *testing.F) {
	f.Add("a=1")
	f.Fuzz(func(t *testing.T, s string) {
		key, _, err := Pair(s)
		if err == nil && key == "" {
			t.Fatalf("Pair(%q) gave an empty key", s)
		}
	})
}
