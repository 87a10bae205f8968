package broker

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/rtsandbox/rtsandbox"
	"github.com/rtsandbox/rtsandbox/upstream"
)

// TestStreamWatchEverySplit feeds the watcher one stream cut into two
// upstream reads at every offset (and into single bytes), through the
// relay's scanner whose events it reads (with a key to look for and
// without): whatever the cut, it logs the one error event once and counts
// the Messages usage (message_start input, message_delta output), and the
// text deltas that mention "error" and "usage" count for nothing.
func TestStreamWatchEverySplit(t *testing.T) {
	delta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"an error? \\\"error\\\" usage\"}}\n\n"
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":11,\"output_tokens\":1}}}\n\n" +
		delta + delta +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n" +
		delta +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"second\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	var checkKey func(t *testing.T, key string, pieces ...string)
	check := func(t *testing.T, pieces ...string) {
		t.Helper()
		for _, key := range []string{watchKey, ""} {
			checkKey(t, key, pieces...)
		}
	}
	checkKey = func(t *testing.T, key string, pieces ...string) {
		t.Helper()
		var log bytes.Buffer
		turn := &Turn{b: &Broker{log: slog.New(slog.NewTextHandler(&log, nil))}, binding: rtsandbox.Binding{Channel: "fake:c"}}
		w := turn.newStreamWatch()
		watchPieces(t, w, key, pieces...)
		o := w.settle(outcome{})
		if n := strings.Count(log.String(), "sandbox upstream call failed"); n != 1 || !strings.Contains(log.String(), "overloaded_error") {
			t.Errorf("cut %d: %d log lines %q; want one naming overloaded_error", len(pieces[0]), n, log.String())
		}
		if !o.counted || o.tokens != 18 {
			t.Errorf("cut %d: tokens %d (counted %v); want 18", len(pieces[0]), o.tokens, o.counted)
		}
	}
	for i := 1; i < len(stream); i++ {
		check(t, stream[:i], stream[i:])
	}
	bytesOf := make([]string, len(stream))
	for i := range stream {
		bytesOf[i] = stream[i : i+1]
	}
	check(t, bytesOf...)
}

// TestStreamUsageOpenAI counts the usage chunk of an OpenAI stream.
func TestStreamUsageOpenAI(t *testing.T) {
	turn := &Turn{b: &Broker{log: slog.New(slog.DiscardHandler)}}
	w := turn.newStreamWatch()
	watchPieces(t, w, watchKey, ("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\ndata: [DONE]\n\n"))
	if o := w.settle(outcome{}); !o.counted || o.tokens != 7 {
		t.Errorf("tokens %d (counted %v); want 7", o.tokens, o.counted)
	}
}

// watchPieces hands w the events of pieces as the relay does: read by a
// StreamScanner for key in event mode keeping its events, one upstream
// read per piece (with no key, KeepEvents alone has them read).
func watchPieces(t *testing.T, w *streamWatch, key string, pieces ...string) {
	t.Helper()
	sc := upstream.NewStreamScanner(&piecesReader{pieces: slices.Clone(pieces)}, key, 0)
	sc.Events()
	sc.KeepEvents()
	for {
		_, err := sc.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("key %q: scanner: %v", key, err)
		}
		w.events(sc.Parsed())
	}
}

// piecesReader returns one piece a read.
type piecesReader struct{ pieces []string }

func (r *piecesReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.pieces[0])
	if r.pieces[0] = r.pieces[0][n:]; r.pieces[0] == "" {
		r.pieces = r.pieces[1:]
	}
	return n, nil
}

// watchKey is the key the scanner of watchPieces looks for.
const watchKey = "sk-ant-watch-0123456789abcdef"
