package webpage

import "bytes"

// maxTagAttrs bounds the attributes of one tag that reach the tokenizer.
// The extraction reads six attributes (hidden, aria-hidden, style, type,
// href, alt; and encoding, color, face, size in foreign content) and takes
// the first of a name, so a real tag loses nothing it shows; a page that
// hides an element by a 65th attribute has it shown here, where a browser
// would hide it.
const maxTagAttrs = 64

// capAttrs returns page with every tag cut to at most maxTagAttrs
// attributes, and page itself, unchanged, when no tag has more.
//
// Why: golang.org/x/net/html's Tokenizer (v0.62) copies every attribute
// name of a tag twice and records it in a map to drop repeated names,
// whether or not the caller reads the attribute: one tag of 430k distinct
// attribute names, 2 MiB, costs it 115 MiB. Cut to 64 attributes, a tag
// costs it (and the extraction, which reads its attributes) about 16 bytes
// of allocation per attribute: 16 MiB for 2 MiB of tags of 64 one-byte
// names, the costliest markup per byte found (attr-64-per-tag in
// TestExtractPathological).
//
// What: a tag here is what the Tokenizer reads after "<" and an ASCII
// letter, or "</" and a letter: a name, then attributes, to a ">". An
// attribute starts at a byte that is not white space, "/" or ">" where the
// tag's name, an attribute's name or a value has ended (a lone "/" is no
// attribute); a quote opens a value only after "=" and optional white
// space, and "=" as the first byte of a name is part of it, as in HTML and
// the Tokenizer. When a tag reaches its 65th attribute, the bytes from that
// attribute up to the tag's ">" are dropped and the ">" is kept, so the tag
// still ends where it ended. Everything else passes byte for byte.
//
// The approximation: capAttrs does not know where the Tokenizer is (text,
// a comment, the raw text of a <script>, <style>, <title> or <textarea>,
// inside an attribute value), so it treats every "<" and letter as the
// start of a tag, wherever it is, and follows all of them at once (one per
// state of the attribute syntax, the larger count kept when two meet). A
// tag the Tokenizer reads therefore never has more than maxTagAttrs
// attributes, whatever came before it; and a "tag" the Tokenizer does not
// read — in a script, a comment, an attribute value — is cut too when it
// runs to a 65th attribute before its ">" (minified script does: "i<n"
// and then more than 64 spaces, slashes or closed quotes before a ">").
// That changes only content the extraction drops (scripts, styles,
// comments) or, in a pathological page, its title or an attribute value;
// and when the bytes dropped hold the end tag of a script or a title, the
// raw text runs on to the next one and hides the text between.
// Following one tag at a time would be simpler and wrong: a quote opened
// in a script's pseudo-tag, `<script><x y="</script><b a0 a1 … a400000>"`,
// would hide a real tag's attributes from the count.
//
// It reads each byte once, following at most nTagStates tags, and
// allocates only when it drops something: a copy of at most len(page).
func capAttrs(page []byte) []byte {
	var (
		out  []byte               // nil until something is dropped; then the kept bytes before from
		from int                  // page[from:i] is kept and not yet in out
		tags [nTagStates]followed // the tags followed, one per state
		nt   int                  // how many
	)
	for i := 0; i < len(page); {
		if nt == 0 {
			// Outside every tag only a tag's start matters.
			j := tagStart(page, i)
			if j < 0 {
				break
			}
			tags[0].s, tags[0].n, nt = inName, 0, 1
			i = j + 1
			continue
		}
		// Skip the bytes that change no tag followed (never a "<", nor
		// a letter right after "<" or "</").
		if p := page[i-1]; p != '<' && (p != '/' || page[i-2] != '<') {
			if nt == 1 {
				t := &stepTable[tags[0].s]
				for i < len(page) && t[page[i]]&quiet != 0 {
					i++
				}
			} else {
				for i < len(page) && quietFor(tags[:nt], page[i]) {
					i++
				}
			}
			if i == len(page) {
				break
			}
		}
		c := page[i]
		next, nn, over := tags, 0, false
		for _, t := range tags[:nt] {
			e := stepTable[t.s][c]
			switch {
			case e&ends != 0:
				continue
			case e&starts != 0 && t.n == maxTagAttrs:
				over = true
				continue
			case e&starts != 0:
				t.n++
			}
			nn = follow(&next, nn, tagState(e&stateMask), t.n)
		}
		if over {
			// Drop the attribute that is one too many and the rest of
			// its tag, up to the ">", which is kept. The tags that did
			// not overflow have not seen c.
			j := i + 1
			for s := inKey; j < len(page); j++ {
				e := stepTable[s][page[j]]
				if e&ends != 0 {
					break
				}
				s = tagState(e & stateMask)
			}
			if out == nil {
				out = make([]byte, 0, len(page))
			}
			out = append(out, page[from:i]...)
			from, i = j, j
			k := 0
			for _, t := range tags[:nt] {
				if e := stepTable[t.s][c]; e&starts == 0 || t.n < maxTagAttrs {
					tags[k] = t
					k++
				}
			}
			nt = k
			continue
		}
		if isLetter(c) && (page[i-1] == '<' || page[i-1] == '/' && i > 1 && page[i-2] == '<') {
			nn = follow(&next, nn, inName, 0)
		}
		tags, nt = next, nn
		i++
	}
	if out == nil {
		return page
	}
	return append(out, page[from:]...)
}

// followed is a tag capAttrs follows: its state and its attributes so far.
type followed struct {
	s tagState
	n int32
}

// follow adds a tag in state s with n attributes to the first nt of tags
// and returns their new number; two tags in one state read alike from
// there on, so only the larger count is kept.
func follow(tags *[nTagStates]followed, nt int, s tagState, n int32) int {
	for k := range tags[:nt] {
		if tags[k].s == s {
			tags[k].n = max(tags[k].n, n)
			return nt
		}
	}
	tags[nt].s, tags[nt].n = s, n
	return nt + 1
}

// tagStart returns the index of the first letter at or after i that starts
// a tag ("<a" or "</a"), or -1.
func tagStart(page []byte, i int) int {
	for {
		j := bytes.IndexByte(page[i:], '<')
		if j < 0 {
			return -1
		}
		i += j + 1
		if i < len(page) && page[i] == '/' {
			i++
		}
		if i < len(page) && isLetter(page[i]) {
			return i
		}
	}
}

// tagState is where a tag is in the attribute syntax of HTML.
type tagState uint8

const (
	inName      tagState = iota // the tag's name
	beforeAttr                  // after the name, a value or a "/"
	inKey                       // an attribute's name
	afterKey                    // white space after a name: "=" may follow
	beforeValue                 // after "=" and white space
	inSingle                    // a '…' value
	inDouble                    // a "…" value
	inUnquoted                  // an unquoted value
	nTagStates
)

// step reads c in state s: the next state, whether c starts an attribute
// (one with a name, the only kind the Tokenizer keeps or copies) and
// whether c is the ">" that ends the tag.
func (s tagState) step(c byte) (next tagState, starts, ends bool) {
	space := isTagSpace(c)
	switch s {
	case inName:
		switch {
		case space, c == '/':
			return beforeAttr, false, false
		case c == '>':
			return s, false, true
		}
		return s, false, false
	case beforeAttr, afterKey:
		switch {
		case space:
			return s, false, false
		case c == '>':
			return s, false, true
		case c == '/':
			// "/" alone is an attribute without a name.
			return beforeAttr, false, false
		case c == '=' && s == afterKey:
			return beforeValue, false, false
		}
		// Anything else, "=" and quotes included, begins a name.
		return inKey, true, false
	case inKey:
		switch {
		case space:
			return afterKey, false, false
		case c == '/':
			return beforeAttr, false, false
		case c == '=':
			return beforeValue, false, false
		case c == '>':
			return s, false, true
		}
		return s, false, false
	case beforeValue:
		switch {
		case space:
			return s, false, false
		case c == '>':
			return s, false, true
		case c == '\'':
			return inSingle, false, false
		case c == '"':
			return inDouble, false, false
		}
		return inUnquoted, false, false
	case inSingle, inDouble:
		if c == "'\""[s-inSingle] {
			return beforeAttr, false, false
		}
		return s, false, false
	}
	// inUnquoted
	switch {
	case space:
		return beforeAttr, false, false
	case c == '>':
		return s, false, true
	}
	return s, false, false
}

// stepTable is step as a table: stepTable[s][c] is the next state, with
// the flags below.
var stepTable = func() (t [nTagStates][256]uint8) {
	for s := range nTagStates {
		for c := range 256 {
			next, st, end := s.step(byte(c))
			e := uint8(next)
			switch {
			case st:
				e |= starts
			case end:
				e |= ends
			case next == s && c != '<':
				e |= quiet // skipped: changes nothing, starts no tag
			}
			t[s][c] = e
		}
	}
	return t
}()

const (
	stateMask = 1<<3 - 1
	starts    = 1 << 3
	ends      = 1 << 4
	quiet     = 1 << 5
)

// quietFor reports a byte that changes none of tags.
func quietFor(tags []followed, c byte) bool {
	for _, t := range tags {
		if stepTable[t.s][c]&quiet == 0 {
			return false
		}
	}
	return true
}

func isTagSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f'
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
