package webpage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"runtime/debug"
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

// Bounds of extraction. A page is guest-chosen input: whatever its markup,
// Extract of a page up to MaxParseBytes stays within 64 MiB of allocation
// and well under a second of CPU (see TestExtractPathological and
// docs/benchmarks.md), and stops when its context ends.
const (
	// MaxExtractBytes bounds the text Extract returns, footnotes and the
	// cut marker included.
	MaxExtractBytes = 64 << 10
	// MaxParseBytes bounds the bytes of a page that are read at all: the
	// body is cut here before its charset is decoded, and the decoded text
	// again. What follows would be cut from the text anyway on any real
	// page.
	MaxParseBytes = 2 << 20
	// MaxLinks bounds the numbered footnotes of one page; further links
	// keep their text but get no number unless their URL has one.
	MaxLinks = 200
	// maxResolved bounds the hrefs of one page that are resolved (each
	// costs a URL parse); past it only an href identical to one already
	// numbered gets its number.
	maxResolved = 4096
	// maxLinkURL drops absurdly long link targets from the footnotes.
	maxLinkURL = 2000
	// maxHrefBytes: a longer href is neither kept nor resolved; a link
	// worth a footnote is far shorter.
	maxHrefBytes = 8 * maxLinkURL
	// maxDepth bounds the stack of open elements. A deeper element still
	// has its text extracted but is not tracked: a hidden one hides the
	// rest of the deepest tracked element instead.
	maxDepth = 256
	// checkEvery is how many tokens pass between two looks at the context.
	checkEvery = 256
	// maxTitleBytes bounds the title and an image's alt text read before
	// they are cleaned to one line.
	maxTitleBytes = 1024
)

// ErrContentType marks a response whose media type is not HTML, plain text
// or JSON. Its text is fixed and content-free.
var ErrContentType error = &classError{"the page is not HTML, plain text or JSON", rtsandbox.ErrRefused}

// ErrFetchInternal marks a fetch or an extraction that failed inside the
// host: a panic, contained by Contain. The cause, a *PanicError, is for the
// operator log only.
var ErrFetchInternal error = &classError{"the page could not be read", rtsandbox.ErrUpstream}

// PanicError is a panic that Contain recovered: its value and the stack of
// the panicking goroutine, for the operator log. It is never shown.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Contain runs fn and returns its result; a panic in fn becomes a
// *FetchError of class ErrFetchInternal whose cause is a *PanicError. It
// keeps a bug or an unforeseen input in page handling from taking the host
// down. It cannot contain what is not a panic (running out of memory is
// fatal), which is why extraction is bounded.
func Contain(fn func() (string, error)) (text string, err error) {
	defer func() {
		if v := recover(); v != nil {
			text, err = "", &FetchError{Class: ErrFetchInternal, Cause: &PanicError{Value: v, Stack: debug.Stack()}}
		}
	}()
	return fn()
}

// Extract turns an already bounded fetch result into readable text: HTML is
// reduced to its visible text with links as numbered footnotes; text/plain
// and JSON pass through (as UTF-8, control characters removed); any other
// media type is ErrContentType. A missing Content-Type is sniffed. Only the
// first MaxParseBytes of the body are read. The result starts with the
// final URL (and the page title, when there is one) and is at most maxBytes
// long (MaxExtractBytes when maxBytes < 1), ending in a marker when it was
// cut. It never fetches anything. When ctx ends first the error is a
// *FetchError of class ErrFetchNetwork; a panic inside is contained (see
// Contain).
func Extract(ctx context.Context, res *safefetch.Result, maxBytes int) (string, error) {
	return Contain(func() (string, error) { return extract(ctx, res, maxBytes) })
}

func extract(ctx context.Context, res *safefetch.Result, maxBytes int) (string, error) {
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
	body := res.Body
	if len(body) > MaxParseBytes {
		body = body[:MaxParseBytes]
	}
	var head, text string
	var links []string
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		var title string
		title, text, links, err = ExtractHTML(ctx, toUTF8(body, mt, params["charset"]), res.URL)
		if err != nil {
			return "", &FetchError{Class: ErrFetchNetwork, Cause: err}
		}
		head = "URL: " + res.URL + "\n"
		if title != "" {
			head += "Title: " + title + "\n"
		}
	case mt == "text/plain" || mt == "text/markdown" || isJSON(mt):
		head = "URL: " + res.URL + "\n"
		text = cleanText(string(toUTF8(body, mt, params["charset"])))
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

// toUTF8 decodes body from its declared or sniffed charset, at most
// MaxParseBytes of output; invalid sequences become U+FFFD. An unknown
// charset is read as UTF-8.
func toUTF8(body []byte, mt, cs string) []byte {
	if (cs == "" || strings.EqualFold(cs, "utf-8") || strings.EqualFold(cs, "utf8")) && utf8.Valid(body) {
		return body
	}
	r, err := charset.NewReader(bytes.NewReader(body), mime.FormatMediaType(mt, map[string]string{"charset": cs}))
	if err == nil {
		if out, err := io.ReadAll(io.LimitReader(r, MaxParseBytes)); err == nil {
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

// kind is what an element is to the extraction: a set of the categories
// below, looked up once per tag.
type kind uint16

const (
	// kSkipped elements never contribute text.
	kSkipped kind = 1 << iota
	// kBlock elements end a line before and after them.
	kBlock
	// kPara elements are blocks set off by a blank line.
	kPara
	// kVoid elements have no content and no end tag.
	kVoid
	// kInHead elements do not end an open <head>.
	kInHead
	// kClosesP elements close an open <p> (the HTML standard's "close a p
	// element" on their start tag).
	kClosesP
	// kFormatting elements: an end tag closes the element alone.
	kFormatting
	// kSpecial elements (the HTML standard's category): an end tag of
	// another name does not close them.
	kSpecial
	// kScope elements bound the search for an open element (the HTML
	// standard's "has an element in scope").
	kScope
	// kTableScope elements bound the search for an open table part.
	kTableScope
	// kBreakout elements end foreign content (<svg>, <math>) when they
	// start in it.
	kBreakout
)

// kinds holds the kind of every atom that has one.
var kinds = func() *atomTable[kind] {
	m := &atomTable[kind]{}
	add := func(k kind, as ...atom.Atom) {
		for _, a := range as {
			*m.slot(a) |= k
		}
	}
	add(kSkipped, atom.Script, atom.Style, atom.Template, atom.Noscript, atom.Head,
		atom.Iframe, atom.Object, atom.Embed, atom.Svg, atom.Math, atom.Canvas, atom.Select,
		atom.Textarea, atom.Input, atom.Button, atom.Audio, atom.Video, atom.Map, atom.Dialog,
		atom.Noembed, atom.Noframes)
	add(kBlock, atom.Address, atom.Article, atom.Aside, atom.Blockquote, atom.Body,
		atom.Center, atom.Dd, atom.Details, atom.Div, atom.Dl, atom.Dt, atom.Fieldset,
		atom.Figcaption, atom.Figure, atom.Footer, atom.Form, atom.Header, atom.Hgroup, atom.Li,
		atom.Main, atom.Nav, atom.Ol, atom.Section, atom.Summary, atom.Table, atom.Tbody,
		atom.Thead, atom.Tfoot, atom.Tr, atom.Ul, atom.Caption)
	add(kPara, atom.P, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6,
		atom.Pre, atom.Blockquote, atom.Table, atom.Ul, atom.Ol, atom.Dl, atom.Figure)
	add(kVoid, atom.Area, atom.Base, atom.Br, atom.Col, atom.Embed, atom.Hr, atom.Img,
		atom.Input, atom.Keygen, atom.Link, atom.Meta, atom.Param, atom.Source, atom.Track,
		atom.Wbr, atom.Basefont, atom.Bgsound, atom.Frame)
	add(kInHead, atom.Html, atom.Head, atom.Title, atom.Meta, atom.Link, atom.Base,
		atom.Basefont, atom.Bgsound, atom.Style, atom.Script, atom.Noscript, atom.Template)
	add(kClosesP, atom.Address, atom.Article, atom.Aside, atom.Blockquote, atom.Center,
		atom.Details, atom.Dialog, atom.Dir, atom.Div, atom.Dl, atom.Fieldset, atom.Figcaption,
		atom.Figure, atom.Footer, atom.Header, atom.Hgroup, atom.Main, atom.Menu, atom.Nav,
		atom.Ol, atom.P, atom.Search, atom.Section, atom.Summary, atom.Ul, atom.H1, atom.H2,
		atom.H3, atom.H4, atom.H5, atom.H6, atom.Pre, atom.Listing, atom.Form, atom.Table,
		atom.Hr, atom.Xmp, atom.Plaintext, atom.Li, atom.Dd, atom.Dt)
	add(kFormatting, atom.A, atom.B, atom.Big, atom.Code, atom.Em, atom.Font, atom.I,
		atom.Nobr, atom.S, atom.Small, atom.Strike, atom.Strong, atom.Tt, atom.U)
	add(kSpecial, atom.Address, atom.Applet, atom.Area, atom.Article, atom.Aside,
		atom.Base, atom.Basefont, atom.Bgsound, atom.Blockquote, atom.Body, atom.Br,
		atom.Button, atom.Caption, atom.Center, atom.Col, atom.Colgroup, atom.Dd, atom.Details,
		atom.Dir, atom.Div, atom.Dl, atom.Dt, atom.Embed, atom.Fieldset, atom.Figcaption,
		atom.Figure, atom.Footer, atom.Form, atom.Frame, atom.Frameset, atom.H1, atom.H2,
		atom.H3, atom.H4, atom.H5, atom.H6, atom.Head, atom.Header, atom.Hgroup, atom.Hr,
		atom.Html, atom.Iframe, atom.Img, atom.Input, atom.Keygen, atom.Li, atom.Link,
		atom.Listing, atom.Main, atom.Marquee, atom.Menu, atom.Meta, atom.Nav, atom.Noembed,
		atom.Noframes, atom.Noscript, atom.Object, atom.Ol, atom.P, atom.Param, atom.Plaintext,
		atom.Pre, atom.Script, atom.Search, atom.Section, atom.Select, atom.Source, atom.Style,
		atom.Summary, atom.Table, atom.Tbody, atom.Td, atom.Template, atom.Textarea,
		atom.Tfoot, atom.Th, atom.Thead, atom.Title, atom.Tr, atom.Track, atom.Ul, atom.Wbr,
		atom.Xmp)
	add(kScope, atom.Applet, atom.Caption, atom.Html, atom.Table, atom.Td, atom.Th,
		atom.Marquee, atom.Object, atom.Template)
	add(kTableScope, atom.Html, atom.Table, atom.Template)
	add(kBreakout, atom.B, atom.Big, atom.Blockquote, atom.Body, atom.Br, atom.Center,
		atom.Code, atom.Dd, atom.Div, atom.Dl, atom.Dt, atom.Em, atom.Embed, atom.H1, atom.H2,
		atom.H3, atom.H4, atom.H5, atom.H6, atom.Head, atom.Hr, atom.I, atom.Img, atom.Li,
		atom.Listing, atom.Menu, atom.Meta, atom.Nobr, atom.Ol, atom.P, atom.Pre, atom.Ruby,
		atom.S, atom.Small, atom.Span, atom.Strong, atom.Strike, atom.Sub, atom.Sup,
		atom.Table, atom.Tt, atom.U, atom.Ul, atom.Var)
	return m
}()

// atomTable maps atoms to values without a map's hashing: open addressing
// over 1024 slots, for the 369 atoms x/net knows. A value is created zero
// on first use and never removed.
type atomTable[V any] struct {
	keys [1024]atom.Atom
	vals [1024]V
}

// slot returns the value of a, creating it zero; a must not be 0.
func (t *atomTable[V]) slot(a atom.Atom) *V {
	for i := (uint32(a) * 0x9E3779B1) >> 22; ; i = (i + 1) & 1023 {
		switch t.keys[i] {
		case a:
			return &t.vals[i]
		case 0:
			t.keys[i] = a
			return &t.vals[i]
		}
	}
}

// get returns the value of a, zero when it has none.
func (t *atomTable[V]) get(a atom.Atom) V {
	for i := (uint32(a) * 0x9E3779B1) >> 22; ; i = (i + 1) & 1023 {
		switch t.keys[i] {
		case a:
			return t.vals[i]
		case 0:
			var zero V
			return zero
		}
	}
}

// ExtractHTML returns the title, the visible text and the footnoted links
// of an HTML document. base resolves relative links (the final URL of the
// fetch; <base> is ignored). Scripts, styles, templates, noscript, forms'
// controls, embedded media and hidden content (the hidden attribute,
// aria-hidden="true", inline display:none or visibility:hidden,
// type=hidden) are dropped. Block elements become line breaks, paragraphs
// and headings blank lines, list items "- " lines, table cells " | "
// separated; text of a link to an http(s) URL is followed by " [n]",
// where n is its 1-based index in links. Only the first MaxParseBytes are
// read, and the text stops at MaxExtractBytes (plus at most a few bytes).
// The error is ctx's when it ended first.
//
// The page is read as a stream of tokens from x/net's html.Tokenizer, never
// built into a tree. A tree builder (html.Parse) follows the HTML standard,
// which re-opens every formatting element (<b>, <a>, <font>…) left open
// across a closed block in each new block, a full copy of its attributes
// each time: a page of 43 KB — one <b> with a thousand attributes, then
// thousands of <p> — took 482 MB and 2.2 s, 88 KB took 1.9 GB, 180 KB ran
// the host out of memory; and html.Parse takes no context. The stream
// keeps only a stack of the open elements that matter for what is shown
// (hidden, skipped, <pre>, links, table cells), at most maxDepth deep,
// closes the elements the standard closes implicitly (a <p> before a
// block, an <li> before the next, table cells and rows), never re-opens
// anything, and looks at ctx every checkEvery tokens. Before the Tokenizer
// sees the page, capAttrs cuts every tag to maxTagAttrs attributes: the
// Tokenizer allocates for every attribute of a tag, read or not, and 2 MiB
// of attributes in one tag cost it over 100 MiB. A page whose tags have at
// most maxTagAttrs attributes is tokenized as it is. Every token then
// costs time and memory bounded by its own length, so a whole page costs
// at most a small multiple of MaxParseBytes.
func ExtractHTML(ctx context.Context, body []byte, base string) (title, text string, links []string, err error) {
	if len(body) > MaxParseBytes {
		body = body[:MaxParseBytes]
	}
	// The text writer and the links want valid UTF-8.
	body = validUTF8(body)
	// No SetMaxBuf: the page is at most MaxParseBytes, the Tokenizer's
	// buffer holds at most twice its longest token, and a smaller limit
	// would end a real page at its first long inline script.
	z := html.NewTokenizer(bytes.NewReader(capAttrs(body)))
	e := &extractor{z: z, attrs: make([]attr, 0, maxTagAttrs)}
	for i := range e.root.stops {
		e.root.stops[i] = -1
	}
	e.w.limit = MaxExtractBytes + 1
	e.w.base, _ = url.Parse(base)
	if err := e.run(ctx); err != nil {
		return "", "", nil, err
	}
	return cleanLine(e.title), e.w.b.String(), e.w.links, nil
}

// elem is an open element on the extractor's stack.
type elem struct {
	atom atom.Atom
	kind kind
	// key matches end tags to it: the atom, or a hash of an unknown name
	// with the top bit set; foreignKey is added in foreign content.
	key uint64
	// hide: its text is dropped. hideBody: dropped by something other
	// than <head> (a <title> there is not the page's).
	hide, hideBody bool
	pre            bool // inside <pre>
	// ns is the element's namespace: HTML, or SVG or MathML (foreign
	// content, where "/>" closes and nothing is raw text).
	ns namespace
	// integration: a foreign element whose content is HTML (an SVG
	// <foreignObject>, a MathML <mi>…).
	integration bool
	kids        bool   // an element has started inside it
	link        bool   // an <a> with an href
	href        string // its value
	// dead: closed alone (a formatting element) while elements inside it
	// stay open; it keeps its slot until they close.
	dead bool
	// outer and inner link the open elements of the same key: the stack
	// indexes of the next one out and in, -1 for none.
	outer, inner int32
	// stops[s] is the index of the innermost element at or below this one
	// where a search of kind s stops, -1 for none.
	stops [nStops]int32
}

type namespace uint8

const (
	htmlNS namespace = iota
	svgNS
	mathNS
)

// extractor walks the tokens of a page. Every search for an open element
// is a map look-up and a comparison, never a walk of the stack: the
// stack's depth would otherwise multiply the cost of each tag.
type extractor struct {
	z *html.Tokenizer
	// attrs are the current start tag's attributes, as the Tokenizer
	// gives them (names lower case, values decoded, the first of a name),
	// at most maxTagAttrs.
	attrs    []attr
	w        textWriter
	stack    []elem
	root     elem      // the parent of the outermost elements
	inner    innermost // the innermost open element of each key
	title    string
	hasTitle bool
	headOpen bool
	body     bool   // body content has begun: a later <head> is ignored
	scratch  []byte // reused by styleHides
	// titleNext: the last token was a <title> start tag the Tokenizer
	// reads raw text after, so a text token next is the title.
	titleNext bool
}

// attr is an attribute of a start tag: its name and value.
type attr struct{ key, val []byte }

func (e *extractor) run(ctx context.Context) error {
	for n := 0; ; n++ {
		if n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if e.w.full() {
			return nil
		}
		inTitle := e.titleNext
		e.titleNext = false
		switch e.z.Next() {
		case html.ErrorToken:
			e.popTo(0)
			return nil
		case html.TextToken:
			e.textToken(inTitle)
		case html.StartTagToken:
			e.startTag(false)
		case html.SelfClosingTagToken:
			e.startTag(true)
		case html.EndTagToken:
			e.endTag()
		}
		// Comments and doctypes show nothing.
	}
}

// top returns the innermost open element, or a zero root.
func (e *extractor) top() *elem {
	if len(e.stack) == 0 {
		return &e.root
	}
	return &e.stack[len(e.stack)-1]
}

func (e *extractor) textToken(inTitle bool) {
	t := e.top()
	if inTitle {
		if !e.hasTitle && !t.hideBody {
			s := e.z.Text()
			e.hasTitle = true
			e.title = string(s[:runeCut(s, maxTitleBytes)])
		}
		return
	}
	if e.headOpen && t.atom == atom.Head {
		if allSpace(e.z.Raw()) {
			return
		}
		e.closeHead() // text ends the head
		t = e.top()
	}
	if t.hide {
		return
	}
	s := e.z.Text()
	if !e.body && !allSpace(s) {
		e.body = true
	}
	e.w.text(s, t.pre)
}

func allSpace(s []byte) bool {
	for _, c := range s {
		if !isTagSpace(c) {
			return false
		}
	}
	return true
}

// runeCut returns the largest n ≤ max at a rune boundary of s.
func runeCut(s []byte, max int) int {
	if len(s) <= max {
		return len(s)
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return max
}

// lookupName returns the atom of a tag name, lower case as the Tokenizer
// gives it, and the key it is matched by.
func lookupName(name []byte) (atom.Atom, uint64) {
	if a := atom.Lookup(name); a != 0 {
		return a, uint64(a)
	}
	h := uint64(14695981039346656037) // FNV-1a
	for _, c := range name {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return 0, h | 1<<63
}

// readAttrs reads the current start tag's attributes into e.attrs; more is
// what TagName reported.
func (e *extractor) readAttrs(more bool) {
	e.attrs = e.attrs[:0]
	// capAttrs left at most maxTagAttrs; the bound holds regardless.
	for more && len(e.attrs) < maxTagAttrs {
		var k, v []byte
		k, v, more = e.z.TagAttr()
		e.attrs = append(e.attrs, attr{k, v})
	}
}

// attr returns the value of the start tag's attribute named key (lower
// case) and whether it has one.
func (e *extractor) attr(key string) ([]byte, bool) {
	for _, a := range e.attrs {
		if string(a.key) == key {
			return a.val, true
		}
	}
	return nil, false
}

func (e *extractor) startTag(selfClosing bool) {
	name, more := e.z.TagName()
	a, key := lookupName(name)
	e.readAttrs(more)
	// The Tokenizer reads a <title>'s content as raw text, unless
	// foreignStart says otherwise.
	e.titleNext = a == atom.Title
	k := kinds.get(a)
	if t := e.top(); t.ns != htmlNS && !t.integration {
		if k&kBreakout == 0 && !(a == atom.Font && e.fontBreaks()) {
			e.foreignStart(a, key, selfClosing)
			return
		}
		// A breakout element ends the foreign content.
		e.popTo(int(t.stops[foreignBreak]) + 1)
	}
	switch a {
	case atom.Html:
		return
	case atom.Head:
		if !e.body && !e.headOpen {
			e.headOpen = true
			e.push(elem{atom: a, kind: k, key: key, hide: true})
		}
		return
	case atom.Body:
		e.closeHead()
		e.body = true
		if !e.top().hide {
			e.w.brk(1)
		}
		return
	}
	if k&kInHead == 0 {
		e.closeHead()
		e.body = true
	}
	if a == atom.Select {
		// A <select> inside one closes it and is dropped.
		if i := e.find(inScope, kSelect); i >= 0 {
			e.popTo(i)
			return
		}
	}
	e.implyEnds(a, k)
	parent := e.top()
	siblings := parent.kids
	parent.kids = true
	own := k&kSkipped != 0 || e.hidden(a)
	hide := parent.hide || own
	if k&kVoid != 0 {
		if hide {
			return
		}
		switch a {
		case atom.Br:
			e.w.brk(1)
		case atom.Hr:
			e.w.brk(2)
		case atom.Img:
			if alt, ok := e.attr("alt"); ok {
				// At most maxTitleBytes are read; 300 are kept.
				if alt := cleanLine(string(alt[:runeCut(alt, maxTitleBytes)])); alt != "" {
					e.w.emit("[image: " + alt + "]")
				}
			}
		}
		return
	}
	el := elem{
		atom: a, kind: k, key: key, hide: hide,
		hideBody: parent.hideBody || own && a != atom.Head,
		pre:      parent.pre || a == atom.Pre,
	}
	switch a {
	case atom.Svg:
		el.ns = svgNS
	case atom.Math:
		el.ns = mathNS
	}
	if selfClosing && el.ns != htmlNS {
		return // "<svg/>" has no content
	}
	if !hide {
		switch {
		case k&kPara != 0:
			e.w.brk(2)
		case k&kBlock != 0:
			e.w.brk(1)
		}
		switch a {
		case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
			e.w.emit(strings.Repeat("#", int(a.String()[1]-'0')))
			e.w.space = true
		case atom.Li:
			e.w.emit("-")
			e.w.space = true
		case atom.Td, atom.Th:
			if siblings && e.w.b.Len() > 0 && e.w.breaks == 0 {
				e.w.emit("|")
				e.w.space = true
			}
		case atom.A:
			// Kept for the footnote at the end of the element: a copy,
			// the Tokenizer's bytes change with the next token. A longer
			// href cannot resolve to at most maxLinkURL bytes.
			if href, ok := e.attr("href"); ok && len(href) <= maxHrefBytes {
				el.href, el.link = string(href), true
			}
		}
	}
	e.push(el)
}

// fontBreaks reports a <font> that ends foreign content.
func (e *extractor) fontBreaks() bool {
	for _, key := range [...]string{"color", "face", "size"} {
		if _, ok := e.attr(key); ok {
			return true
		}
	}
	return false
}

// foreignStart opens an element in foreign content: in the namespace of
// its parent, never raw text (an SVG <title> holds elements), closed by
// "/>". Its text is hidden with its <svg> or <math>.
func (e *extractor) foreignStart(a atom.Atom, key uint64, selfClosing bool) {
	e.z.NextIsNotRawText()
	e.titleNext = false
	parent := e.top()
	parent.kids = true
	if selfClosing {
		return
	}
	el := elem{atom: a, key: key | foreignKey, ns: parent.ns, hide: parent.hide || e.hidden(a),
		hideBody: parent.hideBody, pre: parent.pre}
	if a == atom.Svg && parent.atom == atom.AnnotationXml {
		el.ns = svgNS
	}
	switch {
	case el.ns == svgNS && (a == atom.Foreignobject || a == atom.Desc || a == atom.Title),
		el.ns == mathNS && (a == atom.Mi || a == atom.Mo || a == atom.Mn || a == atom.Ms || a == atom.Mtext):
		el.integration = true
		el.kind = kScope
	case el.ns == mathNS && a == atom.AnnotationXml:
		el.kind = kScope
		if enc, ok := e.attr("encoding"); ok {
			el.integration = bytes.EqualFold(enc, []byte("text/html")) || bytes.EqualFold(enc, []byte("application/xhtml+xml"))
		}
	}
	e.push(el)
}

// push opens el; past maxDepth it is not tracked, and when it hides, the
// rest of the deepest tracked element is hidden instead.
func (e *extractor) push(el elem) {
	if len(e.stack) >= maxDepth {
		if el.hide {
			t := e.top()
			t.hide = true
			t.hideBody = t.hideBody || el.hideBody
		}
		return
	}
	i := int32(len(e.stack))
	parent := e.top()
	for s := range el.stops {
		if stop(s).at(&el) {
			el.stops[s] = i
		} else {
			el.stops[s] = parent.stops[s]
		}
	}
	el.outer, el.inner = -1, -1
	if o, ok := e.inner.get(el.key); ok {
		el.outer = o
		e.stack[o].inner = i
	}
	e.inner.set(el.key, i)
	e.stack = append(e.stack, el)
}

// unlink takes the element at index i out of the chain of its key.
func (e *extractor) unlink(i int32) {
	el := &e.stack[i]
	if el.inner >= 0 {
		e.stack[el.inner].outer = el.outer
	} else if el.outer >= 0 {
		e.inner.set(el.key, el.outer)
	} else {
		e.inner.del(el.key)
	}
	if el.outer >= 0 {
		e.stack[el.outer].inner = el.inner
	}
}

// popTo closes the open elements from the innermost down to index i.
func (e *extractor) popTo(i int) {
	for len(e.stack) > i {
		n := len(e.stack) - 1
		el := e.stack[n]
		if !el.dead {
			e.unlink(int32(n))
		}
		e.stack = e.stack[:n]
		if !el.dead {
			e.end(el)
		}
	}
	e.trim()
}

// remove closes the element at index i alone.
func (e *extractor) remove(i int) {
	e.unlink(int32(i))
	el := &e.stack[i]
	el.dead = true
	e.end(*el)
	e.trim()
}

// trim drops dead elements that are innermost, so the top is alive.
func (e *extractor) trim() {
	for len(e.stack) > 0 && e.stack[len(e.stack)-1].dead {
		e.stack = e.stack[:len(e.stack)-1]
	}
}

// end shows what follows an element.
func (e *extractor) end(el elem) {
	if el.atom == atom.Head {
		e.headOpen = false
	}
	if el.hide {
		return
	}
	switch {
	case el.link:
		if ref := e.w.link(el.href); ref > 0 {
			e.w.space = true
			e.w.emit("[" + strconv.Itoa(ref) + "]")
		}
	case el.atom == atom.Td || el.atom == atom.Th:
		e.w.space = true
	case el.kind&kPara != 0:
		e.w.brk(2)
	case el.kind&kBlock != 0:
		e.w.brk(1)
	}
}

func (e *extractor) closeHead() {
	if i, ok := e.inner.get(uint64(atom.Head)); ok {
		e.popTo(int(i))
	}
	e.headOpen = false
}

// stop says where the search for an open element ends.
type stop int

const (
	inScope       stop = iota // the HTML standard's "in scope"
	inButtonScope             // "in button scope"
	inListScope               // "in list item scope"
	inTableScope              // "in table scope"
	listItem                  // the <li>, <dd> and <dt> start tag steps
	notSpecial                // "any other end tag": at a special element
	foreignRoot               // at an HTML element
	foreignBreak              // at an HTML element or an integration point
	nStops
)

func (s stop) at(el *elem) bool {
	switch s {
	case inScope:
		return el.kind&kScope != 0
	case inButtonScope:
		return el.kind&kScope != 0 || el.atom == atom.Button
	case inListScope:
		return el.kind&kScope != 0 || el.atom == atom.Ol || el.atom == atom.Ul
	case inTableScope:
		return el.kind&kTableScope != 0
	case listItem:
		return el.kind&kSpecial != 0 && el.atom != atom.Address && el.atom != atom.Div && el.atom != atom.P
	case notSpecial:
		return el.kind&kSpecial != 0
	case foreignRoot:
		return el.ns == htmlNS
	}
	return el.ns == htmlNS || el.integration
}

// find returns the index of the innermost open element whose key is one of
// keys, searching outwards and giving up past the first element where s
// stops (that element itself may match); -1 when there is none.
func (e *extractor) find(s stop, keys ...uint64) int {
	limit := e.top().stops[s]
	found := int32(-1)
	for _, k := range keys {
		if i, ok := e.inner.get(k); ok && i >= limit && i > found {
			found = i
		}
	}
	return int(found)
}

// innermost maps keys to the stack index of the innermost open element of
// the key: atoms through a table, other keys through a map.
type innermost struct {
	atoms atomTable[int32] // index+1, 0 for none
	names map[uint64]int32
}

func (m *innermost) get(key uint64) (int32, bool) {
	if key < 1<<32 {
		i := m.atoms.get(atom.Atom(key))
		return i - 1, i > 0
	}
	i, ok := m.names[key]
	return i, ok
}

func (m *innermost) set(key uint64, i int32) {
	if key < 1<<32 {
		*m.atoms.slot(atom.Atom(key)) = i + 1
		return
	}
	if m.names == nil {
		m.names = map[uint64]int32{}
	}
	m.names[key] = i
}

func (m *innermost) del(key uint64) {
	if key < 1<<32 {
		*m.atoms.slot(atom.Atom(key)) = 0
		return
	}
	delete(m.names, key)
}

// closeTo closes the element at index i and everything inside it; -1
// closes nothing.
func (e *extractor) closeTo(i int) {
	if i >= 0 {
		e.popTo(i)
	}
}

const (
	kP, kLi, kDd, kDt = uint64(atom.P), uint64(atom.Li), uint64(atom.Dd), uint64(atom.Dt)
	kTd, kTh, kTr, kA = uint64(atom.Td), uint64(atom.Th), uint64(atom.Tr), uint64(atom.A)
	kH1, kH2, kH3     = uint64(atom.H1), uint64(atom.H2), uint64(atom.H3)
	kH4, kH5, kH6     = uint64(atom.H4), uint64(atom.H5), uint64(atom.H6)
	kSelect           = uint64(atom.Select)
	// foreignKey marks the key of an element in foreign content: HTML
	// rules never close it by name.
	foreignKey = 1 << 62
)

func (e *extractor) implyEnds(a atom.Atom, k kind) {
	switch a {
	case atom.Input, atom.Keygen, atom.Textarea, atom.Caption, atom.Table, atom.Tbody,
		atom.Tfoot, atom.Thead, atom.Tr, atom.Td, atom.Th:
		// They close an open <select>.
		e.closeTo(e.find(inScope, kSelect))
	}
	if k&kClosesP != 0 {
		e.closeTo(e.find(inButtonScope, kP))
	}
	switch a {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		switch e.top().atom {
		case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
			e.popTo(len(e.stack) - 1)
		}
	case atom.Li:
		e.closeTo(e.find(listItem, kLi))
	case atom.Dd, atom.Dt:
		e.closeTo(e.find(listItem, kDd, kDt))
	case atom.Td, atom.Th:
		e.closeTo(e.find(inTableScope, kTd, kTh))
	case atom.Tr:
		e.closeTo(e.find(inTableScope, kTr, kTd, kTh))
	case atom.Tbody, atom.Thead, atom.Tfoot:
		e.closeTo(e.find(inTableScope, uint64(atom.Tbody), uint64(atom.Thead), uint64(atom.Tfoot), kTr, kTd, kTh))
	case atom.A:
		// An <a> inside an open <a> closes it (the adoption agency, in
		// short).
		if i := e.find(inScope, kA); i >= 0 {
			e.remove(i)
		}
	}
}

func (e *extractor) endTag() {
	name, _ := e.z.TagName()
	a, key := lookupName(name)
	k := kinds.get(a)
	if t := e.top(); t.ns != htmlNS {
		// In foreign content the innermost foreign element of the name
		// closes; failing that, the HTML rules apply.
		if i, ok := e.inner.get(key | foreignKey); ok && i > t.stops[foreignRoot] {
			e.popTo(int(i))
			return
		}
	}
	switch a {
	case atom.Html, atom.Body:
		return // content after them still belongs to the body
	case atom.Head:
		e.closeHead()
		return
	case atom.Br:
		if !e.top().hide {
			e.w.brk(1) // "</br>" is a <br>
		}
		return
	case atom.P:
		if i := e.find(inButtonScope, kP); i >= 0 {
			e.popTo(i)
		} else if !e.top().hide {
			e.w.brk(2) // "</p>" alone is an empty paragraph
		}
		return
	case atom.Template:
		if i, ok := e.inner.get(key); ok {
			e.popTo(int(i))
		}
		return
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		// Any heading closes the open one.
		e.closeTo(e.find(inScope, kH1, kH2, kH3, kH4, kH5, kH6))
		return
	}
	switch {
	case a == atom.Li:
		e.closeTo(e.find(inListScope, key))
	case k&kTableScope != 0 || a == atom.Td || a == atom.Th || a == atom.Tr || a == atom.Tbody ||
		a == atom.Thead || a == atom.Tfoot || a == atom.Caption:
		e.closeTo(e.find(inTableScope, key))
	case k&kFormatting != 0:
		// The adoption agency, in short: the element alone closes.
		if i := e.find(inScope, key); i >= 0 {
			e.remove(i)
		}
	case k&(kSpecial|kClosesP) != 0:
		e.closeTo(e.find(inScope, key))
	default:
		e.closeTo(e.find(notSpecial, key))
	}
}

// hidden reports a start tag whose content the page does not show. The
// Tokenizer keeps the first attribute of a name, as the HTML standard does.
func (e *extractor) hidden(a atom.Atom) bool {
	for _, at := range e.attrs {
		switch string(at.key) {
		case "hidden":
			return true
		case "aria-hidden":
			if bytes.EqualFold(bytes.TrimSpace(at.val), []byte("true")) {
				return true
			}
		case "type":
			if a == atom.Input && bytes.EqualFold(at.val, []byte("hidden")) {
				return true
			}
		case "style":
			if e.styleHides(at.val) {
				return true
			}
		}
	}
	return false
}

// styleHides reports an inline style with display:none or
// visibility:hidden, white space and case ignored.
func (e *extractor) styleHides(val []byte) bool {
	s := e.scratch[:0]
	for _, c := range val {
		switch {
		case isTagSpace(c):
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		s = append(s, c)
	}
	e.scratch = s
	return bytes.Contains(s, []byte("display:none")) || bytes.Contains(s, []byte("visibility:hidden"))
}

// textWriter collects text with collapsed whitespace and pending breaks.
type textWriter struct {
	b         strings.Builder
	limit     int
	space     bool   // a space is pending
	breaks    int    // newlines pending (0, 1 or 2)
	pend      []byte // white space pending inside a <pre> line
	base      *url.URL
	links     []string
	index     map[string]int // footnote number by URL
	hrefIndex map[string]int // footnote number by href
	resolved  int            // hrefs resolved so far
}

func (w *textWriter) full() bool { return w.b.Len() >= w.limit }

// brk asks for n line breaks before the next text.
func (w *textWriter) brk(n int) {
	if n > w.breaks {
		w.breaks = n
	}
	w.space = false
}

// sep writes the pending break or space, if anything precedes.
func (w *textWriter) sep() {
	if w.b.Len() > 0 {
		switch {
		case w.breaks > 0:
			w.b.WriteString("\n\n"[:w.breaks])
		case w.space:
			w.b.WriteByte(' ')
		}
	}
	w.breaks, w.space = 0, false
}

// emit writes one run of text that contains no whitespace to collapse.
func (w *textWriter) emit(s string) {
	if s == "" || w.full() {
		return
	}
	w.sep()
	w.b.WriteString(s)
}

// dropped runes never reach the text.
func dropped(r rune) bool {
	return r != '\n' && r != '\t' && r != '\r' && unicode.IsControl(r) || r == '\uFEFF' || r == '\u00AD'
}

// text writes a text token, collapsing whitespace outside <pre>. It stops
// at the limit, so a long token costs no more than the limit.
func (w *textWriter) text(s []byte, pre bool) {
	if pre {
		w.preText(s)
		return
	}
	for i := 0; i < len(s); {
		r, n := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRune(s[i:])
		}
		i += n
		switch {
		case dropped(r):
		case unicode.IsSpace(r):
			w.space = true
		default:
			if w.full() {
				return
			}
			w.sep()
			w.b.WriteRune(r)
		}
	}
}

// preText writes text inside <pre>: lines kept, trailing white space of
// each line dropped, an empty line inside the token a blank line.
func (w *textWriter) preText(s []byte) {
	afterNewline, lineUsed := false, false
	for i := 0; i < len(s); {
		r, n := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRune(s[i:])
		}
		i += n
		switch {
		case r == '\n' || r == '\r':
			w.pend = w.pend[:0]
			if afterNewline && !lineUsed {
				w.brk(2)
			}
			w.brk(1)
			afterNewline, lineUsed = true, false
		case dropped(r):
		case unicode.IsSpace(r):
			lineUsed = true
			if len(w.pend) < w.limit {
				w.pend = utf8.AppendRune(w.pend, r)
			}
		default:
			lineUsed = true
			if w.full() {
				return
			}
			w.sep()
			w.b.Write(w.pend)
			w.pend = w.pend[:0]
			w.b.WriteRune(r)
		}
	}
	w.pend = w.pend[:0]
}

// link resolves an href and returns its footnote number, or 0 when it
// gets none (not http(s), a same-page fragment, too long, over MaxLinks
// and not numbered before, or past maxResolved).
func (w *textWriter) link(href string) int {
	if len(href) > maxHrefBytes || w.base == nil {
		return 0
	}
	if i, ok := w.hrefIndex[href]; ok {
		return i
	}
	if w.resolved >= maxResolved {
		return 0
	}
	w.resolved++
	i := w.resolve(href)
	if i > 0 {
		if w.hrefIndex == nil {
			w.hrefIndex = map[string]int{}
		}
		w.hrefIndex[href] = i
	}
	return i
}

func (w *textWriter) resolve(href string) int {
	href = strings.TrimSpace(href)
	if href == "" || strings.HasPrefix(href, "#") || otherScheme(href) {
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
	if w.index == nil {
		w.index = map[string]int{}
	}
	w.links = append(w.links, s)
	w.index[s] = len(w.links)
	return len(w.links)
}

// otherScheme reports an href with a scheme other than http(s)
// ("javascript:", "mailto:"), known without parsing it.
func otherScheme(href string) bool {
	for i := 0; i < len(href); i++ {
		c := href[i]
		switch {
		case isLetter(c):
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case c == ':' && i > 0:
			s := href[:i]
			return !strings.EqualFold(s, "http") && !strings.EqualFold(s, "https")
		default:
			return false
		}
	}
	return false
}

func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

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

// validUTF8 returns b, or a copy with invalid sequences replaced.
func validUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}
