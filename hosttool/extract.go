package hosttool

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/safefetch"
)

// Bounds of extracted text.
const (
	// MaxExtractBytes bounds the text Extract returns, footnotes and the
	// cut marker included.
	MaxExtractBytes = 64 << 10
	// MaxParseBytes bounds the HTML handed to the parser. html.Parse builds
	// the whole tree: 32 MiB of markup took 10 s and 1 GB of heap, for at
	// most 64 KiB of text out. Pages are cut here before parsing; what
	// follows would be cut from the text anyway on any real page.
	MaxParseBytes = 2 << 20
	// MaxLinks bounds the numbered footnotes of one page; further links
	// keep their text but get no number.
	MaxLinks = 200
	// maxLinkURL drops absurdly long link targets from the footnotes.
	maxLinkURL = 2000
)

// ErrContentType marks a response whose media type is not HTML, plain text
// or JSON. Its text is fixed and content-free.
var ErrContentType error = &classError{"the page is not HTML, plain text or JSON", rtsandbox.ErrRefused}

// Extract turns an already bounded fetch result into readable text: HTML is
// reduced to its visible text with links as numbered footnotes; text/plain
// and JSON pass through (as UTF-8, control characters removed); any other
// media type is ErrContentType. A missing Content-Type is sniffed. The
// result starts with the final URL (and the page title, when there is one)
// and is at most maxBytes long (MaxExtractBytes when maxBytes < 1), ending
// in a marker when it was cut. It never fetches anything.
func Extract(res *safefetch.Result, maxBytes int) (string, error) {
	if maxBytes < 1 {
		maxBytes = MaxExtractBytes
	}
	ct := res.Header.Get("Content-Type")
	if strings.TrimSpace(ct) == "" {
		ct = http.DetectContentType(res.Body)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		// A malformed header is judged by its media type alone.
		mt = strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	}
	body := toUTF8(res.Body, mt, params["charset"])
	var head, text string
	var links []string
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		var title string
		title, text, links = ExtractHTML(body, res.URL)
		head = "URL: " + res.URL + "\n"
		if title != "" {
			head += "Title: " + title + "\n"
		}
	case mt == "text/plain" || mt == "text/markdown" || isJSON(mt):
		head = "URL: " + res.URL + "\n"
		text = cleanText(string(body))
	default:
		return "", ErrContentType
	}
	var b strings.Builder
	b.WriteString(head)
	b.WriteString("\n")
	b.WriteString(text)
	if len(links) > 0 {
		b.WriteString("\n\nLinks:\n")
		for i, l := range links {
			fmt.Fprintf(&b, "[%d] %s\n", i+1, l)
		}
	}
	return Cut(strings.TrimRight(b.String(), "\n"), maxBytes), nil
}

func isJSON(mt string) bool {
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// toUTF8 decodes body from its declared or sniffed charset; invalid
// sequences become U+FFFD. An unknown charset is read as UTF-8.
func toUTF8(body []byte, mt, cs string) []byte {
	if cs == "" && utf8.Valid(body) {
		return body
	}
	r, err := charset.NewReader(bytes.NewReader(body), mime.FormatMediaType(mt, map[string]string{"charset": cs}))
	if err == nil {
		if out, err := io.ReadAll(r); err == nil {
			body = out
		}
	}
	return bytes.ToValidUTF8(body, []byte("\uFFFD"))
}

// cutMarker is appended to text that Cut shortened.
const cutMarker = "\n\n[cut at %d bytes]"

// Cut returns s when it is at most max bytes, or else its longest prefix
// that ends on a rune boundary and leaves room for the marker
// "[cut at <max> bytes]", followed by that marker.
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf(cutMarker, max)
	n := max - len(marker)
	if n < 0 {
		n = 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + marker
}

// cleanText removes control characters other than tab and newline, and
// CRs, from passed-through text.
func cleanText(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return '\n'
		case unicode.IsControl(r) || r == '\uFEFF':
			return -1
		}
		return r
	}, strings.TrimSpace(s))
}

// skipped elements never contribute text.
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Template: true, atom.Noscript: true,
	atom.Head: true, atom.Iframe: true, atom.Object: true, atom.Embed: true,
	atom.Svg: true, atom.Math: true, atom.Canvas: true, atom.Select: true,
	atom.Textarea: true, atom.Input: true, atom.Button: true, atom.Audio: true,
	atom.Video: true, atom.Map: true, atom.Dialog: true,
}

// blocks end a line before and after them.
var blocks = map[atom.Atom]bool{
	atom.Address: true, atom.Article: true, atom.Aside: true, atom.Blockquote: true,
	atom.Body: true, atom.Center: true, atom.Dd: true, atom.Details: true, atom.Div: true,
	atom.Dl: true, atom.Dt: true, atom.Fieldset: true, atom.Figcaption: true,
	atom.Figure: true, atom.Footer: true, atom.Form: true, atom.Header: true,
	atom.Hgroup: true, atom.Li: true, atom.Main: true, atom.Nav: true, atom.Ol: true,
	atom.Section: true, atom.Summary: true, atom.Table: true, atom.Tbody: true,
	atom.Thead: true, atom.Tfoot: true, atom.Tr: true, atom.Ul: true, atom.Caption: true,
}

// paragraphs are blocks set off by a blank line.
var paragraphs = map[atom.Atom]bool{
	atom.P: true, atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true,
	atom.H5: true, atom.H6: true, atom.Pre: true, atom.Blockquote: true,
	atom.Table: true, atom.Ul: true, atom.Ol: true, atom.Dl: true, atom.Figure: true,
}

// ExtractHTML returns the title, the visible text and the footnoted links
// of an HTML document. base resolves relative links (the final URL of the
// fetch; <base> is ignored). Scripts, styles, templates, noscript, forms'
// controls, embedded media and hidden content (the hidden attribute,
// aria-hidden="true", inline display:none or visibility:hidden,
// type=hidden) are dropped. Block elements become line breaks, paragraphs
// and headings blank lines, list items "- " lines, table cells " | "
// separated; text of a link to an http(s) URL is followed by " [n]",
// where n is its 1-based index in links. The text is bounded by
// MaxExtractBytes (plus a little), so a huge page costs no more than that
// much output.
func ExtractHTML(body []byte, base string) (title, text string, links []string) {
	if len(body) > MaxParseBytes {
		body = body[:MaxParseBytes]
	}
	// The parser passes invalid UTF-8 through; the model gets valid text.
	body = bytes.ToValidUTF8(body, []byte("\uFFFD"))
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		return "", "", nil // html.Parse fails only on reader errors
	}
	w := &textWriter{limit: MaxExtractBytes + 1}
	w.base, _ = url.Parse(base)
	w.index = map[string]int{}
	w.walk(doc)
	return cleanLine(w.title), w.b.String(), w.links
}

// textWriter collects text with collapsed whitespace and pending breaks.
type textWriter struct {
	b      strings.Builder
	limit  int
	space  bool // a space is pending
	breaks int  // newlines pending (0, 1 or 2)
	pre    int  // depth inside <pre>
	title  string
	base   *url.URL
	links  []string
	index  map[string]int
}

func (w *textWriter) full() bool { return w.b.Len() >= w.limit }

// brk asks for n line breaks before the next text.
func (w *textWriter) brk(n int) {
	if n > w.breaks {
		w.breaks = n
	}
	w.space = false
}

// emit writes one run of text that contains no whitespace to collapse.
func (w *textWriter) emit(s string) {
	if s == "" || w.full() {
		return
	}
	if w.b.Len() > 0 {
		switch {
		case w.breaks > 0:
			w.b.WriteString(strings.Repeat("\n", w.breaks))
		case w.space:
			w.b.WriteByte(' ')
		}
	}
	w.breaks, w.space = 0, false
	w.b.WriteString(s)
}

// text writes a text node, collapsing whitespace outside <pre>.
func (w *textWriter) text(s string) {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == '\r':
			return '\n'
		case unicode.IsControl(r) || r == '\uFEFF' || r == '\u00AD':
			return -1
		}
		return r
	}, s)
	if w.pre > 0 {
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			if i > 0 {
				w.brk(1)
				if l == "" && i < len(lines)-1 {
					w.brk(2)
				}
			}
			w.emit(strings.TrimRightFunc(l, unicode.IsSpace))
		}
		return
	}
	if s != "" && isSpace(s[0]) {
		w.space = true
	}
	fields := strings.FieldsFunc(s, unicode.IsSpace)
	for i, f := range fields {
		if i > 0 {
			w.space = true
		}
		w.emit(f)
	}
	if s != "" && isSpace(s[len(s)-1]) {
		w.space = true
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' }

func (w *textWriter) walk(n *html.Node) {
	if w.full() {
		return
	}
	switch n.Type {
	case html.TextNode:
		w.text(n.Data)
		return
	case html.ElementNode:
	case html.DocumentNode:
		w.children(n)
		return
	default: // comments, doctypes
		return
	}
	if n.DataAtom == atom.Title && w.title == "" {
		w.title = textContent(n)
		return
	}
	if n.DataAtom == atom.Head {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.ElementNode && c.DataAtom == atom.Title && w.title == "" {
				w.title = textContent(c)
			}
		}
		return
	}
	if skipped[n.DataAtom] || hidden(n) {
		return
	}
	switch n.DataAtom {
	case atom.Br:
		w.brk(1)
		return
	case atom.Hr:
		w.brk(2)
		return
	case atom.Img:
		if alt := cleanLine(attr(n, "alt")); alt != "" {
			w.emit("[image: " + alt + "]")
		}
		return
	case atom.A:
		w.children(n)
		if ref := w.link(attr(n, "href")); ref > 0 {
			w.space = true
			w.emit("[" + strconv.Itoa(ref) + "]")
		}
		return
	case atom.Td, atom.Th:
		if prevElement(n) && w.b.Len() > 0 && w.breaks == 0 {
			w.emit("|")
			w.space = true
		}
		w.children(n)
		w.space = true
		return
	}
	para := paragraphs[n.DataAtom]
	switch {
	case para:
		w.brk(2)
	case blocks[n.DataAtom]:
		w.brk(1)
	}
	switch n.DataAtom {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		w.emit(strings.Repeat("#", int(n.Data[1]-'0')))
		w.space = true
	case atom.Li:
		w.emit("-")
		w.space = true
	case atom.Pre:
		w.pre++
		defer func() { w.pre-- }()
	}
	w.children(n)
	switch {
	case para:
		w.brk(2)
	case blocks[n.DataAtom]:
		w.brk(1)
	}
}

func (w *textWriter) children(n *html.Node) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c)
	}
}

// link resolves href and returns its footnote number, or 0 when it gets
// none (not http(s), a same-page fragment, too long, or over MaxLinks).
func (w *textWriter) link(href string) int {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") || w.base == nil {
		return 0
	}
	u, err := w.base.Parse(href)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0
	}
	u.User = nil // never repeat credentials a page embeds in links
	u.Fragment, u.RawFragment = "", ""
	s := u.String()
	if len(s) > maxLinkURL || hasControl(s) {
		return 0
	}
	if i, ok := w.index[s]; ok {
		return i
	}
	if len(w.links) >= MaxLinks {
		return 0
	}
	w.links = append(w.links, s)
	w.index[s] = len(w.links)
	return len(w.links)
}

// prevElement reports whether n has an element sibling before it.
func prevElement(n *html.Node) bool {
	for c := n.PrevSibling; c != nil; c = c.PrevSibling {
		if c.Type == html.ElementNode {
			return true
		}
	}
	return false
}

func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

// hidden reports content the page does not show.
func hidden(n *html.Node) bool {
	for _, a := range n.Attr {
		switch strings.ToLower(a.Key) {
		case "hidden":
			return true
		case "aria-hidden":
			if strings.EqualFold(strings.TrimSpace(a.Val), "true") {
				return true
			}
		case "type":
			if n.DataAtom == atom.Input && strings.EqualFold(a.Val, "hidden") {
				return true
			}
		case "style":
			s := strings.ToLower(strings.Join(strings.Fields(a.Val), ""))
			if strings.Contains(s, "display:none") || strings.Contains(s, "visibility:hidden") {
				return true
			}
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && strings.EqualFold(a.Key, key) {
			return a.Val
		}
	}
	return ""
}

// textContent is the raw text below n, bounded.
func textContent(n *html.Node) string {
	var b strings.Builder
	var rec func(*html.Node)
	rec = func(n *html.Node) {
		for c := n.FirstChild; c != nil && b.Len() < 1024; c = c.NextSibling {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
			rec(c)
		}
	}
	rec(n)
	return b.String()
}

// cleanLine collapses s to one line of at most 300 bytes.
func cleanLine(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if len(s) > 300 {
		n := 300
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	return s
}
