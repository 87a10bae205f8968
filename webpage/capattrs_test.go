package webpage

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

func TestCapAttrs(t *testing.T) {
	at64, at65 := attrsN(maxTagAttrs), attrsN(maxTagAttrs+1)
	kept := at64 + " " // up to the 65th attribute's first byte
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", ""},
		{"text", "a < b <> c", "a < b <> c"},
		{"at-cap", "<b" + at64 + ">x", "<b" + at64 + ">x"},
		{"over-cap", "<b" + at65 + ">x", "<b" + kept + ">x"},
		{"over-cap-end-tag", "</b" + at65 + ">x", "</b" + kept + ">x"},
		{"over-cap-self-closing", "<br" + at65 + "/>x", "<br" + kept + ">x"},
		{"over-cap-at-eof", "<b" + at65, "<b" + kept},
		{"over-cap-rest-dropped", "<b" + at65 + " href=/x hidden>x", "<b" + kept + ">x"},
		// Values are not attributes: quoted (white space and ">" in
		// them), unquoted, "/" inside them.
		{"quoted-values", "<b" + attrsN(61) + ` t="a b > c" u='d e' v=f/g>x`, "<b" + attrsN(61) + ` t="a b > c" u='d e' v=f/g>x`},
		{"over-cap-quoted", "<b" + attrsN(63) + ` t="a b > c"` + attrsN(2) + ">x", "<b" + attrsN(63) + ` t="a b > c" >x`},
		// Names: "=" first is part of one, a quote in one opens nothing,
		// "/" and a closing quote end one, an empty one is not counted.
		{"eq-name", `<b ="` + at64 + `>x"`, `<b ="` + attrsN(63) + ` >x"`},
		{"quote-in-name", `<b a"` + at64 + `>x"`, `<b a"` + attrsN(63) + ` >x"`},
		{"slash-names", "<b" + strings.Repeat("/a", maxTagAttrs) + "/>", "<b" + strings.Repeat("/a", maxTagAttrs) + "/>"},
		{"slash-names-over", "<b" + strings.Repeat("/a", maxTagAttrs+1) + "/>", "<b" + strings.Repeat("/a", maxTagAttrs) + "/>"},
		{"after-quote", `<b a=""` + strings.Repeat(`b=""`, maxTagAttrs) + ">", `<b a=""` + strings.Repeat(`b=""`, maxTagAttrs-1) + ">"},
		{"not-tags", "<1" + at65 + "><!" + at65 + "></ " + at65 + ">", "<1" + at65 + "><!" + at65 + "></ " + at65 + ">"},
		// Every "<" and letter counts, whatever the context.
		{"in-script", "<script>if(a<b" + at65 + ")</script>", "<script>if(a<b" + kept + ">"},
		// The "script" of "</script>" is the 64th attribute here.
		{"in-script-at-cap", "<script>if(a<b" + attrsN(63) + ")</script>", "<script>if(a<b" + attrsN(63) + ")</script>"},
		{"in-comment", "<!--<b" + at65 + "-->", "<!--<b" + kept + ">"},
		{"in-value", `<p title="<b` + at65 + `">x`, `<p title="<b` + kept + `>x`},
		{"in-value-at-cap", `<p title="<b` + at64 + `">x`, `<p title="<b` + at64 + `">x`},
		// Where the Tokenizer reads a real tag that a quote opened in a
		// pseudo-tag hides from a cap following one tag at a time.
		{"after-script-quote", `<script><x y="</script><b` + at65 + `>"`, `<script><x y="</script><b` + kept + `>"`},
		{"after-raw-end-tag", `<script><x </script =" ` + at65 + `>"`, `<script><x </script =" ` + attrsN(maxTagAttrs-1) + ` >"`},
	} {
		got := string(capAttrs([]byte(tc.in)))
		if got != tc.want {
			t.Errorf("%s: capAttrs(%.80q…)\n got %q\nwant %q", tc.name, tc.in, got, tc.want)
		}
	}
}

// capAttrs leaves every page below the cap untouched, and allocates nothing
// for it.
func TestCapAttrsIdentity(t *testing.T) {
	pages := []string{fill(MaxParseBytes, "", "<b"+attrsN(maxTagAttrs)+">", "")}
	for _, tc := range extractCases {
		pages = append(pages, tc.html)
	}
	for _, p := range pages {
		in := []byte(p)
		if allocs := testing.AllocsPerRun(3, func() { capAttrs(in) }); allocs != 0 {
			t.Errorf("capAttrs(%.60q…) allocated %v times", p, allocs)
		}
		if out := capAttrs(in); &out[0] != &in[0] || len(out) != len(in) {
			t.Errorf("capAttrs(%.60q…) changed the page", p)
		}
	}
}

// candidates is an upper bound of the attributes of any tag in s, however
// read: the bytes that can start one (not white space, "/" or ">", after
// white space, "/" or a quote).
func candidates(s []byte) int {
	n := 0
	for i := 1; i < len(s); i++ {
		p, c := s[i-1], s[i]
		if (isTagSpace(p) || p == '/' || p == '"' || p == '\'') && !isTagSpace(c) && c != '/' && c != '>' {
			n++
		}
	}
	return n
}

// xnetAttrs returns the attributes x/net's Tokenizer keeps of the tag that
// starts at s[0] ("<a" or "</a", an end tag read as a start tag), or -1
// when none starts there. The Tokenizer drops repeated names, so it is a
// lower bound of the attributes it reads.
func xnetAttrs(s []byte) int {
	if len(s) > 2 && s[1] == '/' {
		s = append([]byte{'<'}, s[2:]...)
	}
	z := html.NewTokenizer(bytes.NewReader(s))
	if tt := z.Next(); tt != html.StartTagToken && tt != html.SelfClosingTagToken {
		return -1
	}
	n := 0
	for _, more := z.TagName(); more; n++ {
		_, _, more = z.TagAttr()
	}
	return n
}

// isSubsequence reports whether out is in with some bytes left out.
func isSubsequence(out, in []byte) bool {
	for _, c := range out {
		i := bytes.IndexByte(in, c)
		if i < 0 {
			return false
		}
		in = in[i+1:]
	}
	return true
}

var capSeeds = []string{
	"<b" + attrsN(maxTagAttrs) + ">x", "<b" + attrsN(maxTagAttrs+1) + ">x",
	"</b" + attrsN(maxTagAttrs+1) + ">", `<b a="1 2" b='3 > 4' c=5/6 /d ="e"` + attrsN(maxTagAttrs-4) + ">",
	`<script><x y="</script><b` + attrsN(maxTagAttrs+1) + `>"`, `<!--<x y="--><b` + attrsN(maxTagAttrs+1) + `>"`,
	`<i ="></i><b` + attrsN(maxTagAttrs+1) + `>"`, `<script><x </script =" ` + attrsN(maxTagAttrs+1) + `>"`,
	`<p title="<b` + attrsN(maxTagAttrs) + `">x`, "<b" + strings.Repeat("/a", maxTagAttrs+1) + "/>",
}

// FuzzCapAttrsIsIdentityBelowCap: capAttrs only leaves bytes out; it leaves
// nothing out of a page whose tags, however read, have at most maxTagAttrs
// attributes (so x/net's tokens are the page's own); and after it no tag
// the Tokenizer reads, from any "<", keeps more than maxTagAttrs
// attributes.
func FuzzCapAttrsIsIdentityBelowCap(f *testing.F) {
	for _, s := range capSeeds {
		f.Add(s)
	}
	for _, tc := range extractCases {
		f.Add(tc.html)
	}
	f.Fuzz(func(t *testing.T, src string) {
		in := []byte(src)
		out := capAttrs(bytes.Clone(in))
		if !isSubsequence(out, in) {
			t.Fatalf("capAttrs(%q) = %q: not the page with bytes left out", in, out)
		}
		if candidates(in) <= maxTagAttrs && !bytes.Equal(out, in) {
			t.Fatalf("capAttrs(%q) = %q; below the cap it must be the page", in, out)
		}
		over := false
		for i := range in {
			if in[i] == '<' && xnetAttrs(in[i:]) > maxTagAttrs {
				over = true
			}
		}
		if over && bytes.Equal(out, in) {
			t.Fatalf("capAttrs(%q) left a tag over the cap", in)
		}
		for i := range out {
			if out[i] == '<' {
				if n := xnetAttrs(out[i:]); n > maxTagAttrs {
					t.Fatalf("capAttrs(%q) = %q: the tag at %d keeps %d attributes", in, out, i, n)
				}
			}
		}
	})
}
