package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/internal/chunkread"
)

// A field a client assembles, and how a streamed answer carries it: the
// events around its deltas and each delta's event, given the delta's JSON
// string literal.
type assembledField struct {
	name       string
	head, tail []string
	delta      func(lit string) string
}

func sse(data string) string            { return "data: " + data + "\n\n" }
func sseEvent(name, data string) string { return "event: " + name + "\n" + sse(data) }
func openAIChunk(delta string) string {
	return sse(`{"id":"c1","object":"chat.completion.chunk","choices":[` + delta + `]}`)
}
func anthropicDelta(index int, typ, member, lit string) string {
	return sseEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":%q,%q:%s}}`, index, typ, member, lit))
}

var (
	openAIHead    = []string{openAIChunk(`{"index":0,"delta":{"role":"assistant","content":""}}`)}
	openAITail    = []string{openAIChunk(`{"index":0,"delta":{},"finish_reason":"stop"}`), sse("[DONE]")}
	messagesStart = sseEvent("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}`)
	messagesTail  = []string{sseEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
		sseEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}`),
		sseEvent("message_stop", `{"type":"message_stop"}`)}
)

func blockStart(block string) string {
	return sseEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":`+block+`}`)
}

// assembledFields are every field of both dialects that the check
// assembles.
var assembledFields = []assembledField{
	{name: "openai-content", head: openAIHead, tail: openAITail,
		delta: func(lit string) string { return openAIChunk(`{"index":0,"delta":{"content":` + lit + `}}`) }},
	{name: "openai-refusal", head: openAIHead, tail: openAITail,
		delta: func(lit string) string { return openAIChunk(`{"delta":{"refusal":` + lit + `},"index":0}`) }},
	{name: "openai-reasoning", head: openAIHead, tail: openAITail,
		delta: func(lit string) string { return openAIChunk(`{"index":0,"delta":{"reasoning_content":` + lit + `}}`) }},
	{name: "openai-tool-arguments",
		head: []string{openAIChunk(`{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":""}}]}}`)},
		tail: openAITail,
		delta: func(lit string) string {
			return openAIChunk(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":` + lit + `}}]}}`)
		}},
	{name: "openai-function-call", head: openAIHead, tail: openAITail,
		delta: func(lit string) string {
			return openAIChunk(`{"index":0,"delta":{"function_call":{"arguments":` + lit + `}}}`)
		}},
	{name: "anthropic-text", head: []string{messagesStart, blockStart(`{"type":"text","text":""}`)}, tail: messagesTail,
		delta: func(lit string) string { return anthropicDelta(0, "text_delta", "text", lit) }},
	{name: "anthropic-thinking", head: []string{messagesStart, blockStart(`{"type":"thinking","thinking":"","signature":""}`)}, tail: messagesTail,
		delta: func(lit string) string { return anthropicDelta(0, "thinking_delta", "thinking", lit) }},
	{name: "anthropic-signature", head: []string{messagesStart, blockStart(`{"type":"thinking","thinking":"","signature":""}`)}, tail: messagesTail,
		delta: func(lit string) string { return anthropicDelta(0, "signature_delta", "signature", lit) }},
	{name: "anthropic-partial-json", head: []string{messagesStart, blockStart(`{"type":"tool_use","id":"toolu_1","name":"lookup","input":{}}`)}, tail: messagesTail,
		delta: func(lit string) string { return anthropicDelta(0, "input_json_delta", "partial_json", lit) }},
}

// literal encodes s as a JSON string as an upstream might: escaping HTML
// characters (encoding/json's default, so '&' is \u0026) or not.
func literal(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// cutText cuts text into pieces of size bytes, the first of first bytes
// (1 ≤ first ≤ size), never inside a UTF-8 sequence.
func cutText(text string, first, size int) []string {
	var out []string
	for n := first; text != ""; n = size {
		n = min(n, len(text))
		for n < len(text) && n > 0 && text[n]&0xC0 == 0x80 {
			n++
		}
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// fieldStream is the body of a streamed answer whose field f assembles
// the pieces, each in its own event.
func fieldStream(f assembledField, pieces []string, escapeHTML bool) []byte {
	var b strings.Builder
	for _, h := range f.head {
		b.WriteString(h)
	}
	for _, p := range pieces {
		b.WriteString(f.delta(literal(p, escapeHTML)))
	}
	for _, t := range f.tail {
		b.WriteString(t)
	}
	return []byte(b.String())
}

// scanStream runs body through an event-mode scanner for key, reading it
// in reads of at most read bytes (all at once for 0).
func scanStream(body []byte, key string, read int) ([]byte, error) {
	var r chunkread.Reader
	if read <= 0 {
		read = len(body)
	}
	for len(body) > 0 {
		n := min(read, len(body))
		r = append(r, bytes.Clone(body[:n]))
		body = body[n:]
	}
	s := NewStreamScanner(&r, key, 0)
	s.Events()
	return drain(s)
}

// keyForms are every form of the key the whole-body scan finds: those of
// Forms and the key written as HTML character references (decimal and
// hexadecimal, as an HTML encoder of every character writes it).
func everyForm(key string) map[string]string {
	forms := map[string]string{"entities-decimal": numericEntities(key), "entities-hex": hexEntities(key)}
	for i, f := range Forms(key) {
		forms[fmt.Sprintf("form-%d", i)] = f
	}
	return forms
}

func hexEntities(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, "&#x%X;", r)
	}
	return b.String()
}

// TestStreamAssembledKeySplitAcrossEvents is the red team's finding: a
// key echoed as a model streams text, cut into deltas of 1 to 8 bytes at
// every offset, one event each, reached the client whole while every
// event and the raw bytes between them held none. In every field a client
// assembles, in both dialects, every form of the key (raw, URL-encoded,
// base64 at every alignment, hex, HTML character references) is refused,
// with and without JSON's HTML escaping, and nothing passed on before the
// refusal holds it.
func TestStreamAssembledKeySplitAcrossEvents(t *testing.T) {
	forms := everyForm(streamKey)
	cases := 0
	for _, f := range assembledFields {
		t.Run(f.name, func(t *testing.T) {
			for name, form := range forms {
				text := "here it is: " + form + " (ok)"
				for size := 1; size <= 8; size++ {
					for first := 1; first <= size; first++ {
						for _, esc := range []bool{false, true} {
							pieces := cutText(text, first, size)
							out, err := scanStream(fieldStream(f, pieces, esc), streamKey, 0)
							cases++
							if !errors.Is(err, ErrReflect) {
								t.Fatalf("%s in deltas of %d (first %d, HTML escaped %v): err %v; want ErrReflect", name, size, first, esc, err)
							}
							if assembled := assemble(t, out); CheckText(assembled, streamKey) != nil {
								t.Fatalf("%s in deltas of %d: the events passed on assemble %q, which holds the key", name, size, assembled)
							}
						}
					}
				}
			}
		})
	}
	if cases < 10000 {
		t.Errorf("%d cases; want every form, field, size and offset", cases)
	}
}

// assemble is what a client would assemble from the events of body: every
// assembled field's text, joined (a reference client: encoding/json).
func assemble(t *testing.T, body []byte) string {
	t.Helper()
	var out strings.Builder
	for _, ev := range strings.Split(string(body), "\n\n") {
		for _, line := range strings.Split(ev, "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || !strings.HasPrefix(data, "{") {
				continue
			}
			var v struct {
				Choices []struct {
					Delta struct {
						Content, Refusal string
						ReasoningContent string                                          `json:"reasoning_content"`
						FunctionCall     struct{ Arguments string }                      `json:"function_call"`
						ToolCalls        []struct{ Function struct{ Arguments string } } `json:"tool_calls"`
					}
				}
				Delta struct {
					Text, Thinking, Signature string
					PartialJSON               string `json:"partial_json"`
				}
			}
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			for _, c := range v.Choices {
				out.WriteString(c.Delta.Content + c.Delta.Refusal + c.Delta.ReasoningContent + c.Delta.FunctionCall.Arguments)
				for _, tc := range c.Delta.ToolCalls {
					out.WriteString(tc.Function.Arguments)
				}
			}
			out.WriteString(v.Delta.Text + v.Delta.Thinking + v.Delta.Signature + v.Delta.PartialJSON)
		}
	}
	return out.String()
}

// TestStreamAssembledInterleavedIndexes: deltas of two choices, two tool
// calls and two content blocks interleaved, one event each, with the key
// cut across the deltas of one of them; the other's deltas between its
// pieces hide nothing, and a clean interleaving passes.
func TestStreamAssembledInterleavedIndexes(t *testing.T) {
	pieces := cutText("key "+streamKey+" end", 1, 3)
	other := func(i int) string { return fmt.Sprintf("other %d ", i) }
	build := func(key bool, ev func(idx int, lit string) string) []byte {
		var b strings.Builder
		for i, p := range pieces {
			if !key {
				p = strings.Repeat("x", len(p))
			}
			b.WriteString(ev(1, literal(p, true)))
			b.WriteString(ev(0, literal(other(i), true)))
		}
		return []byte(b.String())
	}
	tests := []struct {
		name string
		ev   func(idx int, lit string) string
	}{
		{"openai-choices", func(idx int, lit string) string {
			return openAIChunk(fmt.Sprintf(`{"index":%d,"delta":{"content":%s}}`, idx, lit))
		}},
		{"openai-choices-one-chunk", func(idx int, lit string) string {
			if idx == 0 {
				return ""
			}
			return openAIChunk(fmt.Sprintf(`{"index":0,"delta":{"content":"zz"}},{"index":1,"delta":{"content":%s}}`, lit))
		}},
		{"openai-tool-calls", func(idx int, lit string) string {
			return openAIChunk(fmt.Sprintf(`{"index":0,"delta":{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}}`, idx, lit))
		}},
		{"anthropic-blocks", func(idx int, lit string) string { return anthropicDelta(idx, "text_delta", "text", lit) }},
		{"anthropic-text-beside-thinking", func(idx int, lit string) string {
			if idx == 0 {
				return anthropicDelta(1, "thinking_delta", "thinking", lit)
			}
			return anthropicDelta(1, "text_delta", "text", lit)
		}},
		{"anthropic-unknown-delta-type-between", func(idx int, lit string) string {
			if idx == 0 { // a type clients skip, carrying a text member
				return anthropicDelta(1, "citations_delta", "text", lit)
			}
			return anthropicDelta(1, "text_delta", "text", lit)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := scanStream(build(true, tt.ev), streamKey, 7); !errors.Is(err, ErrReflect) {
				t.Errorf("key across interleaved deltas: err %v; want ErrReflect", err)
			}
			body := build(false, tt.ev)
			if out, err := scanStream(body, streamKey, 7); err != nil || !bytes.Equal(out, body) {
				t.Errorf("clean interleaving: err %v, passed on %d of %d bytes", err, len(out), len(body))
			}
		})
	}
}

// TestStreamAssembledStartText: the text of a content_block_start is the
// start of its block's text: a key begun there and ended in a delta is
// found.
func TestStreamAssembledStartText(t *testing.T) {
	half := len(streamKey) / 2
	body := messagesStart + blockStart(`{"type":"text","text":`+literal(streamKey[:half], true)+`}`) +
		anthropicDelta(0, "text_delta", "text", literal(streamKey[half:], true))
	if _, err := scanStream([]byte(body), streamKey, 0); !errors.Is(err, ErrReflect) {
		t.Errorf("key begun in the start's text: err %v; want ErrReflect", err)
	}
}

// TestStreamAssembledCleanCorpus: real answers (every corpus kind,
// markdown full of escapes) streamed in deltas of 1 to 8 bytes in every
// field pass unchanged, read whole and in small reads.
func TestStreamAssembledCleanCorpus(t *testing.T) {
	for _, kind := range answercorpus.Kinds() {
		var text strings.Builder
		for _, p := range answercorpus.Stream(kind, 1<<10) {
			var s string
			if err := json.Unmarshal([]byte(`"`+p+`"`), &s); err != nil {
				t.Fatal(err)
			}
			text.WriteString(s)
		}
		for _, f := range assembledFields {
			for _, size := range []int{1, 6} {
				body := fieldStream(f, cutText(text.String(), size, size), true)
				for _, read := range []int{0, 5} {
					out, err := scanStream(body, streamKey, read)
					if err != nil || !bytes.Equal(out, body) {
						t.Fatalf("%s %s in deltas of %d, reads of %d: err %v, passed on %d of %d bytes", kind, f.name, size, read, err, len(out), len(body))
					}
				}
			}
		}
	}
}

// TestStreamAssembledUncheckable: an answer whose fields the check cannot
// name as every client does fails closed with ErrUncheckable; data that
// is not JSON is skipped as clients reject it, and forms stay found.
func TestStreamAssembledUncheckable(t *testing.T) {
	many := ""
	for i := range maxFields + 1 {
		many += openAIChunk(fmt.Sprintf(`{"index":%d,"delta":{"content":"x"}}`, i))
	}
	padded := strings.Repeat("&#"+strings.Repeat("0", 30)+"115;", 40)
	tests := []struct {
		name, body string
		want       error
	}{
		{"repeated-member", openAIChunk(`{"index":0,"delta":{"content":"a","content":"b"}}`), ErrUncheckable},
		{"member-case-variant", openAIChunk(`{"index":0,"delta":{"Content":"a"}}`), ErrUncheckable},
		{"member-kelvin-variant", anthropicDelta(0, "text_delta", "te\u212at", `"a"`), ErrUncheckable},
		{"root-member-case-variant", sseEvent("content_block_delta", `{"type":"content_block_delta","Index":0,"delta":{"type":"text_delta","text":"a"}}`), ErrUncheckable},
		{"repeated-index", openAIChunk(`{"index":0,"index":1,"delta":{"content":"a"}}`), ErrUncheckable},
		{"index-not-integer", openAIChunk(`{"index":1.0,"delta":{"content":"a"}}`), ErrUncheckable},
		{"index-string", openAIChunk(`{"index":"0","delta":{"content":"a"}}`), ErrUncheckable},
		{"index-negative", anthropicDelta(-1, "text_delta", "text", `"a"`), ErrUncheckable},
		{"index-too-large", openAIChunk(`{"index":10000000,"delta":{"content":"a"}}`), ErrUncheckable},
		{"index-absent-and-zero", openAIChunk(`{"delta":{"content":"a"}}`) + openAIChunk(`{"index":0,"delta":{"content":"b"}}`), ErrUncheckable},
		{"block-started-out-of-order", messagesStart + sseEvent("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`), ErrUncheckable},
		{"too-many-fields", many, ErrUncheckable},
		{"references-padded-past-the-bound", openAIChunk(`{"index":0,"delta":{"content":` + literal(padded, false) + `}}`), ErrUncheckable},
		{"not-json-skipped", sse(`{"index":0,"delta":{"content":"a","content":"b"}} trailing`) + sse("[DONE]"), nil},
		{"absent-index-alone", openAIChunk(`{"delta":{"content":"a"}}`) + openAIChunk(`{"delta":{"content":"b"}}`), nil},
		{"unread-repeats-allowed", openAIChunk(`{"index":0,"logprobs":{"x":1,"x":2},"delta":{"content":"a"}}`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scanStream([]byte(tt.body), streamKey, 0)
			if !errors.Is(err, tt.want) || tt.want == nil && err != nil {
				t.Errorf("err %v; want %v", err, tt.want)
			}
		})
	}
}

// TestTextHoldReleasesNoFormPrefix: a text checked in pieces by a
// TextHold (the preview) never releases any byte of a form that a later
// piece completes, in any of its forms, cut at every offset; a clean text
// is released whole once flushed.
func TestTextHoldReleasesNoFormPrefix(t *testing.T) {
	k := NewKeyForms(streamKey)
	for name, form := range everyForm(streamKey) {
		text := "watch this: " + form + " done"
		start := strings.Index(text, form)
		for size := 1; size <= 8; size++ {
			h := k.TextHold()
			var out strings.Builder
			var err error
			for _, p := range cutText(text, size, size) {
				var r string
				if r, err = h.Add(p); err != nil {
					break
				}
				out.WriteString(r)
			}
			if !errors.Is(err, ErrReflect) || out.Len() > start {
				t.Fatalf("%s in pieces of %d: err %v, released %q; want ErrReflect before any byte of the form", name, size, err, out.String())
			}
		}
	}
	clean := "R&D &amp; Q&A: &#60;tags&#62; and &nbsp;spaces, ünïcödé ✅"
	for size := 1; size <= 8; size++ {
		h := k.TextHold()
		var out strings.Builder
		for _, p := range cutText(clean, size, size) {
			r, err := h.Add(p)
			if err != nil {
				t.Fatalf("clean text in pieces of %d: %v", size, err)
			}
			out.WriteString(r)
		}
		out.WriteString(h.Flush())
		if out.String() != clean {
			t.Errorf("clean text in pieces of %d released %q; want it whole", size, out.String())
		}
	}
}

// FuzzStreamAssembledText holds the event-level check to "the assembled
// text contains no form": a text cut into deltas of a field that the
// whole-text check refuses is refused, and an answer passed on whole
// assembles to a text the whole-text check accepts. An answer that begins
// with a byte-order mark (mark) passes nothing on, whatever its text
// (TestSecStreamLeadingBOMKeyCaught).
func FuzzStreamAssembledText(f *testing.F) {
	for _, form := range everyForm(streamKey) {
		f.Add("a "+form+" b", uint8(1), uint8(0), false, false)
		f.Add(form, uint8(7), uint8(5), true, false)
		f.Add(form, uint8(3), uint8(0), false, true)
	}
	f.Add("&#115k-test", uint8(2), uint8(3), true, false)
	f.Add("plain words & more", uint8(3), uint8(1), false, false)
	f.Add("plain words & more", uint8(3), uint8(1), false, true)
	f.Fuzz(func(t *testing.T, text string, size, field uint8, esc, mark bool) {
		if len(text) > 4096 {
			return
		}
		fld := assembledFields[int(field)%len(assembledFields)]
		n := int(size%8) + 1
		body := fieldStream(fld, cutText(text, n, n), esc)
		if mark {
			body = append([]byte(bom), body...)
		}
		out, err := scanStream(body, streamKey, 0)
		holds := CheckText(text, streamKey) != nil
		switch {
		case mark && (len(out) > 0 || !errors.Is(err, ErrReflect) && !errors.Is(err, ErrUncheckable)):
			t.Fatalf("text %q after a byte-order mark: passed on %q, err %v; want nothing passed on", text, out, err)
		case holds && !errors.Is(err, ErrReflect) && !errors.Is(err, ErrUncheckable):
			t.Fatalf("text %q in deltas of %d (%s): err %v; the assembled text holds a form", text, n, fld.name, err)
		case err == nil && CheckText(assemble(t, out), streamKey) != nil:
			t.Fatalf("text %q passed on, assembling a form", text)
		case err != nil && !errors.Is(err, ErrReflect) && !errors.Is(err, ErrUncheckable):
			t.Fatalf("text %q: err %v", text, err)
		}
	})
}

// FuzzFieldReaderAgreesWithJSON holds the event reader to encoding/json:
// it accepts exactly what json.Valid accepts and, for an event it can
// read, keeps the same strings encoding/json decodes at the same places.
func FuzzFieldReaderAgreesWithJSON(f *testing.F) {
	for _, fld := range assembledFields {
		for _, ev := range append(append(append([]string{}, fld.head...), fld.delta(literal("a\u00e9\\\"<&>\U0001F600", true))), fld.tail...) {
			if data, ok := strings.CutPrefix(ev[strings.Index(ev, "data: "):], "data: "); ok {
				f.Add([]byte(strings.TrimSpace(data)))
			}
		}
	}
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"\ud800x\u0041","role":"a"}},3,[]],"x":[1e5,-0.5,true,null]}`))
	f.Add([]byte("{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\xfe ok\\n\xc3\"}}"))
	f.Add([]byte(` [1, {"a" : "b"} ] `))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"` + strings.Repeat(`q\"\\`, 60) + `\\\"end"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r fieldReader
		ev, ok, err := r.read(data)
		valid := json.Valid(data)
		if valid && !ok {
			t.Fatalf("read %q: not read; json.Valid accepts it", data)
		}
		if !valid || err != nil {
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", data, err)
		}
		root, _ := v.(map[string]any)
		if got, want := string(appendValidUTF8(nil, ev.typ)), str(root["type"]); got != want {
			t.Errorf("type %q; encoding/json %q", got, want)
		}
		checkIndex(t, ev.index, root, "index")
		checkStrings(t, "delta", ev.delta, root["delta"])
		checkStrings(t, "content_block", ev.block, root["content_block"])
		var choices []map[string]any
		if list, ok := root["choices"].([]any); ok {
			for _, c := range list {
				if m, ok := c.(map[string]any); ok {
					choices = append(choices, m)
				}
			}
		}
		if len(choices) != len(ev.choices) {
			t.Fatalf("%d choices; encoding/json %d", len(ev.choices), len(choices))
		}
		for i, c := range choices {
			got := ev.choices[i]
			checkIndex(t, got.index, c, "index")
			checkStrings(t, "delta", got.delta, c["delta"])
			delta, _ := c["delta"].(map[string]any)
			checkStrings(t, "function_call", got.call, delta["function_call"])
			var tools []map[string]any
			if list, ok := delta["tool_calls"].([]any); ok {
				for _, tc := range list {
					if m, ok := tc.(map[string]any); ok {
						tools = append(tools, m)
					}
				}
			}
			if len(tools) != len(got.tools) {
				t.Fatalf("%d tool calls; encoding/json %d", len(got.tools), len(tools))
			}
			for j, tc := range tools {
				checkIndex(t, got.tools[j].index, tc, "index")
				checkStrings(t, "function", got.tools[j].function, tc["function"])
			}
		}
	})
}

func str(v any) string { s, _ := v.(string); return s }

func checkIndex(t *testing.T, got indexValue, obj map[string]any, name string) {
	t.Helper()
	v, present := obj[name]
	if got.present != present {
		t.Fatalf("index present %v; encoding/json %v", got.present, present)
	}
	if n, ok := v.(json.Number); ok && !got.bad && n.String() != fmt.Sprint(got.n) {
		t.Fatalf("index %d; encoding/json %s", got.n, n)
	}
}

func checkStrings(t *testing.T, what string, got objectStrings, v any) {
	t.Helper()
	want := map[string]string{}
	if m, ok := v.(map[string]any); ok {
		for k, x := range m {
			if s, ok := x.(string); ok {
				want[k] = s
			}
		}
	}
	have := map[string]string{}
	for _, s := range got.strs {
		have[string(s.name)] = string(appendValidUTF8(nil, appendDecoded(nil, s.raw)))
		if s.esc != bytes.Contains(s.raw, []byte{'\\'}) {
			t.Fatalf("%s %q: esc %v", what, s.raw, s.esc)
		}
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Fatalf("%s strings %q; encoding/json %q", what, have, want)
	}
}

// quoteEndLoop is quoteEnd a byte at a time: the reference it is held to.
func quoteEndLoop(b []byte, start int) int {
	for i := start; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// TestQuoteEnd holds the 64-byte-block search for a string's closing
// quote to a byte loop, with runs of backslashes of every length before
// quotes placed across block and window boundaries.
func TestQuoteEnd(t *testing.T) {
	for _, size := range []int{1, 63, 64, 65, 127, 128, 64*markWords - 1, 64 * markWords, 64*markWords + 3} {
		for run := 0; run <= 5; run++ {
			for _, shift := range []int{0, 1, 2, 61, 62, 63} {
				b := bytes.Repeat([]byte("a\\\"b"), size/4+1)
				b = append(b[:size], make([]byte, shift)...)
				for i := size; i < len(b); i++ {
					b[i] = 'x'
				}
				b = append(b, bytes.Repeat([]byte{'\\'}, run)...)
				b = append(b, `"tail"`...)
				for start := range min(3, len(b)) {
					if got, want := quoteEnd(b, start), quoteEndLoop(b, start); got != want {
						t.Fatalf("size %d run %d shift %d start %d: quoteEnd %d; the byte loop %d", size, run, shift, start, got, want)
					}
				}
			}
		}
	}
}

// FuzzQuoteEnd holds quoteEnd to the byte loop on any text.
func FuzzQuoteEnd(f *testing.F) {
	f.Add([]byte(strings.Repeat(`x\"y\\`, 40)+`"`), uint8(0))
	f.Add([]byte(strings.Repeat(`\\\"`, 50)+`\\"`), uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, start uint8) {
		s := min(int(start), len(b))
		if got, want := quoteEnd(b, s), quoteEndLoop(b, s); got != want {
			t.Fatalf("quoteEnd(%q, %d) = %d; the byte loop %d", b, s, got, want)
		}
	})
}
