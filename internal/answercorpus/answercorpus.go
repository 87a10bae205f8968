// Package answercorpus generates chat-completions answers of a chosen size
// for benchmarks and tests: the byte mix of real model output, made
// deterministically (a fixed seed) instead of committed as files.
//
// Real answers are markdown. Nearly every JSON string in them carries
// escapes: blank lines between paragraphs, quotes and backslashes in code,
// tool-call arguments that are JSON inside a string, and, from servers that
// write ASCII only, every non-ASCII character as a \u escape. The kinds
// below cover each of those, and escape-free prose as the easy case.
package answercorpus

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind names one corpus.
type Kind string

const (
	// Prose is one string of ordinary sentences with no escape at all.
	Prose Kind = "prose"
	// Markdown is paragraphs separated by blank lines, headings, lists,
	// code blocks with quotes, backslashes and tabs, inline HTML written
	// as \u003c…\u003e, CJK and emoji as UTF-8 with a few \u escapes, and
	// tool-call JSON quoted inside the text.
	Markdown Kind = "markdown"
	// ASCII is Markdown as a server that writes ASCII only sends it: every
	// non-ASCII character a \u escape, emoji as surrogate pairs.
	ASCII Kind = "ascii"
	// ToolCalls is an answer whose bulk is tool calls: arguments strings
	// holding JSON whose own strings hold source code, so escapes are
	// themselves escaped (\\n, \\\").
	ToolCalls Kind = "tool-calls"
)

// Kinds lists every corpus, the easy case first; a new slice each call.
func Kinds() []Kind { return []Kind{Prose, Markdown, ASCII, ToolCalls} }

// Answer returns a chat completion of exactly size bytes (at least 512)
// of the given kind; the same arguments always give the same bytes.
func Answer(kind Kind, size int) []byte {
	g := &gen{r: rand.New(rand.NewPCG(uint64(size), 11)), ascii: kind == ASCII}
	var head, tail string
	var body strings.Builder
	switch kind {
	case Prose:
		head, tail = chatHead, chatTail
		g.fill(&body, size-len(head)-len(tail), g.prose)
	case Markdown, ASCII:
		head, tail = chatHead, chatTail
		g.fill(&body, size-len(head)-len(tail), g.block)
	case ToolCalls:
		head, tail = toolHead, toolTail
		g.fill(&body, size-len(head)-len(tail), g.toolCall)
	default:
		panic(fmt.Sprintf("answercorpus: unknown kind %q", kind))
	}
	return []byte(head + body.String() + tail)
}

// Stream returns the content of a streamed answer of the given kind, at
// least size bytes in all, as pieces of JSON string content that each
// hold whole escapes, for the deltas of a streamed answer: the text of a
// Messages text_delta (Prose, Markdown, ASCII: the same text as Answer's
// content) or, for ToolCalls, the partial_json of an input_json_delta
// (tool arguments, JSON encoded as a string, so escapes of escapes). The
// same arguments always give the same pieces.
func Stream(kind Kind, size int) []string {
	g := &gen{r: rand.New(rand.NewPCG(uint64(size), 12)), ascii: kind == ASCII}
	var next func() string
	switch kind {
	case Prose:
		next = g.prose
	case Markdown, ASCII:
		next = g.block
	case ToolCalls:
		next = func() string { return jsonString(g.toolArgs(), false) }
	default:
		panic(fmt.Sprintf("answercorpus: unknown kind %q", kind))
	}
	var out []string
	for n := 0; n < size; {
		p := next()
		out = append(out, p)
		n += len(p)
	}
	return out
}

const (
	chatHead = `{"id":"chatcmpl-bench","object":"chat.completion","created":1764547200,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"`
	chatTail = `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":345,"total_tokens":357}}`
	toolHead = `{"id":"chatcmpl-bench","object":"chat.completion","created":1764547200,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[`
	toolTail = `{"id":"call_end","type":"function","function":{"name":"done","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`
)

// gen writes encoded JSON string content (or, for tool calls, array
// elements) from a seeded generator.
type gen struct {
	r     *rand.Rand
	ascii bool // write every non-ASCII character as a \u escape
}

// fill appends pieces from next until n bytes are written, then pads with
// spaces to exactly n: a piece that would overflow is dropped.
func (g *gen) fill(out *strings.Builder, n int, next func() string) {
	for {
		p := next()
		if out.Len()+len(p) > n {
			break
		}
		out.WriteString(p)
	}
	out.WriteString(strings.Repeat(" ", n-out.Len()))
}

func (g *gen) pick(list []string) string { return list[g.r.IntN(len(list))] }

// prose is escape-free sentences.
func (g *gen) prose() string { return g.sentence() }

func (g *gen) sentence() string {
	n := 6 + g.r.IntN(12)
	words := make([]string, n)
	for i := range words {
		words[i] = g.pick(vocabulary)
	}
	s := strings.Join(words, " ")
	return strings.ToUpper(s[:1]) + s[1:] + g.pick([]string{". ", ". ", ", and then ", "; ", "? "})
}

// block is one markdown block, encoded as JSON string content.
func (g *gen) block() string {
	var text string
	switch k := g.r.IntN(20); {
	case k < 8:
		text = g.paragraph()
	case k < 10:
		text = "## " + g.sentence() + "\n\n"
	case k < 12:
		text = g.list()
	case k < 16:
		text = g.codeBlock()
	case k < 18:
		text = g.cjk()
	default:
		text = g.quotedToolCall()
	}
	return g.encode(text)
}

func (g *gen) paragraph() string {
	var b strings.Builder
	for range 2 + g.r.IntN(4) {
		b.WriteString(g.sentence())
		switch g.r.IntN(6) {
		case 0:
			b.WriteString("Use `" + g.pick(identifiers) + "` here. ")
		case 1:
			b.WriteString("See [the docs](https://docs.example.com/api?lang=go&v=2) for **details**. ")
		case 2:
			b.WriteString("It said \"" + g.pick(vocabulary) + "\" twice — and meant it. ")
		}
	}
	return strings.TrimRight(b.String(), " ") + "\n\n"
}

func (g *gen) list() string {
	var b strings.Builder
	for range 3 + g.r.IntN(4) {
		b.WriteString("- " + g.sentence() + "\n")
	}
	return b.String() + "\n"
}

func (g *gen) codeBlock() string {
	lang := g.pick([]string{"go", "python", "bash", "json", "html"})
	var b strings.Builder
	b.WriteString("```" + lang + "\n")
	for range 4 + g.r.IntN(10) {
		b.WriteString(strings.Repeat("\t", g.r.IntN(3)) + g.pick(codeLines[lang]) + "\n")
	}
	b.WriteString("```\n\n")
	return b.String()
}

func (g *gen) cjk() string {
	var b strings.Builder
	for range 2 + g.r.IntN(4) {
		b.WriteString(g.pick(cjkSentences))
		if g.r.IntN(3) == 0 {
			b.WriteString(g.pick(emoji))
		}
	}
	return b.String() + "\n\n"
}

// quotedToolCall is tool-call JSON shown in the text, its arguments a
// string of JSON as the API writes them.
func (g *gen) quotedToolCall() string {
	return "The call was:\n\n```json\n" + g.toolCallJSON() + "\n```\n\n"
}

// toolCall is one element of a tool_calls array.
func (g *gen) toolCall() string {
	return g.toolCallJSON() + ","
}

func (g *gen) toolCallJSON() string {
	args := g.toolArgs()
	return fmt.Sprintf(`{"id":"call_%d","type":"function","function":{"name":"write_file","arguments":"%s"}}`,
		g.r.IntN(1e6), jsonString(args, false))
}

// toolArgs is the JSON text of one tool call's arguments.
func (g *gen) toolArgs() string {
	var file strings.Builder
	for range 3 + g.r.IntN(8) {
		file.WriteString(strings.Repeat("\t", g.r.IntN(3)) + g.pick(codeLines["go"]) + "\n")
	}
	return `{"path":"src/` + g.pick(identifiers) + `.go","content":"` + jsonString(file.String(), false) +
		`","note":"` + jsonString(g.pick(cjkSentences)+g.pick(emoji), g.r.IntN(2) == 0) + `"}`
}

// encode writes text as JSON string content: the escapes every encoder
// writes, '<', '>' and '&' as Go's encoder writes them in about one text in
// four, and non-ASCII as \u escapes always (ascii) or in one text in ten.
func (g *gen) encode(text string) string {
	html := g.r.IntN(4) == 0
	ascii := g.ascii || g.r.IntN(10) == 0
	var b strings.Builder
	for _, r := range text {
		switch {
		case html && (r == '<' || r == '>' || r == '&'):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			writeRune(&b, r, ascii)
		}
	}
	return b.String()
}

// jsonString encodes s as JSON string content.
func jsonString(s string, ascii bool) string {
	var b strings.Builder
	for _, r := range s {
		writeRune(&b, r, ascii)
	}
	return b.String()
}

func writeRune(b *strings.Builder, r rune, ascii bool) {
	switch {
	case r == '"':
		b.WriteString(`\"`)
	case r == '\\':
		b.WriteString(`\\`)
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\t':
		b.WriteString(`\t`)
	case r < 0x20:
		fmt.Fprintf(b, `\u%04x`, r)
	case ascii && r >= utf8.RuneSelf:
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
		} else {
			fmt.Fprintf(b, `\u%04x`, r)
		}
	default:
		b.WriteRune(r)
	}
}

var vocabulary = strings.Fields(`the a worker sealed answer guest question model broker container
	request token budget channel reply careful quickly every before after while cache index query
	returns value function package error handler stream chunk buffer parser check rule limit host
	operator tool result memory history simple fast large small first last next other`)

var identifiers = strings.Fields(`parseReply checkJSON turnBudget streamChunk handler_test.go
	main.go config.yaml MaxTokens ctx.Done() errors.Is bytes.IndexByte`)

var codeLines = map[string][]string{
	"go": {
		`fmt.Printf("%s: %q\n", name, value)`,
		`re := regexp.MustCompile("\\d+\\.\\d+")`,
		`path := "C:\\Users\\guest\\file.txt"`,
		`if err != nil { return fmt.Errorf("read %s: %w", p, err) }`,
		`s := strings.ReplaceAll(s, "\"", "\\\"")`,
		`for i, c := range "héllo, 世界" {`,
		`}`,
		`// A comment with 'quotes' and a tab	inside.`,
	},
	"python": {
		`print(f"{name!r}: {value}\n")`,
		`pattern = re.compile(r"\s+(\w+)\\")`,
		`data = json.loads('{"a": [1, 2, "x\\ny"]}')`,
		`    return "\t".join(parts)`,
		`raise ValueError("bad input: %r" % (s,))`,
	},
	"bash": {
		`echo "Hello, $USER!" | sed -e 's/\(.*\)/[\1]/'`,
		`grep -E '"key": *"[^"]+"' config.json`,
		`printf '%s\n' "$@" > "/tmp/out file"`,
		`find . -name '*.go' -exec gofmt -l {} \;`,
	},
	"json": {
		`{"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}`,
		`"path": "C:\\temp\\a.txt",`,
		`"emoji": "😀 ✅ 🚀",`,
		`"escaped": "line\nbreak\ttab",`,
	},
	"html": {
		`<div class="note">R&amp;D &lt;b&gt;today&lt;/b&gt;</div>`,
		`<a href="/search?q=a&b=2">link</a>`,
		`<p>Ce qu'il faut savoir — «&nbsp;vraiment&nbsp;»</p>`,
	},
}

var cjkSentences = []string{
	"这是一个关于沙箱模型的回答，内容包括代码和说明。",
	"日本語の文章もここに含まれています。",
	"한국어 문장도 포함되어 있습니다. ",
	"模型的回答应当安全地返回给用户。",
	"テスト用のデータを生成します。",
}

var emoji = []string{"😀", "🚀", "✅", "🎉", "👍🏽", "🇫🇷", "⚠️"}

// Events returns a streamed Anthropic Messages answer of about size
// bytes (its deltas add up to at most size) as its server-sent events: message_start, content_block_delta
// events of about evSize bytes each carrying Stream's pieces (text_delta,
// or input_json_delta for ToolCalls), message_delta with the usage, and
// message_stop. The same arguments always give the same events.
func Events(kind Kind, size, evSize int) []string {
	typ, field := "text_delta", "text"
	if kind == ToolCalls {
		typ, field = "input_json_delta", "partial_json"
	}
	evs := []string{MessageStart}
	head := "event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"` + typ + `","` + field + `":"`
	const tail = "\"}}\n\n"
	total := len(MessageStart)
	var text strings.Builder
	for _, p := range Stream(kind, size) {
		text.WriteString(p)
		if len(head)+text.Len()+len(tail) < evSize {
			continue
		}
		ev := head + text.String() + tail
		if total+len(ev) > size {
			break
		}
		evs = append(evs, ev)
		total += len(ev)
		text.Reset()
	}
	return append(evs, messageDelta, messageStop)
}

// MessageStart is the first event of Events' streams.
const MessageStart = "event: message_start\ndata: " + `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}` + "\n\n"

const (
	messageDelta = "event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1000}}` + "\n\n"
	messageStop  = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// EndEvents are the last two events of Events' streams.
func EndEvents() []string { return []string{messageDelta, messageStop} }
