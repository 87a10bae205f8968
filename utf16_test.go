package rtsandbox_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

func TestPrefixUTF16(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"fits", "abc", 3, "abc"},
		{"cut-ascii", "abcdef", 4, "abcd"},
		{"zero", "abc", 0, ""},
		{"empty", "", 5, ""},
		{"cjk-one-unit-each", "丁丁丁", 2, "丁丁"},
		// An astral rune is two units: it is kept whole or not at all.
		{"astral-not-split", "a😀b", 2, "a"},
		{"astral-fits", "a😀b", 3, "a😀"},
		{"invalid-byte-counts-one", "a\xffb", 2, "a\xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rtsandbox.PrefixUTF16(tc.s, tc.n)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PrefixUTF16(%q, %d) (-want +got):\n%s", tc.s, tc.n, diff)
			}
			if n := rtsandbox.UTF16Len(got); n > tc.n {
				t.Errorf("prefix has %d units; want at most %d", n, tc.n)
			}
		})
	}
}
