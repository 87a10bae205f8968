package hosttool

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// lexerSeeds are inputs where tokenizers tend to differ: raw text and its
// end tags, the script data escape states, comment and doctype endings,
// bogus comments, attribute quoting and self-closing, character
// references in text and in attributes.
var lexerSeeds = []string{
	"", "x", "<", "</", "<!", "<?", "</>", "a<b", "a</b", "<b x", "<b x=", `<b x="1`, "<b x='1' y=2 z>",
	`<a href="?a=1&copy=2&notit&amp&semi;&notx;&#x41;&#0;&#x110000;&;&#;&#x;&Amp;&amp=">t</a>`,
	"<p>&lt;b&gt; &amp &notit; &notin; &semi; &#128; &#xD800; &fjlig; &NotEqualTilde;</p>",
	"<script>a</script><script>a<!--b</script>c--></script>d",
	"<script><!--<script>x</script>y</script>z-->w</script>v",
	"<SCRIPT>x</SCRIPT >y<style>a</style/>b<title>&amp;T</title><textarea>&lt;</textarea><xmp>&lt;</xmp>",
	"<plaintext>a<b>c</plaintext>", "<noscript><p>x</p></noscript>", "<iframe><b></iframe>",
	"<!-->a<!--->b<!---->c<!-- x -- y --!>d<!--e--!-f-->g<!--h", "<!--", "<!---", "<!--!", "<!--a--!",
	"<!DOCTYPE html><!doctype>x<!DOC", "<!DOCTYPE", "<!DOCTYPE ", "<![CDATA[x]]>y", "<?xml x?>z", "<!x>y",
	"<br/><p a=/><p a=b/><p/ a><p =a>", "<a b c=d e = 'f' g=\"h\">", "<p\x00q a\x00=\x00>x\x00y</p\x00q>",
	"a\r\nb\rc<p title='a\r\nb'>\r</p><script>\r\x00</script>", "<div \t\n\fa>", "</p a=b>", "</ p>", "</\x00>",
	"<a" + strings.Repeat(" x", 70) + " href=/y>", "<a" + strings.Repeat(" x", 70) + ">",
}

// xnetTokens renders x/net's token stream: each token's raw bytes, type
// (self-closing as start) and content, attributes first-of-name.
func xnetTokens(src []byte) []string {
	z := html.NewTokenizer(bytes.NewReader(src))
	var out []string
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return out
		}
		raw := string(z.Raw())
		if tt == html.SelfClosingTagToken {
			tt = html.StartTagToken
		}
		var body string
		switch tt {
		case html.TextToken, html.CommentToken, html.DoctypeToken:
			body = string(z.Text())
		default:
			name, more := z.TagName()
			body = string(name)
			for more && tt == html.StartTagToken {
				var k, v []byte
				k, v, more = z.TagAttr()
				body += fmt.Sprintf(" %q=%q", k, v)
			}
		}
		out = append(out, fmt.Sprintf("%v %q %s", tt, raw, body))
	}
}

// lexerTokens renders our lexer's stream the same way. Attributes are
// de-duplicated here (first of a name), as x/net does in the tokenizer; a
// start tag that hit maxTagAttrs ends in " …".
func lexerTokens(src []byte) []string {
	l := newLexer(src)
	var out []string
	for {
		tt := l.next()
		if tt == html.ErrorToken {
			return out
		}
		raw := string(src[l.start:l.end])
		if tt == html.SelfClosingTagToken {
			tt = html.StartTagToken
		}
		var body string
		switch tt {
		case html.TextToken:
			body = string(l.text())
		case html.CommentToken, html.DoctypeToken:
			// Comments lose NUL and both are unescaped, as the
			// Tokenizer's Text does; the extraction never reads them.
			s := convertNewlines(bytes.Clone(src[l.data.start:l.data.end]))
			if tt == html.CommentToken {
				s = bytes.ReplaceAll(s, []byte{0}, []byte("\uFFFD"))
			}
			body = html.UnescapeString(string(s))
		default:
			body = lowerNUL(l.name())
			if tt != html.StartTagToken {
				break
			}
			var seen []string
			for _, a := range l.attrs {
				k := lowerNUL(l.src[a[0].start:a[0].end])
				if slices.Contains(seen, k) {
					continue
				}
				seen = append(seen, k)
				body += fmt.Sprintf(" %q=%q", k, attrValue(l.src[a[1].start:a[1].end]))
			}
			if len(l.attrs) == maxTagAttrs {
				body += " …"
			}
		}
		out = append(out, fmt.Sprintf("%v %q %s", tt, raw, body))
	}
}

// lowerNUL lowers ASCII letters and replaces NUL, as x/net does to names.
func lowerNUL(b []byte) string {
	b = bytes.Clone(b)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return strings.ReplaceAll(string(b), "\x00", "\uFFFD")
}

// checkLexer fails when the lexer's tokens differ from x/net's.
func checkLexer(t *testing.T, src string) {
	t.Helper()
	got, want := lexerTokens([]byte(src)), xnetTokens([]byte(src))
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g == w || strings.HasSuffix(g, " …") && strings.HasPrefix(w, strings.TrimSuffix(g, " …")) {
			continue
		}
		t.Fatalf("lexer(%.200q) token %d:\n got %.300s\nwant %.300s", src, i, g, w)
	}
}

func TestLexerMatchesTokenizer(t *testing.T) {
	for _, s := range lexerSeeds {
		checkLexer(t, s)
	}
	for _, tc := range extractCases {
		checkLexer(t, tc.html)
	}
	for _, f := range families {
		checkLexer(t, f.gen(4<<10))
	}
}

// FuzzLexerMatchesTokenizer holds the lexer to x/net's Tokenizer, token by
// token: raw bytes, type, text, tag name and attributes.
func FuzzLexerMatchesTokenizer(f *testing.F) {
	for _, s := range lexerSeeds {
		f.Add(s)
	}
	for _, fam := range families {
		f.Add(fam.gen(512))
	}
	f.Fuzz(func(t *testing.T, src string) {
		checkLexer(t, src)
	})
}

func TestUnescapeAttr(t *testing.T) {
	for in, want := range map[string]string{
		"?a=1&copy=2":   "?a=1&copy=2",
		"&copy;&copy ":  "©© ",
		"&notit":        "&notit",
		"&notin;":       "∉",
		"&notx;":        "&notx;",
		"&semi;":        ";",
		"&amp&lt&gt":    "&<>",
		"&#65;&#x42&#;": "AB&#;",
		"&":             "&",
	} {
		if got := unescapeAttr(in); got != want {
			t.Errorf("unescapeAttr(%q) = %q; want %q", in, got, want)
		}
	}
}
