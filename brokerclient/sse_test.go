package brokerclient

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

type sseCase struct {
	name    string
	in      string
	lim     SSELimits
	want    []SSEEvent
	wantErr error // nil, or ErrSSELimit
}

var sseCases = []sseCase{
	{name: "lf-lines", in: "event: a\ndata: x\n\n", want: []SSEEvent{{Type: "a", Data: "x"}}},
	{name: "crlf-lines", in: "event: a\r\ndata: x\r\n\r\n", want: []SSEEvent{{Type: "a", Data: "x"}}},
	{name: "cr-lines", in: "event: a\rdata: x\r\r", want: []SSEEvent{{Type: "a", Data: "x"}}},
	{name: "mixed-line-ends", in: "data: 1\r\n\ndata: 2\r\rdata: 3\n\r\n", want: []SSEEvent{{Type: "message", Data: "1"}, {Type: "message", Data: "2"}, {Type: "message", Data: "3"}}},
	{name: "no-event-line-is-message", in: "data: {\"a\":1}\n\n", want: []SSEEvent{{Type: "message", Data: `{"a":1}`}}},
	{name: "data-lines-joined", in: "data: a\ndata:b\ndata:  c\n\n", want: []SSEEvent{{Type: "message", Data: "a\nb\n c"}}},
	{name: "empty-data-line-dispatches", in: "data\n\ndata:\n\n", want: []SSEEvent{{Type: "message"}, {Type: "message"}}},
	{name: "no-data-no-dispatch", in: "event: ping\n\n", want: nil},
	{name: "comment-ignored", in: ": keep-alive\ndata: x\n:another\n\n", want: []SSEEvent{{Type: "message", Data: "x"}}},
	{name: "unknown-field-and-retry-ignored", in: "retry: 10\nfoo: bar\ndata: x\n\n", want: []SSEEvent{{Type: "message", Data: "x"}}},
	{name: "field-without-colon", in: "event\ndata\n\n", want: []SSEEvent{{Type: "message"}}},
	{name: "only-first-colon-splits", in: "data: a: b\n\n", want: []SSEEvent{{Type: "message", Data: "a: b"}}},
	{name: "id-persists", in: "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n", want: []SSEEvent{{Type: "message", Data: "a", ID: "7"}, {Type: "message", Data: "b", ID: "7"}, {Type: "message", Data: "c"}}},
	{name: "id-with-nul-ignored", in: "id: 1\n\nid: a\x00b\ndata: x\n\n", want: []SSEEvent{{Type: "message", Data: "x", ID: "1"}}},
	{name: "event-type-reset-after-dispatch", in: "event: e\ndata: 1\n\ndata: 2\n\n", want: []SSEEvent{{Type: "e", Data: "1"}, {Type: "message", Data: "2"}}},
	{name: "bom-skipped", in: "\xEF\xBB\xBFdata: x\n\n", want: []SSEEvent{{Type: "message", Data: "x"}}},
	{name: "bom-only-at-start", in: "data: x\n\n\xEF\xBB\xBFdata: y\n\n", want: []SSEEvent{{Type: "message", Data: "x"}}},
	{name: "unfinished-event-discarded", in: "data: x\n\ndata: y\n", want: []SSEEvent{{Type: "message", Data: "x"}}},
	{name: "unfinished-line-discarded", in: "data: x\n\ndata: y", want: []SSEEvent{{Type: "message", Data: "x"}}},
	{name: "anthropic-stream", in: "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
		want: []SSEEvent{{Type: "message_start", Data: `{"type":"message_start"}`}, {Type: "ping", Data: `{"type": "ping"}`}, {Type: "error", Data: `{"type":"error","error":{"type":"overloaded_error"}}`}}},
	{name: "openai-stream", in: "data: {\"id\":\"c\"}\n\ndata: [DONE]\n\n", want: []SSEEvent{{Type: "message", Data: `{"id":"c"}`}, {Type: "message", Data: "[DONE]"}}},
	{name: "line-at-limit", in: "data: 12\n\n", lim: SSELimits{MaxLine: 8}, want: []SSEEvent{{Type: "message", Data: "12"}}},
	{name: "line-over-limit-fails", in: "data: x\n\ndata: 123\n\n", lim: SSELimits{MaxLine: 8}, want: []SSEEvent{{Type: "message", Data: "x"}}, wantErr: ErrSSELimit},
	{name: "line-over-limit-skipped", in: "data: 123\ndata: y\n\ndata: z\n\n", lim: SSELimits{MaxLine: 8, SkipOversize: true}, want: []SSEEvent{{Type: "message", Data: "z"}}},
	{name: "event-at-limit", in: "event: e\ndata: 12\n\n", lim: SSELimits{MaxEvent: 4}, want: []SSEEvent{{Type: "e", Data: "12"}}},
	{name: "event-over-limit-fails", in: "data: 12\ndata: 3\n\n", lim: SSELimits{MaxEvent: 4}, wantErr: ErrSSELimit},
	{name: "event-over-limit-skipped", in: "data: 12\ndata: 3\ndata: 4\n\nevent: e\ndata: 5\n\n", lim: SSELimits{MaxEvent: 4, SkipOversize: true}, want: []SSEEvent{{Type: "e", Data: "5"}}},
	{name: "total-at-limit", in: "data: x\n\n", lim: SSELimits{MaxTotal: 9}, want: []SSEEvent{{Type: "message", Data: "x"}}},
	{name: "total-over-limit-fails-even-when-skipping", in: "data: x\n\n:", lim: SSELimits{MaxTotal: 9, SkipOversize: true}, want: []SSEEvent{{Type: "message", Data: "x"}}, wantErr: ErrSSELimit},
}

// parseChunks feeds chunks to a parser and returns the events and error.
func parseChunks(lim SSELimits, chunks ...string) ([]SSEEvent, error) {
	var got []SSEEvent
	p := NewSSEParser(lim, func(ev SSEEvent) error { got = append(got, ev); return nil })
	for _, c := range chunks {
		if _, err := p.Write([]byte(c)); err != nil {
			return got, err
		}
	}
	return got, nil
}

func checkEvents(t *testing.T, what string, tt sseCase, got []SSEEvent, err error) {
	t.Helper()
	if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
		t.Errorf("%s: error = %v; want %v", what, err, tt.wantErr)
	}
	if diff := cmp.Diff(tt.want, got); diff != "" {
		t.Errorf("%s: events mismatch (-want +got):\n%s", what, diff)
	}
}

// Every case gives the same events whole, split at every offset, and fed
// byte by byte (a CRLF split across writes is one line end).
func TestSSEParser(t *testing.T) {
	for _, tt := range sseCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseChunks(tt.lim, tt.in)
			checkEvents(t, "whole", tt, got, err)
			for i := 1; i < len(tt.in); i++ {
				got, err := parseChunks(tt.lim, tt.in[:i], tt.in[i:])
				checkEvents(t, fmt.Sprintf("split at %d", i), tt, got, err)
			}
			got, err = parseChunks(tt.lim, strings.Split(tt.in, "")...)
			checkEvents(t, "byte by byte", tt, got, err)
		})
	}
}

func TestSSEReader(t *testing.T) {
	for _, tt := range sseCases {
		t.Run(tt.name, func(t *testing.T) {
			r := NewSSEReader(iotest.OneByteReader(strings.NewReader(tt.in)), tt.lim)
			var got []SSEEvent
			var err error
			for {
				var ev SSEEvent
				if ev, err = r.Next(); err != nil {
					break
				}
				got = append(got, ev)
			}
			if err == io.EOF {
				err = nil
			}
			checkEvents(t, "reader", tt, got, err)
			if _, again := r.Next(); again == nil {
				t.Errorf("Next after the end = nil error; want it sticky")
			}
		})
	}
}

func TestSSEReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := NewSSEReader(io.MultiReader(strings.NewReader("data: x\n\ndata: y"), iotest.ErrReader(boom)), SSELimits{})
	if ev, err := r.Next(); err != nil || ev.Data != "x" {
		t.Fatalf("Next = %+v, %v; want the first event", ev, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Errorf("Next = %v; want the read error", err)
	}
}

func TestSSEParserEmitError(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	p := NewSSEParser(SSELimits{}, func(SSEEvent) error { calls++; return stop })
	if _, err := p.Write([]byte("data: a\n\ndata: b\n\n")); !errors.Is(err, stop) {
		t.Errorf("Write = %v; want emit's error", err)
	}
	if _, err := p.Write([]byte("data: c\n\n")); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("Write after the error = %v with %d emit calls; want the sticky error and 1 call", err, calls)
	}
}

func TestSSEEventIsError(t *testing.T) {
	tests := []struct {
		name string
		ev   SSEEvent
		want bool
	}{
		{"error-type", SSEEvent{Type: "error", Data: "x"}, true},
		{"error-data", SSEEvent{Type: "message", Data: `{"type":"error","error":{"type":"overloaded_error"}}`}, true},
		{"error-data-spaced", SSEEvent{Type: "message", Data: `{ "type" : "error" }`}, true},
		{"delta", SSEEvent{Type: "content_block_delta", Data: `{"type":"content_block_delta","delta":{"type":"text_delta","text":"error"}}`}, false},
		{"delta-quoting-error", SSEEvent{Type: "content_block_delta", Data: `{"type":"content_block_delta","delta":{"type":"text_delta","text":"\"error\""}}`}, false},
		{"error-value-elsewhere", SSEEvent{Type: "message", Data: `{"type":"x","kind":"error"}`}, false},
		{"not-json", SSEEvent{Type: "message", Data: `"error"`}, false},
		{"done", SSEEvent{Type: "message", Data: "[DONE]"}, false},
	}
	for _, tt := range tests {
		if got := tt.ev.IsError(); got != tt.want {
			t.Errorf("%s: IsError() = %v; want %v", tt.name, got, tt.want)
		}
	}
}

// BenchmarkSSEParserWatch feeds 1 MiB of Messages text deltas in 16 KiB
// writes and checks each event for an error, as the broker's watcher does.
func BenchmarkSSEParserWatch(b *testing.B) {
	var stream strings.Builder
	for stream.Len() < 1<<20 {
		stream.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Some prose, \\\"quoted\\\",\\n\\nand more.\"}}\n\n")
	}
	in := []byte(stream.String())
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		p := NewSSEParser(SSELimits{MaxEvent: SSEWatchMaxEvent, SkipOversize: true}, func(ev SSEEvent) error {
			if ev.IsError() {
				b.Fatal("no error event expected")
			}
			return nil
		})
		for off := 0; off < len(in); off += 16 << 10 {
			if _, err := p.Write(in[off:min(off+16<<10, len(in))]); err != nil {
				b.Fatal(err)
			}
		}
	}
}
