package rtsandbox

import "testing"

// TestTrimJS: both sides of the worker protocol decide "blank" alike, so
// the host never refuses a memory text the worker accepted.
func TestTrimJS(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{" \t\n\r\v\f a \u00a0", "a"},
		{"\ufeffa\u2028\u2029", "a"},
		{"\u3000a\u205f", "a"},
		{"\u0085a\u0085", "\u0085a\u0085"}, // NEL is no JS whitespace
		{"", ""},
	} {
		if got := TrimJS(tc.in); got != tc.want {
			t.Errorf("TrimJS(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
