package router

import (
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rtsandbox/rtsandbox"
)

// ChunkLimit is Discord's message limit, in UTF-16 code units.
const ChunkLimit = 2000

// minChunkLimit leaves room for a re-fenced piece with a body.
const minChunkLimit = 16

// Chunk splits a reply into messages of at most limit UTF-16 units at
// paragraph and code-fence boundaries (host spec §1.9):
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
// limit < 1 means ChunkLimit; smaller limits are raised to 16. One deviation from the reference, for a case
// it leaves undefined: when the opening fence line alone leaves no room for
// a body, the pieces open with the bare marker and the opening line becomes
// the first body line, so nothing is lost and every piece stays a complete
// code block. A hard-split piece that would begin like a fence gets a
// closing fence line. Invalid UTF-8 becomes U+FFFD.
func Chunk(text string, limit int) []string {
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
	return merge(pieces, limit)
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
		return packLines(b.lines, limit, true, "")
	}
	open := b.lines[0]
	body := b.lines[1:]
	if b.closed {
		body = body[:len(body)-1]
	}
	budget := limit - (rtsandbox.UTF16Len(open) + 2 + len(b.marker))
	if budget < 2 {
		// The opening line leaves no room for any character (one may take
		// two UTF-16 units): open with the bare marker and keep the
		// opening line as body text (see Chunk).
		open, body = b.marker, append([]string{open}, body...)
		budget = limit - (len(open) + 2 + len(b.marker))
	}
	var out []string
	// Inside a code block the wrapper's own fences enclose every piece; a
	// hard-split piece must only never be the bare marker, which would
	// close the block early.
	for _, p := range packLines(body, budget, false, b.marker) {
		out = append(out, open+"\n"+p+"\n"+b.marker)
	}
	if len(out) == 0 { // a fence with an empty body that is still too long
		out = append(out, open+"\n"+b.marker)
	}
	return out
}

// packLines joins lines with "\n" into pieces of at most limit units; a
// line longer than limit is hard-split.
func packLines(lines []string, limit int, closeFences bool, avoid string) []string {
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
		if l > limit {
			flush()
			out = append(out, hardSplit(line, limit, closeFences, avoid)...)
			continue
		}
		if n >= 0 && n+1+l > limit {
			flush()
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

// hardSplit cuts s into pieces of at most limit UTF-16 units, walking code
// points so a surrogate pair is never cut.
func hardSplit(s string, limit int, closeFences bool, avoid string) []string {
	var out []string
	start, n := 0, 0
	room, fix := limit, func(p string) string { return p }
	if closeFences {
		room, fix = pieceRoom(s, limit), closeFence
	}
	for i, r := range s {
		w := utf16.RuneLen(r) // 1 for U+FFFD from an invalid byte, as UTF16Len
		if n+w > room && n > 0 {
			cut := avoidMarker(s, start, i, avoid)
			out = append(out, fix(s[start:cut]))
			start, n = cut, rtsandbox.UTF16Len(s[cut:i])
			if closeFences {
				room = pieceRoom(s[start:], limit)
			}
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
