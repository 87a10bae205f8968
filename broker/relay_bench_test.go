package broker

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox/internal/answercorpus"
	"github.com/rtsandbox/rtsandbox/internal/chunkread"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// BenchmarkRelayReaders measures the per-event work of a relayed stream
// on the broker's side, without the sockets: the relay's scanner (event
// mode, the reflection check and the assembled fields) and the SSE
// watcher (error log, usage count), over a 1 MiB markdown answer streamed
// as a model streams it, about 4 bytes of text an event, one event a
// read, in both dialects (issue 23 item 5: each event parsed once).
func BenchmarkRelayReaders(b *testing.B) {
	forms := upstream.NewKeyForms("sk-ant-api03-" + strings.Repeat("k", 95))
	turn := &Turn{b: &Broker{log: slog.New(slog.DiscardHandler)}}
	for _, c := range []struct {
		name   string
		events []string
	}{
		{"messages-markdown-1MiB-token-events", relayEvents(false)},
		{"chat-markdown-1MiB-token-events", relayEvents(true)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(strings.Join(c.events, ""))))
			events := make(chunkread.Reader, len(c.events))
			for i, ev := range c.events {
				events[i] = []byte(ev)
			}
			for b.Loop() {
				// One event a read, as a socket gives them from an upstream
				// that flushes each; the reader consumes its copy of the
				// slice headers, not the bytes.
				r := slices.Clone(events)
				sc := upstream.NewStreamScannerFor(&r, forms, 0)
				sc.Events()
				sc.KeepEvents()
				watch := turn.newStreamWatch()
				for {
					_, err := sc.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					watch.events(sc.Parsed())
				}
				if o := watch.settle(outcome{}); !o.counted {
					b.Fatal("usage not counted")
				}
			}
		})
	}
}

// relayEvents is a markdown answer of about 1 MiB in all, about 4 bytes
// of JSON string content an event: Messages events, or chat-completion chunks
// (chat) ending in a usage chunk.
func relayEvents(chat bool) []string {
	var evs []string
	if !chat {
		evs = append(evs, answercorpus.MessageStart)
	}
	total := 0
	for _, p := range answercorpus.Stream(answercorpus.Markdown, 1<<20) {
		for len(p) > 0 && total < 1<<20 {
			n := min(4, len(p))
			for n < len(p) && (p[n-1] == '\\' || p[n]&0xC0 == 0x80) {
				n++ // whole escapes and runes
			}
			if i := strings.LastIndexByte(p[:n], '\\'); i >= 0 && n-i < 6 && i+1 < len(p) && p[i+1] == 'u' {
				n = min(len(p), i+6)
			}
			if chat {
				evs = append(evs, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"`+p[:n]+`"},"finish_reason":null}]}`+"\n\n")
			} else {
				evs = append(evs, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""+p[:n]+"\"}}\n\n")
			}
			total += len(evs[len(evs)-1])
			p = p[n:]
		}
	}
	if chat {
		return append(evs, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":345,"total_tokens":357}}`+"\n\n", "data: [DONE]\n\n")
	}
	return append(evs, answercorpus.EndEvents()...)
}
