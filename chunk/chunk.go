// Package chunk splits a reply into chat messages (docs/host.md, "Routing rules"): at
// most ChunkLimit UTF-16 units each, at paragraph and code-fence
// boundaries, and at most MaxChunks of them, the rest cut with
// rtsandbox.ReplyCutNotice. It is a leaf: standard library and the root
// package only, so the router and background jobs (delegate) share it.
package chunk

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
)

// ChunkLimit is Discord's message limit, in UTF-16 code units.
const ChunkLimit = 2000

// MaxChunks bounds the messages one reply is posted in: at most
// MaxChunks × ChunkLimit = 40,000 units, over twice a model answer of the
// default 4,096 output tokens (about 16,000 characters) and twenty screens
// of chat. A reply may hold up to rtsandbox.MaxReplyText (100,000) units,
// which would take 50 or more messages and hold a Discord channel for
// about a minute under its rate limit; the rest is cut with
// rtsandbox.ReplyCutNotice instead. The bound is
// fixed rather than proportional to the reply's length: greedy merging
// legitimately posts up to about twice length/limit chunks (two pieces
// of just over half the limit cannot share a message), so a proportional
// bound would cut ordinary replies; the fence rule of Chunk removes the
// amplification at its source.
const MaxChunks = 20

// maxReopen bounds an opening fence line that is repeated at the top of
// every piece of a split code block: a language tag and a short info
// string fit. A longer line (the amplification finding: a 1,990-unit
// opening line left each piece room for two characters, and a 6,000-unit
// reply became 2,000 messages) opens only the first piece.
const maxReopen = 64

// minChunkLimit leaves room for a re-fenced piece with a body.
const minChunkLimit = 16

// Chunk splits a reply into at most MaxChunks messages of at most limit
// UTF-16 units at paragraph and code-fence boundaries (docs/host.md, "Routing rules"):
//
//  1. CRLF becomes LF. The text is parsed into blocks: paragraphs separated
//     by whitespace-only lines, and fenced code blocks (an opening line that
//     starts, after optional whitespace, with ``` or ~~~) that run to a line
//     whose trimmed text equals the opening's first three trimmed characters,
//     or to the end. Whitespace-only blocks are dropped.
//  2. A block within the limit stays whole. A larger plain block is packed
//     line by line (joined by "\n"); a line over the limit is hard-split by
//     code point. A larger fenced block has its body lines packed into pieces
//     of limit − (opening line + 2 + marker) units, each re-wrapped in the
//     opening line and the closing marker (an unclosed fence is closed in
//     every piece).
//  3. Pieces are merged greedily, joined by "\n\n", while the result fits.
//  4. Blank input yields no chunks.
//
// limit < 1 means ChunkLimit; smaller limits are raised to 16.
//
// Deviations from the reference, which has no bound on the number of
// messages:
//
//   - The opening line of a split code block is repeated in every piece
//     only when it is at most 64 units and a quarter of the limit. A
//     longer one opens the first piece only; the other pieces open with
//     the bare marker (``` or ~~~), so every piece is still a complete
//     code block and each has room for limit − 8 units of the body.
//     When the opening line leaves no room for a body even in the first
//     piece, every piece opens with the bare marker and the opening line
//     becomes the first body line, so nothing is lost.
//   - What does not fit in MaxChunks messages is cut: the last message
//     keeps as much of the text as fits before ReplyCutNotice, which ends
//     it as a paragraph of its own (an open code block is closed first).
//     The messages before it are unchanged. At limits below about 70
//     units, which no chat network has, the last message is the notice
//     alone, shortened to the limit if need be.
//
// A hard-split piece that would begin like a fence gets a closing fence
// line. Invalid UTF-8 becomes U+FFFD.
func Chunk(text string, limit int) []string {
	out, _ := Bounded(text, limit, MaxChunks)
	return out
}

// Bounded is Chunk with the bound on the number of messages as a parameter
// (maxChunks < 1: no bound); cut reports that text did not fit.
func Bounded(text string, limit, maxChunks int) (chunks []string, cut bool) {
	if limit < 1 {
		limit = ChunkLimit
	}
	limit = max(limit, minChunkLimit)
	// Chat networks take valid UTF-8 only; a split inside a broken
	// sequence could also join two halves into a character nobody sent.
	text = strings.ToValidUTF8(text, "\uFFFD")
	var pieces []string
	for _, b := range parseBlocks(strings.ReplaceAll(text, "\r\n", "\n")) {
		pieces = append(pieces, b.split(limit)...)
	}
	out := merge(pieces, limit)
	if maxChunks < 1 || len(out) <= maxChunks {
		return out, false
	}
	return cutChunks(out, limit, maxChunks), true
}

// cutChunks keeps the first n−1 chunks and ends the nth with as much of
// its text as fits before ReplyCutNotice.
func cutChunks(chunks []string, limit, n int) []string {
	out := slices.Clone(chunks[:n-1])
	notice := rtsandbox.ReplyCutNotice
	room := limit - 2 - rtsandbox.UTF16Len(notice)
	// Room to close a code block left open (at most "\n" and a marker).
	const closing = 4
	if room-closing < minChunkLimit {
		return append(out, headUnits(notice, limit))
	}
	last := chunks[n-1]
	if rtsandbox.UTF16Len(last) > room {
		sub, _ := Bounded(last, room-closing, 0)
		last = sub[0] // last is not blank, so neither is its split
	}
	if bs := parseBlocks(last); len(bs) > 0 {
		if b := bs[len(bs)-1]; b.marker != "" && !b.closed {
			last += "\n" + b.marker
		}
	}
	return append(out, last+"\n\n"+notice)
}

// headUnits returns the longest prefix of s of at most n UTF-16 units,
// never cutting a surrogate pair.
func headUnits(s string, n int) string {
	units := 0
	for i, r := range s {
		units += utf16.RuneLen(r)
		if units > n {
			return s[:i]
		}
	}
	return s
}

// block is a paragraph or a fenced code block, as lines.
type block struct {
	lines  []string
	marker string // "```" or "~~~" for a fenced block; "" for a paragraph
	closed bool   // a fenced block's last line is its closing marker
}

func (b block) text() string { return strings.Join(b.lines, "\n") }

func parseBlocks(text string) []block {
	var (
		blocks []block
		para   []string
	)
	flush := func() {
		if len(para) > 0 {
			blocks = append(blocks, block{lines: para})
			para = nil
		}
	}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if marker, ok := fenceMarker(line); ok {
			flush()
			b := block{lines: []string{line}, marker: marker}
			for i+1 < len(lines) {
				i++
				b.lines = append(b.lines, lines[i])
				if jsTrim(lines[i]) == marker {
					b.closed = true
					break
				}
			}
			blocks = append(blocks, b)
			continue
		}
		if jsTrim(line) == "" {
			flush()
			continue
		}
		para = append(para, line)
	}
	flush()
	return blocks
}

// fenceMarker reports whether line opens a fence and returns its marker,
// the first three characters of the trimmed line.
func fenceMarker(line string) (string, bool) {
	t := strings.TrimLeftFunc(line, jsSpace)
	switch {
	case strings.HasPrefix(t, "```"):
		return "```", true
	case strings.HasPrefix(t, "~~~"):
		return "~~~", true
	}
	return "", false
}

// jsSpace is JavaScript's whitespace (String.prototype.trim, \s): Go's
// unicode.IsSpace plus U+FEFF, minus U+0085.
func jsSpace(r rune) bool {
	return r == '\uFEFF' || r != '\u0085' && unicode.IsSpace(r)
}

func jsTrim(s string) string { return strings.TrimFunc(s, jsSpace) }

func (b block) split(limit int) []string {
	text := b.text()
	if jsTrim(text) == "" {
		return nil
	}
	if rtsandbox.UTF16Len(text) <= limit {
		return []string{text}
	}
	if b.marker == "" {
		return packLines(b.lines, fixedRoom(limit), true, "")
	}
	open := b.lines[0]
	body := b.lines[1:]
	if b.closed {
		body = body[:len(body)-1]
	}
	// Every piece is reopen (or the bare marker), a body part and the
	// closing marker.
	bare := limit - (len(b.marker) + 2 + len(b.marker))
	openLen := rtsandbox.UTF16Len(open)
	first := limit - (openLen + 2 + len(b.marker))
	rest, reopen := first, open
	if openLen > min(maxReopen, limit/4) {
		rest, reopen = bare, b.marker // a long opening line opens the first piece only
	}
	if first < 2 {
		// The opening line leaves no room for any character (one may take
		// two UTF-16 units): open with the bare marker and keep the
		// opening line as body text (see Chunk).
		open, body = b.marker, append([]string{open}, body...)
		first, rest, reopen = bare, bare, b.marker
	}
	room := func(i int) int {
		if i == 0 {
			return first
		}
		return rest
	}
	var out []string
	// Inside a code block the wrapper's own fences enclose every piece; a
	// hard-split piece must only never be the bare marker, which would
	// close the block early.
	for i, p := range packLines(body, room, false, b.marker) {
		if i == 0 {
			out = append(out, open+"\n"+p+"\n"+b.marker)
		} else {
			out = append(out, reopen+"\n"+p+"\n"+b.marker)
		}
	}
	if len(out) == 0 { // a fence with an empty body that is still too long
		out = append(out, open+"\n"+b.marker)
	}
	return out
}

// fixedRoom is the same room for every piece.
func fixedRoom(limit int) func(int) int { return func(int) int { return limit } }

// packLines joins lines with "\n" into pieces of at most room(i) units
// for the piece of index i; a line longer than its piece's room is
// hard-split.
func packLines(lines []string, room func(i int) int, closeFences bool, avoid string) []string {
	var (
		out []string
		cur strings.Builder
		n   int // UTF-16 length of cur; -1 when cur is empty
	)
	n = -1
	flush := func() {
		if n >= 0 {
			out = append(out, cur.String())
			cur.Reset()
			n = -1
		}
	}
	for _, line := range lines {
		l := rtsandbox.UTF16Len(line)
		if n >= 0 && n+1+l > room(len(out)) {
			flush()
		}
		if l > room(len(out)) {
			done := len(out)
			out = append(out, hardSplit(line, func(i int) int { return room(done + i) }, closeFences, avoid)...)
			continue
		}
		if n >= 0 {
			cur.WriteByte('\n')
			n++
		} else {
			n = 0
		}
		cur.WriteString(line)
		n += l
	}
	flush()
	return out
}

// hardSplit cuts s into pieces of at most room(i) UTF-16 units for the
// piece of index i, walking code points so a surrogate pair is never cut.
func hardSplit(s string, room func(i int) int, closeFences bool, avoid string) []string {
	var out []string
	start, n := 0, 0
	fix := func(p string) string { return p }
	fits := func() int { return room(len(out)) }
	if closeFences {
		fix = closeFence
		fits = func() int { return pieceRoom(s[start:], room(len(out))) }
	}
	limit := fits()
	for i, r := range s {
		w := utf16.RuneLen(r) // 1 for U+FFFD from an invalid byte, as UTF16Len
		if n+w > limit && n > 0 {
			cut := avoidMarker(s, start, i, avoid)
			out = append(out, fix(s[start:cut]))
			start, n = cut, rtsandbox.UTF16Len(s[cut:i])
			limit = fits()
		}
		n += w
	}
	if start < len(s) {
		out = append(out, fix(s[start:]))
	}
	return out
}

// avoidMarker moves a cut at i back, a character at a time, while the
// piece before it or everything after it would be the bare fence marker
// (blanks around it included): inside a code block such a line closes the
// block. The piece never becomes empty.
func avoidMarker(s string, start, i int, avoid string) int {
	if avoid == "" {
		return i
	}
	cut := i
	for jsTrim(s[start:cut]) == avoid || jsTrim(s[cut:]) == avoid {
		_, size := utf8.DecodeLastRuneInString(s[start:cut])
		if cut-size <= start {
			return i
		}
		cut -= size
	}
	return cut
}

// pieceRoom is how much of a hard-split line fits in one piece. A piece
// that would begin with "```" or "~~~" (text from the middle of the line)
// would open a code block in its own message, so it keeps room for the
// closing fence closeFence adds.
func pieceRoom(rest string, limit int) int {
	if m, ok := fenceMarker(rest); ok {
		return limit - 1 - len(m)
	}
	return limit
}

// closeFence closes a piece that begins like a fence, so every message's
// fences are balanced.
func closeFence(piece string) string {
	if m, ok := fenceMarker(piece); ok {
		return piece + "\n" + m
	}
	return piece
}

// merge joins consecutive pieces with a blank line while they fit. A
// whitespace-only piece (the tail of a hard-split line) is dropped: chat
// networks refuse blank messages.
func merge(pieces []string, limit int) []string {
	var out []string
	cur, n := "", -1
	for _, p := range pieces {
		if jsTrim(p) == "" {
			continue
		}
		l := rtsandbox.UTF16Len(p)
		if n >= 0 && n+2+l <= limit {
			cur += "\n\n" + p
			n += 2 + l
			continue
		}
		if n >= 0 {
			out = append(out, cur)
		}
		cur, n = p, l
	}
	if n >= 0 {
		out = append(out, cur)
	}
	return out
}
