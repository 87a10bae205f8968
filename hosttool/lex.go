package hosttool

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// maxTagAttrs bounds the attributes the lexer keeps of one start tag; the
// rest are scanned past and never stored. The extraction reads six
// attributes (hidden, aria-hidden, style, type, href, alt) and takes the
// first of a name, so a real tag loses nothing.
const maxTagAttrs = 64

// span is a half-open byte range of the page.
type span struct{ start, end int }

// lexer splits an in-memory HTML page into tokens exactly as
// golang.org/x/net/html's Tokenizer (v0.62) does, the state machine below
// following its token.go (Copyright The Go Authors, BSD-style license), with
// three differences that make its cost linear in the page and independent of
// the markup: tokens are spans of the page (nothing is copied or lowered in
// place), a start tag keeps at most maxTagAttrs attributes, and attributes
// are neither copied nor de-duplicated. The x/net Tokenizer, as of v0.62,
// copies every attribute name twice and records it in a map to drop
// repeats: one tag of a few hundred thousand distinct attribute names costs
// over 100 MiB there. CDATA sections are bogus comments, as in HTML content.
// The differential fuzz target FuzzLexerMatchesTokenizer holds the two
// token streams equal.
type lexer struct {
	src []byte
	// start and end are the current token's raw bytes (x/net's z.raw);
	// end is also the read position.
	start, end int
	// data is the text of a text, comment or doctype token, or the name of
	// a tag.
	data span
	// eof is x/net's z.err: the read position reached the end.
	eof bool
	// rawTag is the pending raw text element, lower case, or "".
	rawTag string
	// textIsRaw: the text is not unescaped. convertNUL: NUL becomes
	// U+FFFD (raw text).
	textIsRaw, convertNUL bool
	tt                    html.TokenType
	// attrs are the kept attributes of a start tag: key and value spans.
	attrs [][2]span
	// pending is the attribute being read (x/net's z.pendingAttr).
	pending [2]span
}

func newLexer(src []byte) *lexer {
	return &lexer{src: src, attrs: make([][2]span, 0, maxTagAttrs)}
}

func (l *lexer) readByte() byte {
	if l.end >= len(l.src) {
		l.eof = true
		return 0
	}
	c := l.src[l.end]
	l.end++
	return c
}

func isTagSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f'
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func (l *lexer) skipWhiteSpace() {
	if l.eof {
		return
	}
	for {
		c := l.readByte()
		if l.eof {
			return
		}
		if !isTagSpace(c) {
			l.end--
			return
		}
	}
}

// next scans the next token and returns its type; html.ErrorToken means
// the end of the page.
func (l *lexer) next() html.TokenType {
	l.start = l.end
	l.data = span{l.end, l.end}
	if l.eof {
		l.tt = html.ErrorToken
		return l.tt
	}
	if l.rawTag != "" {
		if l.rawTag == "plaintext" {
			l.end = len(l.src)
			l.eof = true
			l.data.end = l.end
			l.textIsRaw = true
			l.rawTag = ""
		} else {
			l.readRawOrRCDATA()
		}
		if l.data.end > l.data.start {
			l.tt = html.TextToken
			l.convertNUL = true
			return l.tt
		}
	}
	l.textIsRaw = false
	l.convertNUL = false
	for {
		// Text runs to the next '<'; skip to it at once.
		i := bytes.IndexByte(l.src[l.end:], '<')
		if i < 0 {
			l.end = len(l.src)
			l.eof = true
			break
		}
		l.end += i + 1
		c := l.readByte()
		if l.eof {
			break
		}
		var tt html.TokenType
		switch {
		case isLetter(c):
			tt = html.StartTagToken
		case c == '/':
			tt = html.EndTagToken
		case c == '!' || c == '?':
			tt = html.CommentToken
		default:
			l.end-- // reconsume
			continue
		}
		// Text before the tag is a token of its own.
		if x := l.end - len("<a"); l.start < x {
			l.end = x
			l.data.end = x
			l.tt = html.TextToken
			return l.tt
		}
		switch tt {
		case html.StartTagToken:
			l.tt = l.readStartTag()
			return l.tt
		case html.EndTagToken:
			c = l.readByte()
			if l.eof {
				break
			}
			if c == '>' {
				// "</>" is an empty comment.
				l.tt = html.CommentToken
				return l.tt
			}
			if isLetter(c) {
				l.readTag(false)
				if l.eof {
					l.tt = html.ErrorToken
				} else {
					l.tt = html.EndTagToken
				}
				return l.tt
			}
			l.end--
			l.readUntilCloseAngle()
			l.tt = html.CommentToken
			return l.tt
		default:
			if c == '!' {
				l.tt = l.readMarkupDeclaration()
				return l.tt
			}
			l.end--
			l.readUntilCloseAngle()
			l.tt = html.CommentToken
			return l.tt
		}
		break // end of page right after "</"
	}
	if l.start < l.end {
		l.data.end = l.end
		l.tt = html.TextToken
		return l.tt
	}
	l.tt = html.ErrorToken
	return l.tt
}

// readRawOrRCDATA reads until the end tag of the pending raw element.
func (l *lexer) readRawOrRCDATA() {
	if l.rawTag == "script" {
		l.readScript()
		l.textIsRaw = true
		l.rawTag = ""
		return
	}
	for {
		i := bytes.IndexByte(l.src[l.end:], '<')
		if i < 0 {
			l.end = len(l.src)
			l.eof = true
			break
		}
		l.end += i + 1
		c := l.readByte()
		if l.eof {
			break
		}
		if c != '/' {
			l.end--
			continue
		}
		if l.readRawEndTag() || l.eof {
			break
		}
	}
	l.data.end = l.end
	// A textarea's or title's RCDATA can hold character references.
	l.textIsRaw = l.rawTag != "textarea" && l.rawTag != "title"
	l.rawTag = ""
}

// readRawEndTag reads "</rawTag" plus a delimiter after the "</" already
// read; on a match it backs up to reconsume the tag and reports true.
func (l *lexer) readRawEndTag() bool {
	for i := 0; i < len(l.rawTag); i++ {
		c := l.readByte()
		if l.eof {
			return false
		}
		if c != l.rawTag[i] && c != l.rawTag[i]-('a'-'A') {
			l.end--
			return false
		}
	}
	c := l.readByte()
	if l.eof {
		return false
	}
	switch c {
	case ' ', '\n', '\r', '\t', '\f', '/', '>':
		l.end -= 3 + len(l.rawTag)
		return true
	}
	l.end--
	return false
}

// readScript reads a script's text up to its end tag, following the
// escaping rules of the HTML standard's script data states.
func (l *lexer) readScript() {
	defer func() { l.data.end = l.end }()
	var c byte

scriptData:
	if i := bytes.IndexByte(l.src[l.end:], '<'); i >= 0 {
		l.end += i + 1
		goto scriptDataLessThanSign
	}
	l.end = len(l.src)
	l.eof = true
	return

scriptDataLessThanSign:
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case '/':
		goto scriptDataEndTagOpen
	case '!':
		goto scriptDataEscapeStart
	}
	l.end--
	goto scriptData

scriptDataEndTagOpen:
	if l.readRawEndTag() || l.eof {
		return
	}
	goto scriptData

scriptDataEscapeStart:
	c = l.readByte()
	if l.eof {
		return
	}
	if c == '-' {
		goto scriptDataEscapeStartDash
	}
	l.end--
	goto scriptData

scriptDataEscapeStartDash:
	c = l.readByte()
	if l.eof {
		return
	}
	if c == '-' {
		goto scriptDataEscapedDashDash
	}
	l.end--
	goto scriptData

scriptDataEscaped:
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case '-':
		goto scriptDataEscapedDash
	case '<':
		goto scriptDataEscapedLessThanSign
	}
	goto scriptDataEscaped

scriptDataEscapedDash:
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case '-':
		goto scriptDataEscapedDashDash
	case '<':
		goto scriptDataEscapedLessThanSign
	}
	goto scriptDataEscaped

scriptDataEscapedDashDash:
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case '-':
		goto scriptDataEscapedDashDash
	case '<':
		goto scriptDataEscapedLessThanSign
	case '>':
		goto scriptData
	}
	goto scriptDataEscaped

scriptDataEscapedLessThanSign:
	c = l.readByte()
	if l.eof {
		return
	}
	if c == '/' {
		goto scriptDataEscapedEndTagOpen
	}
	if isLetter(c) {
		goto scriptDataDoubleEscapeStart
	}
	l.end--
	goto scriptData

scriptDataEscapedEndTagOpen:
	if l.readRawEndTag() || l.eof {
		return
	}
	goto scriptDataEscaped

scriptDataDoubleEscapeStart:
	l.end--
	for i := 0; i < len("script"); i++ {
		c = l.readByte()
		if l.eof {
			return
		}
		if c != "script"[i] && c != "SCRIPT"[i] {
			l.end--
			goto scriptDataEscaped
		}
	}
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case ' ', '\n', '\r', '\t', '\f', '/', '>':
		goto scriptDataDoubleEscaped
	}
	l.end--
	goto scriptDataEscaped

scriptDataDoubleEscaped:
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case '-':
		goto scriptDataDoubleEscapedDash
	case '<':
		goto scriptDataDoubleEscapedLessThanSign
	}
	goto scriptDataDoubleEscaped

scriptDataDoubleEscapedDash:
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case '-':
		goto scriptDataDoubleEscapedDashDash
	case '<':
		goto scriptDataDoubleEscapedLessThanSign
	}
	goto scriptDataDoubleEscaped

scriptDataDoubleEscapedDashDash:
	c = l.readByte()
	if l.eof {
		return
	}
	switch c {
	case '-':
		goto scriptDataDoubleEscapedDashDash
	case '<':
		goto scriptDataDoubleEscapedLessThanSign
	case '>':
		goto scriptData
	}
	goto scriptDataDoubleEscaped

scriptDataDoubleEscapedLessThanSign:
	c = l.readByte()
	if l.eof {
		return
	}
	if c == '/' {
		goto scriptDataDoubleEscapeEnd
	}
	l.end--
	goto scriptDataDoubleEscaped

scriptDataDoubleEscapeEnd:
	if l.readRawEndTag() {
		l.end += len("</script>")
		goto scriptDataEscaped
	}
	if l.eof {
		return
	}
	goto scriptDataDoubleEscaped
}

// readComment reads a comment after its "<!--".
func (l *lexer) readComment() {
	l.data.start = l.end
	defer func() {
		if l.data.end < l.data.start {
			l.data.end = l.data.start // "<!-->"
		}
	}()
	dashCount := 0
	beginning := true
	for {
		c := l.readByte()
		if l.eof {
			l.data.end = l.abruptCommentDataEnd()
			return
		}
		switch c {
		case '-':
			dashCount++
			continue
		case '>':
			if dashCount >= 2 || beginning {
				l.data.end = l.end - len("-->")
				return
			}
		case '!':
			if dashCount >= 2 {
				c = l.readByte()
				if l.eof {
					l.data.end = l.abruptCommentDataEnd()
					return
				} else if c == '>' {
					l.data.end = l.end - len("--!>")
					return
				} else if c == '-' {
					dashCount = 1
					beginning = false
					continue
				}
			}
		}
		dashCount = 0
		beginning = false
	}
}

func (l *lexer) abruptCommentDataEnd() int {
	raw := l.src[l.start:l.end]
	if len(raw) >= len("<!--") {
		raw = raw[len("<!--"):]
		switch {
		case bytes.HasSuffix(raw, []byte("--!")):
			return l.end - 3
		case bytes.HasSuffix(raw, []byte("--")):
			return l.end - 2
		case bytes.HasSuffix(raw, []byte("-")):
			return l.end - 1
		}
	}
	return l.end
}

// readUntilCloseAngle reads a bogus comment up to the next '>'.
func (l *lexer) readUntilCloseAngle() {
	l.data.start = l.end
	i := bytes.IndexByte(l.src[l.end:], '>')
	if i < 0 {
		l.end = len(l.src)
		l.eof = true
		l.data.end = l.end
		return
	}
	l.end += i + 1
	l.data.end = l.end - len(">")
}

// readMarkupDeclaration reads a token after "<!": a comment, a doctype or a
// bogus comment (CDATA included).
func (l *lexer) readMarkupDeclaration() html.TokenType {
	l.data.start = l.end
	var c [2]byte
	for i := range 2 {
		c[i] = l.readByte()
		if l.eof {
			l.data.end = l.end
			if i == 1 && c[0] == '>' {
				l.data.end--
			}
			return html.CommentToken
		}
	}
	if c[0] == '-' && c[1] == '-' {
		l.readComment()
		return html.CommentToken
	}
	l.end -= 2
	if l.readDoctype() {
		return html.DoctypeToken
	}
	l.readUntilCloseAngle()
	return html.CommentToken
}

func (l *lexer) readDoctype() bool {
	const s = "DOCTYPE"
	for i := 0; i < len(s); i++ {
		c := l.readByte()
		if l.eof {
			// Back up; the end is reported again on the next read.
			l.end = l.data.start
			l.eof = false
			return false
		}
		if c != s[i] && c != s[i]+('a'-'A') {
			l.end = l.data.start
			return false
		}
	}
	if l.skipWhiteSpace(); l.eof {
		l.data.start = l.end
		l.data.end = l.end
		return true
	}
	l.readUntilCloseAngle()
	return true
}

// readStartTag reads a start tag after its "<a" and notes whether raw text
// follows it.
func (l *lexer) readStartTag() html.TokenType {
	l.readTag(true)
	if l.eof {
		return html.ErrorToken
	}
	l.rawTag = rawTextElement(l.src[l.data.start:l.data.end])
	// Self-closing unless the '/' ends the last kept attribute's value.
	n := len(l.attrs)
	if l.src[l.end-2] == '/' && (n == 0 || l.end-2 != l.attrs[n-1][1].end-1) {
		return html.SelfClosingTagToken
	}
	return html.StartTagToken
}

// rawTextElement returns the lower-case name of an element whose content
// the tokenizer reads as raw text, or "".
func rawTextElement(name []byte) string {
	if len(name) < 3 || len(name) > 9 {
		return ""
	}
	for _, s := range [...]string{"iframe", "noembed", "noframes", "noscript", "plaintext", "script", "style", "textarea", "title", "xmp"} {
		if len(s) == len(name) && asciiEqualFold(name, s) {
			return s
		}
	}
	return ""
}

// asciiEqualFold reports whether b equals the lower-case s, ignoring the
// case of ASCII letters in b.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// readTag reads a tag's name and attributes after its "<a" or "</a",
// keeping the first maxTagAttrs attributes of a start tag.
func (l *lexer) readTag(keep bool) {
	l.attrs = l.attrs[:0]
	l.readTagName()
	if l.skipWhiteSpace(); l.eof {
		return
	}
	for {
		c := l.readByte()
		if l.eof || c == '>' {
			break
		}
		l.end--
		l.readTagAttrKey()
		l.readTagAttrVal()
		if keep && l.pending[0].start != l.pending[0].end && len(l.attrs) < maxTagAttrs {
			l.attrs = append(l.attrs, l.pending)
		}
		if l.skipWhiteSpace(); l.eof {
			break
		}
	}
}

func (l *lexer) readTagName() {
	l.data.start = l.end - 1
	for {
		c := l.readByte()
		if l.eof {
			l.data.end = l.end
			return
		}
		switch c {
		case ' ', '\n', '\r', '\t', '\f':
			l.data.end = l.end - 1
			return
		case '/', '>':
			l.end--
			l.data.end = l.end
			return
		}
	}
}

func (l *lexer) readTagAttrKey() {
	l.pending[0].start = l.end
	for {
		c := l.readByte()
		if l.eof {
			l.pending[0].end = l.end
			return
		}
		switch c {
		case '=':
			if l.pending[0].start+1 == l.end {
				continue // "=" first is part of the name
			}
			fallthrough
		case ' ', '\n', '\r', '\t', '\f', '/', '>':
			l.end--
			l.pending[0].end = l.end
			return
		}
	}
}

func (l *lexer) readTagAttrVal() {
	l.pending[1].start = l.end
	l.pending[1].end = l.end
	if l.skipWhiteSpace(); l.eof {
		return
	}
	c := l.readByte()
	if l.eof {
		return
	}
	if c == '/' {
		return // self-closing start tag state
	}
	if c != '=' {
		l.end--
		return
	}
	if l.skipWhiteSpace(); l.eof {
		return
	}
	quote := l.readByte()
	if l.eof {
		return
	}
	switch quote {
	case '>':
		l.end--
		return
	case '\'', '"':
		l.pending[1].start = l.end
		i := bytes.IndexByte(l.src[l.end:], quote)
		if i < 0 {
			l.end = len(l.src)
			l.eof = true
			l.pending[1].end = l.end
			return
		}
		l.end += i + 1
		l.pending[1].end = l.end - 1
	default:
		l.pending[1].start = l.end - 1
		for {
			c := l.readByte()
			if l.eof {
				l.pending[1].end = l.end
				return
			}
			switch c {
			case ' ', '\n', '\r', '\t', '\f':
				l.pending[1].end = l.end - 1
				return
			case '>':
				l.end--
				l.pending[1].end = l.end
				return
			}
		}
	}
}

// name returns the tag name's bytes as written.
func (l *lexer) name() []byte { return l.src[l.data.start:l.data.end] }

// attr returns the raw value of the first kept attribute named key (lower
// case) and whether there is one.
func (l *lexer) attr(key string) (span, bool) {
	for _, a := range l.attrs {
		if asciiEqualFold(l.src[a[0].start:a[0].end], key) {
			return a[1], true
		}
	}
	return span{}, false
}

// text returns the text of a text token as the Tokenizer's Text does:
// newlines normalised, NUL replaced in raw text, character references
// decoded unless raw. It allocates only when it must change the bytes.
func (l *lexer) text() []byte {
	s := l.src[l.data.start:l.data.end]
	if bytes.IndexByte(s, '\r') >= 0 {
		s = convertNewlines(bytes.Clone(s))
	}
	if l.convertNUL && bytes.IndexByte(s, 0) >= 0 {
		s = bytes.ReplaceAll(s, []byte{0}, []byte("\uFFFD"))
	}
	if !l.textIsRaw && bytes.IndexByte(s, '&') >= 0 {
		s = []byte(html.UnescapeString(string(s)))
	}
	return s
}

// convertNewlines turns "\r\n" and "\r" into "\n" in place.
func convertNewlines(s []byte) []byte {
	j := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' {
			c = '\n'
			if i+1 < len(s) && s[i+1] == '\n' {
				i++
			}
		}
		s[j] = c
		j++
	}
	return s[:j]
}

// attrValue decodes a raw attribute value as the Tokenizer's TagAttr
// does: newlines normalised, NUL replaced, character references decoded by
// the attribute rules.
func attrValue(raw []byte) string {
	s := string(raw)
	if strings.IndexByte(s, '\r') >= 0 {
		s = string(convertNewlines([]byte(s)))
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return unescapeAttr(s)
}

// unescapeAttr decodes character references in an attribute value. It
// differs from html.UnescapeString, which follows the rules for text, in
// two ways: a named reference without ';' followed by '=' stays as it is
// ("?a=1&copy=2"), and a name is decoded only whole, never by a prefix
// ("&notit" stays; in text it is "¬it").
func unescapeAttr(s string) string {
	i := strings.IndexByte(s, '&')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		b.WriteString(s[:i])
		s = s[i:]
		n := refLen(s)
		ref := s[:n]
		switch {
		case n == 1:
			b.WriteByte('&')
		case ref[1] == '#':
			b.WriteString(html.UnescapeString(ref))
		case ref[n-1] == ';':
			// Decoded only whole: the text rules' prefix fallback keeps
			// the ';' ("&notx;" → "¬x;"), and no whole reference but
			// "&semi;" decodes to text ending in ';'.
			if dec := html.UnescapeString(ref); !strings.HasSuffix(dec, ";") || ref == "&semi;" {
				b.WriteString(dec)
			} else {
				b.WriteString(ref)
			}
		case n < len(s) && s[n] == '=' || !legacyEntities[ref[1:]]:
			b.WriteString(ref)
		default:
			b.WriteString(html.UnescapeString(ref))
		}
		s = s[n:]
		i = strings.IndexByte(s, '&')
	}
	b.WriteString(s)
	return b.String()
}

// refLen returns the length of the character reference at the start of s
// ("&" and what html.UnescapeString would consume at most): a numeric
// reference with its optional ';', or '&' plus letters and digits plus an
// optional ';'. It is 1 when no reference can start there.
func refLen(s string) int {
	i := 1
	if i < len(s) && s[i] == '#' {
		i++
		hex := i < len(s) && (s[i] == 'x' || s[i] == 'X')
		if hex {
			i++
		}
		j := i
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || hex && (s[j] >= 'a' && s[j] <= 'f' || s[j] >= 'A' && s[j] <= 'F')) {
			j++
		}
		if j == i {
			return 1
		}
		if j < len(s) && s[j] == ';' {
			j++
		}
		return j
	}
	for i < len(s) && (isLetter(s[i]) || s[i] >= '0' && s[i] <= '9') {
		i++
	}
	if i == 1 {
		return 1
	}
	if i < len(s) && s[i] == ';' {
		i++
	}
	return i
}

// legacyEntities are the named references valid without a ';' (the HTML
// standard's table; the same set as x/net/html's).
var legacyEntities = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range strings.Fields(`AElig AMP Aacute Acirc Agrave Aring Atilde Auml COPY Ccedil ETH
		Eacute Ecirc Egrave Euml GT Iacute Icirc Igrave Iuml LT Ntilde Oacute Ocirc Ograve Oslash Otilde
		Ouml QUOT REG THORN Uacute Ucirc Ugrave Uuml Yacute aacute acirc acute aelig agrave amp aring
		atilde auml brvbar ccedil cedil cent copy curren deg divide eacute ecirc egrave eth euml frac12
		frac14 frac34 gt iacute icirc iexcl igrave iquest iuml laquo lt macr micro middot nbsp not ntilde
		oacute ocirc ograve ordf ordm oslash otilde ouml para plusmn pound quot raquo reg sect shy sup1
		sup2 sup3 szlig thorn times uacute ucirc ugrave uml uuml yacute yen yuml`) {
		m[name] = true
	}
	return m
}()

// validUTF8 returns b, or a copy with invalid sequences replaced.
func validUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}
