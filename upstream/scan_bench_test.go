package upstream

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
)

const benchKey = "sk-proj-abcdefghijklmnop0123456789"

// proseAnswer is a chat completion of about size bytes made of sentence.
func proseAnswer(sentence string, size int) []byte {
	return []byte(`{"choices":[{"message":{"role":"assistant","content":"` + strings.Repeat(sentence, size/len(sentence)) + `"}}]}`)
}

func BenchmarkCheckJSON(b *testing.B) {
	body := proseAnswer("The quick brown fox jumps. ", 1<<20)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, benchKey); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckJSONCorpus checks each answer corpus (prose, markdown,
// ASCII-only markdown, tool calls) at 16 KiB and 1 MiB.
func BenchmarkCheckJSONCorpus(b *testing.B) {
	for _, kind := range answercorpus.Kinds() {
		for _, size := range []int{16 << 10, 1 << 20} {
			body := answercorpus.Answer(kind, size)
			b.Run(string(kind)+"-"+sizeLabel(size), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if err := CheckJSON(body, benchKey); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func sizeLabel(n int) string {
	if n >= 1<<20 {
		return "1MiB"
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

func BenchmarkScanOnly(b *testing.B) {
	body := proseAnswer("The quick brown fox jumps. ", 1<<20)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckJSONSmall is the fixed cost of one check (building the
// key's forms and the matcher) on a 1 KiB answer.
func BenchmarkCheckJSONSmall(b *testing.B) {
	body := proseAnswer("The quick brown fox jumps. ", 1<<10)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, benchKey); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckJSONAmpersands is a megabyte of prose where every sentence
// holds an ampersand that is not a character reference ("R&D").
func BenchmarkCheckJSONAmpersands(b *testing.B) {
	body := proseAnswer("The R&D fox jumps & naps. ", 1<<20)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, benchKey); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckJSONEntities is a megabyte of HTML-escaped prose: every
// sentence holds character references that decode.
func BenchmarkCheckJSONEntities(b *testing.B) {
	body := proseAnswer("The &lt;b&gt;fox&lt;/b&gt; jumps &amp; naps. ", 1<<20)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, benchKey); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckJSONFormEntities is a megabyte of prose whose references
// decode to bytes the key's forms hold ('-' of the key), so every
// stretch between them is decoded and checked.
func BenchmarkCheckJSONFormEntities(b *testing.B) {
	body := proseAnswer("The fox&#45;like cat naps &#x2d; twice. ", 1<<20)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckJSON(body, benchKey); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamScannerCorpus passes each corpus's 1 MiB Messages event
// stream (answercorpus.Events, 4 KiB events) through a StreamScanner in
// event mode, one event a read, as the broker's relay reads an upstream
// that flushes each event: the relay's scanning CPU without its sockets.
// The key's forms are made once, as a broker turn makes them.
func BenchmarkStreamScannerCorpus(b *testing.B) {
	forms := NewKeyForms(benchKey)
	for _, kind := range answercorpus.Kinds() {
		events := answercorpus.Events(kind, 1<<20, 4<<10)
		b.Run(string(kind)+"-1MiB-events-4KiB", func(b *testing.B) { benchScanEvents(b, forms, events) })
	}
}

// BenchmarkStreamScannerTokens is BenchmarkStreamScannerCorpus with the
// events a model actually streams: a token or two of text each (deltas of
// about 4 bytes of JSON string content, never cutting an escape), so a
// 1 MiB stream is about 9,000 events and the per-event work shows.
func BenchmarkStreamScannerTokens(b *testing.B) {
	forms := NewKeyForms(benchKey)
	for _, kind := range answercorpus.Kinds() {
		events := tokenEvents(kind, 1<<20)
		b.Run(string(kind)+"-1MiB-token-events", func(b *testing.B) { benchScanEvents(b, forms, events) })
	}
}

// benchScanEvents passes events through an event-mode StreamScanner of
// forms, one event a read.
func benchScanEvents(b *testing.B, forms *KeyForms, events []string) {
	b.SetBytes(int64(len(strings.Join(events, ""))))
	r := &eventReader{}
	for b.Loop() {
		r.events = events
		sc := NewStreamScannerFor(r, forms, 0)
		sc.Events()
		for {
			if _, err := sc.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
	}
}

// tokenEvents is a Messages stream of about size bytes whose deltas carry
// about 4 bytes of the corpus's JSON string content each, cut between
// escapes and runes.
func tokenEvents(kind answercorpus.Kind, size int) []string {
	typ, field := "text_delta", "text"
	if kind == answercorpus.ToolCalls {
		typ, field = "input_json_delta", "partial_json"
	}
	head := "event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"` + typ + `","` + field + `":"`
	const tail = "\"}}\n\n"
	evs := []string{answercorpus.MessageStart}
	total := len(answercorpus.MessageStart)
	for _, p := range answercorpus.Stream(kind, size) {
		for p != "" {
			n := min(4, len(p))
			for n < len(p) && (p[n]&0xC0 == 0x80 || escapeAt(p, n)) {
				n++
			}
			ev := head + p[:n] + tail
			if total+len(ev) > size {
				return append(evs, answercorpus.EndEvents()...)
			}
			evs, total, p = append(evs, ev), total+len(ev), p[n:]
		}
	}
	return append(evs, answercorpus.EndEvents()...)
}

// escapeAt reports whether a cut of the JSON string content s at n would
// fall inside an escape (\x or \uXXXX).
func escapeAt(s string, n int) bool {
	for i := max(0, n-6); i < n; i++ {
		if s[i] != '\\' {
			continue
		}
		k := i // count the backslashes before i: an escaped one starts nothing
		for k > 0 && s[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 1 {
			continue
		}
		end := i + 2
		if i+1 < len(s) && s[i+1] == 'u' {
			end = i + 6
		}
		if n < end {
			return true
		}
	}
	return false
}

// eventReader yields one event a Read, as a socket does from an upstream
// that flushes each.
type eventReader struct {
	events []string
	off    int // into events[0]
}

func (r *eventReader) Read(p []byte) (int, error) {
	if len(r.events) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.events[0][r.off:])
	if r.off += n; r.off == len(r.events[0]) {
		r.events, r.off = r.events[1:], 0
	}
	return n, nil
}
