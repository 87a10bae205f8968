package chunk

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/rtsandbox/rtsandbox"
)

var (
	a9  = strings.Repeat("a", 9)
	b9  = strings.Repeat("b", 9)
	c9  = strings.Repeat("c", 9)
	emo = "\U0001F600" // two UTF-16 units
)

// chunkTests cover every rule of docs/host.md, "Routing rules". Small limits keep the
// cases readable; the rules do not depend on the limit.
var chunkTests = []struct {
	name  string
	in    string
	limit int
	want  []string
}{
	// rule 4: blank input
	{"empty-input-no-chunks", "", 2000, nil},
	{"whitespace-only-no-chunks", "  \n\t\n \r\n", 2000, nil},

	// rule 1: normalisation and paragraphs
	{"short-text-one-chunk", "Sealed.", 2000, []string{"Sealed."}},
	{"crlf-normalised", "a\r\nb\r\n\r\nc", 2000, []string{"a\nb\n\nc"}},
	{"lone-cr-kept", "a\rb", 2000, []string{"a\rb"}},
	{"paragraph-lines-kept", "a\nb", 2000, []string{"a\nb"}},
	{"whitespace-line-separates-paragraphs", "a\n \t\nb", 2000, []string{"a\n\nb"}},
	{"many-blank-lines-become-one", "a\n\n\n\nb", 2000, []string{"a\n\nb"}},
	{"leading-indentation-kept", "  a\n    b", 2000, []string{"  a\n    b"}},

	// rule 1: fenced blocks
	{"fence-keeps-blank-lines", "```\na\n\n\nb\n```", 2000, []string{"```\na\n\n\nb\n```"}},
	{"tilde-fence-keeps-blank-lines", "~~~\na\n\n\nb\n~~~", 2000, []string{"~~~\na\n\n\nb\n~~~"}},
	{"indented-fence-opens-and-closes", "  ```py\na\n\n\nb\n  ```  ", 2000, []string{"  ```py\na\n\n\nb\n  ```  "}},
	{"other-marker-does-not-close", "```\n~~~\n\n\nx\n```", 2000, []string{"```\n~~~\n\n\nx\n```"}},
	{"closing-needs-exact-trimmed-marker", "```\na\n```js\n\n\nb\n```", 2000, []string{"```\na\n```js\n\n\nb\n```"}},
	{"four-backticks-need-three-to-close", "````\na\n````\n\n\nb", 2000, []string{"````\na\n````\n\n\nb"}},
	{"fence-ends-paragraph-without-blank-line", "text\n```\nx\n```\nmore", 2000, []string{"text\n\n```\nx\n```\n\nmore"}},
	{"unclosed-small-fence-stays-whole", "intro\n\n```go\nx\n\n\ny", 2000, []string{"intro\n\n```go\nx\n\n\ny"}},

	// rule 2: oversized plain blocks
	{"long-paragraph-packed-by-lines", a9 + "\n" + b9 + "\n" + c9, 20, []string{a9 + "\n" + b9, c9}},
	{"long-line-hard-split", strings.Repeat("a", 40), 16, []string{strings.Repeat("a", 16), strings.Repeat("a", 16), strings.Repeat("a", 8)}},
	{"long-line-between-short-lines", "aaa\n" + strings.Repeat("b", 40) + "\nccc", 16, []string{"aaa", strings.Repeat("b", 16), strings.Repeat("b", 16), strings.Repeat("b", 8) + "\n\nccc"}},
	{"hard-split-counts-utf16-units", strings.Repeat(emo, 9), 16, []string{strings.Repeat(emo, 8), emo}},
	{"hard-split-never-cuts-a-surrogate-pair", "a" + strings.Repeat(emo, 8), 16, []string{"a" + strings.Repeat(emo, 7), emo}},
	{"bmp-cjk-counts-one-unit", strings.Repeat("字", 16), 16, []string{strings.Repeat("字", 16)}},

	// rule 2: oversized fenced blocks
	{"oversized-fence-rewrapped", "```go\n" + a9 + "\n" + b9 + "\n" + c9 + "\n```", 30, []string{"```go\n" + a9 + "\n" + b9 + "\n```", "```go\n" + c9 + "\n```"}},
	{"oversized-tilde-fence-rewrapped", "~~~\n" + a9 + "\n" + b9 + "\n" + c9 + "\n~~~", 27, []string{"~~~\n" + a9 + "\n" + b9 + "\n~~~", "~~~\n" + c9 + "\n~~~"}},
	{"unclosed-oversized-fence-closed-in-every-piece", "```go\n" + a9 + "\n" + b9 + "\n" + c9, 30, []string{"```go\n" + a9 + "\n" + b9 + "\n```", "```go\n" + c9 + "\n```"}},
	{"indented-fence-rewrapped-with-same-opening-line", "  ```\n" + a9 + "\n" + b9 + "\n" + c9 + "\n```", 29, []string{"  ```\n" + a9 + "\n" + b9 + "\n```", "  ```\n" + c9 + "\n```"}},
	{"fence-body-long-line-hard-split", "```\n" + strings.Repeat("x", 40) + "\n```", 30, []string{"```\n" + strings.Repeat("x", 22) + "\n```", "```\n" + strings.Repeat("x", 18) + "\n```"}},
	{"opening-line-too-long-becomes-body", "```" + strings.Repeat("a", 30) + "\nx\n```", 30, []string{"```\n```" + strings.Repeat("a", 19) + "\n```", "```\n" + strings.Repeat("a", 11) + "\n```\n\n```\nx\n```"}},

	// rule 3: greedy merge
	{"paragraphs-merged", "a\n\nb\n\nc", 2000, []string{"a\n\nb\n\nc"}},
	{"merge-exactly-at-limit", a9 + "\n\n" + b9, 20, []string{a9 + "\n\n" + b9}},
	{"merge-stops-over-limit", a9 + "a\n\n" + b9, 20, []string{a9 + "a", b9}},
	{"merge-is-greedy-in-order", "aaaa\n\n" + strings.Repeat("b", 15) + "\n\ncc", 20, []string{"aaaa", strings.Repeat("b", 15) + "\n\ncc"}},
	{"fence-merged-with-paragraphs", "hi\n\n```\nx\n```\n\nbye", 2000, []string{"hi\n\n```\nx\n```\n\nbye"}},

	// limits
	{"zero-limit-means-2000", strings.Repeat("a", 2001), 0, []string{strings.Repeat("a", 2000), "a"}},
	{"tiny-limit-raised-to-16", strings.Repeat("a", 17), 3, []string{strings.Repeat("a", 16), "a"}},
}

func TestChunk(t *testing.T) {
	for _, tt := range chunkTests {
		t.Run(tt.name, func(t *testing.T) {
			got := Chunk(tt.in, tt.limit)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Chunk(%q, %d) mismatch (-want +got):\n%s", tt.in, tt.limit, diff)
			}
			checkChunks(t, tt.in, tt.limit, got)
		})
	}
}

func TestChunkDiscordSizedReply(t *testing.T) {
	para := strings.Repeat("word ", 150) // 750 units
	in := para + "\n\n" + para + "\n\n" + para + "\n\n```go\n" + strings.Repeat("fmt.Println(1)\n", 200) + "```"
	got := Chunk(in, ChunkLimit)
	if len(got) < 4 {
		t.Fatalf("Chunk(%d units) = %d chunks; want at least 4", rtsandbox.UTF16Len(in), len(got))
	}
	checkChunks(t, in, ChunkLimit, got)
}

// The amplification finding: an opening fence line of 1,990 units left
// each re-wrapped piece room for two characters, so a 6,000-unit reply
// became 2,000 messages. The line now opens the first piece only.
func TestChunkLongOpeningLineNotRepeated(t *testing.T) {
	open := "```" + strings.Repeat("a", 1987)
	in := open + "\n" + strings.Repeat(strings.Repeat("x", 79)+"\n", 50) + "```"
	got, cut := Bounded(in, ChunkLimit, 0)
	// Each piece but the first carries at least limit − 8 units of the
	// body; the first and a hard-split line's remainder may be short.
	if bound := rtsandbox.UTF16Len(in)/(ChunkLimit-8) + 3; cut || len(got) > bound {
		t.Fatalf("Chunk(%d units with a %d-unit opening line) = %d chunks (cut %v); want at most %d",
			rtsandbox.UTF16Len(in), len(open), len(got), cut, bound)
	}
	if n := strings.Count(strings.Join(got, ""), open); n != 1 {
		t.Errorf("the opening line appears %d times; want once", n)
	}
	checkChunks(t, in, ChunkLimit, got)
}

func TestChunkBounded(t *testing.T) {
	para := strings.Repeat("word ", 390) + "end." // 1954 units
	tests := []struct {
		name   string
		in     string
		limit  int
		max    int
		want   []string
		wantAt int // the chunk count of a cut reply; 0: not cut
	}{
		{"fits-not-cut", "a\n\nb", 16, 1, []string{"a\n\nb"}, 0},
		{"exactly-max-not-cut", strings.Repeat("a", 32), 16, 2, []string{strings.Repeat("a", 16), strings.Repeat("a", 16)}, 0},
		{"tiny-limit-notice-alone", strings.Repeat("a", 48), 16, 2, []string{strings.Repeat("a", 16), rtsandbox.ReplyCutNotice[:16]}, 2},
		{"notice-after-room", para + "\n\n" + para + "\n\n" + para, ChunkLimit, 2, nil, 2},
		{"code-closed-before-notice", para + "\n\n```go\n" + strings.Repeat("fmt.Println(1)\n", 300) + "```", ChunkLimit, 2, nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := Bounded(tt.in, tt.limit, tt.max)
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("chunk mismatch (-want +got):\n%s", diff)
				}
			}
			if cut != (tt.wantAt > 0) || (cut && len(got) != tt.wantAt) {
				t.Errorf("chunk = %d chunks, cut %v; want cut at %d", len(got), cut, tt.wantAt)
			}
			checkBounded(t, tt.in, tt.limit, tt.max, got, cut)
			if cut && tt.limit == ChunkLimit && !strings.HasSuffix(got[len(got)-1], "\n\n"+rtsandbox.ReplyCutNotice) {
				t.Errorf("last chunk %q does not end with the notice", got[len(got)-1])
			}
		})
	}
}

func FuzzChunk(f *testing.F) {
	for _, tt := range chunkTests {
		f.Add(tt.in, uint16(tt.limit))
	}
	f.Add(strings.Repeat("x", 1990)+"```\n"+strings.Repeat("y", 30), uint16(2000))
	f.Add("```"+strings.Repeat("a", 1987)+"\n"+strings.Repeat("b\n", 2000)+"```", uint16(0))
	f.Add(strings.Repeat("```\n"+strings.Repeat("c", 40)+"\n```\n\n", 30), uint16(32))
	f.Fuzz(func(t *testing.T, in string, limit uint16) {
		l := int(limit % 2048)
		all, _ := Bounded(in, l, 0)
		checkBounded(t, in, l, MaxChunks, Chunk(in, l), len(all) > MaxChunks)
		// A small bound cuts often.
		n := 1 + int(limit/2048)%4
		got, cut := Bounded(in, l, n)
		if cut != (len(all) > n) {
			t.Fatalf("cut = %v with %d chunks uncut; bound %d", cut, len(all), n)
		}
		checkBounded(t, in, l, n, got, cut)
	})
}

// checkChunks checks an uncut split (see checkBounded).
func checkChunks(t *testing.T, in string, limit int, chunks []string) {
	t.Helper()
	checkBounded(t, in, limit, 0, chunks, false)
}

// checkBounded asserts the properties every split must have: at most
// maxChunks chunks (when > 0), each within the limit and not blank; the
// input's non-space text kept in order (all of it, or when cut a prefix,
// and the last chunk ends with the notice), with additions made only of
// fence text; fences balanced in every chunk but an input's own unclosed
// final fence; and no amplification: the chunks hold at most three times
// the input's units, plus the notice.
func checkBounded(t *testing.T, in string, limit, maxChunks int, chunks []string, cut bool) {
	t.Helper()
	if limit < 1 {
		limit = ChunkLimit
	}
	limit = max(limit, minChunkLimit)
	if maxChunks > 0 && len(chunks) > maxChunks {
		t.Fatalf("%d chunks; bound %d", len(chunks), maxChunks)
	}
	total := 0
	for i, c := range chunks {
		if !utf8.ValidString(c) {
			t.Fatalf("chunk %d is not valid UTF-8: %q", i, c)
		}
		n := rtsandbox.UTF16Len(c)
		if n > limit {
			t.Fatalf("chunk %d has %d UTF-16 units; limit %d", i, n, limit)
		}
		total += n
		if jsTrim(c) == "" {
			t.Fatalf("chunk %d is blank: %q", i, c)
		}
	}
	norm := strings.ReplaceAll(strings.ToValidUTF8(in, "\uFFFD"), "\r\n", "\n")
	if bound := 3*rtsandbox.UTF16Len(norm) + rtsandbox.UTF16Len(rtsandbox.ReplyCutNotice); total > bound {
		t.Fatalf("chunks hold %d units for an input of %d; want at most %d", total, rtsandbox.UTF16Len(norm), bound)
	}
	text := chunks
	if cut {
		if len(chunks) != maxChunks {
			t.Fatalf("cut to %d chunks; want the bound %d", len(chunks), maxChunks)
		}
		last := chunks[len(chunks)-1]
		text = slices.Clone(chunks[:len(chunks)-1])
		switch {
		case strings.HasSuffix(last, "\n\n"+rtsandbox.ReplyCutNotice):
			text = append(text, strings.TrimSuffix(last, "\n\n"+rtsandbox.ReplyCutNotice))
		case strings.HasPrefix(rtsandbox.ReplyCutNotice, last):
		default:
			t.Fatalf("the last chunk of a cut reply does not end with the notice: %q", last)
		}
	}
	blocks := parseBlocks(norm)
	fenceRunes := map[rune]bool{'`': true, '~': true}
	for _, b := range blocks {
		if b.marker != "" {
			for _, r := range b.lines[0] {
				fenceRunes[r] = true
			}
		}
	}
	want := []rune(strings.Join(strings.FieldsFunc(norm, jsSpace), ""))
	got := strings.Join(strings.FieldsFunc(strings.Join(text, ""), jsSpace), "")
	j := 0
	for _, r := range got {
		if j < len(want) && r == want[j] {
			j++
			continue
		}
		if !fenceRunes[r] {
			t.Fatalf("output adds %q, which is not fence text", r)
		}
	}
	if j != len(want) && !cut {
		t.Fatalf("output lost input text from rune %d (%q)", j, string(want[j:]))
	}
	openAtEnd := !cut && len(blocks) > 0 && blocks[len(blocks)-1].marker != "" && !blocks[len(blocks)-1].closed
	for i, c := range chunks {
		for _, b := range parseBlocks(c) {
			if b.marker != "" && !b.closed && !(openAtEnd && i == len(chunks)-1) {
				t.Fatalf("chunk %d leaves a fence open: %q", i, c)
			}
		}
	}
}
