package upstream

import (
	"html"
	"testing"
)

var entityCases = []string{
	"", "&", "&&", "a & b", "R&D", "&amp;", "&amp", "&ampx", "&amp;lt;", "&#114;&#116;&#115;",
	"&#x2d;", "&#X2D", "&#5", "&#5 x", "&#", "&#;", "&#; x", "&#x", "&#x;", "&#x; ", "&#x g",
	"&#0000000114;", "&#128;", "&#xD800;", "&#99999999999;", "&notit;", "&notin;", "&not",
	"&gt0", "&lt;b&gt;", "&#12#34;", "&amp#x41;", "&NotNestedGreaterGreater;", "&a#", "x&#115",
	"\xff&#115;\xfe", "&lowbar;&sol;&plus;",
}

func TestDecodeEntities(t *testing.T) {
	for _, s := range entityCases {
		checkDecode(t, s)
	}
}

func FuzzDecodeEntities(f *testing.F) {
	for _, s := range entityCases {
		f.Add(s)
	}
	f.Fuzz(checkDecode)
}

// checkDecode compares the decoder with html.UnescapeString, twice on one
// decoder so that cached spans are checked too.
func checkDecode(t *testing.T, s string) {
	want := html.UnescapeString(s)
	d := entityDecoder{buf: []byte("stale")}
	for range 2 {
		var got []byte
		calls := 0
		d.segments([]byte(s), false, nil, func(dec []byte) bool {
			got = append([]byte(nil), dec...)
			calls++
			return false
		})
		if calls == 0 {
			got = []byte(s)
		}
		if string(got) != want || calls > 1 {
			t.Fatalf("decoded %q as %q in %d calls; want %q in one", s, got, calls, want)
		}
		if calls == 1 && want == s {
			t.Fatalf("decoding %q reports a change that leaves the text as it was", s)
		}
	}
}

// FuzzDecodedForms: looking only at the stretches between barriers finds a
// form exactly when the whole decoded text holds one that s does not.
func FuzzDecodedForms(f *testing.F) {
	f.Add("sk-ab", "x &lt;sk&#45;ab&gt; y")
	f.Add("a<b", "&lt;a&lt;b&amp;")
	f.Add("k-1-2", "k&#45;1&nbsp;&#45;2 k&#x2d;1&#45;2")
	for _, s := range entityCases {
		f.Add("rt-s", s)
	}
	f.Fuzz(func(t *testing.T, key, s string) {
		if key == "" {
			return
		}
		forms := [][]byte{[]byte(key)}
		m := newMatcher(forms)
		raw := naiveContains([]byte(s), forms)
		want := !raw && naiveContains([]byte(html.UnescapeString(s)), forms)
		got := !raw && m.containsDecoded(&entityDecoder{}, []byte(s), false)
		if got != want {
			t.Fatalf("key %q in %q decoded: found %v; want %v", key, s, got, want)
		}
	})
}

// segments skips spans of one character after the ampersand (with or
// without a semicolon): no character reference is that short.
func TestShortSpansNeverDecode(t *testing.T) {
	for c := range 256 {
		one := string([]byte{byte(c)})
		for _, s := range []string{"&" + one, "&" + one + " ", "&" + one + ";", "&" + one + "; "} {
			if c != '&' && html.UnescapeString(s) != s {
				t.Errorf("html.UnescapeString(%q) = %q; the decoder skips it", s, html.UnescapeString(s))
			}
		}
	}
}
