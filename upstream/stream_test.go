package upstream

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/rtsandbox/rtsandbox/internal/chunkread"
)

// drain reads s to its end and returns what it passed on and the error
// that ended it (nil for io.EOF).
func drain(s *StreamScanner) ([]byte, error) {
	var out []byte
	for {
		p, err := s.Next()
		out = append(out, p...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

const streamKey = "sk-test-Stream/Key+42"

// TestStreamScannerSplitForms cuts every form of the key at every offset,
// into two and into three reads, inside an SSE event: each is found, and
// nothing passed on before the error holds the form.
func TestStreamScannerSplitForms(t *testing.T) {
	forms := Forms(streamKey)
	if len(forms) < 10 {
		t.Fatalf("Forms gave %d forms; the test expects the full set", len(forms))
	}
	prefix, suffix := []byte(`data: {"delta":"`), []byte("\"}\n\n")
	for _, form := range forms {
		f := []byte(form)
		body := slicesConcat(prefix, f, suffix)
		at := func(i int) int { return len(prefix) + i }
		check := func(t *testing.T, cuts ...int) {
			t.Helper()
			var c chunkread.Reader
			last := 0
			for _, cut := range cuts {
				c = append(c, bytes.Clone(body[last:cut]))
				last = cut
			}
			c = append(c, bytes.Clone(body[last:]))
			out, err := drain(NewStreamScanner(&c, streamKey, 0))
			if !errors.Is(err, ErrReflect) || bytes.Contains(out, f) {
				t.Errorf("form %q cut at %v: err %v, passed on %q; want ErrReflect and no form", form, cuts, err, out)
			}
		}
		for i := 1; i < len(f); i++ {
			check(t, at(i))
			for j := i + 1; j < len(f); j++ {
				check(t, at(i), at(j))
			}
		}
	}
}

func slicesConcat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestStreamScannerPassesCleanStreams: a body without the key is passed on
// unchanged under any chunking, and an event whose end cannot start a form
// is passed on whole by the read that completed it (no held tail delays it).
func TestStreamScannerPassesCleanStreams(t *testing.T) {
	event := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"sk-test-Stre\"}}\n\n"
	body := []byte(strings.Repeat(event, 200))
	tests := []struct {
		name string
		r    func() io.Reader
	}{
		{"whole", func() io.Reader { return bytes.NewReader(body) }},
		{"one-byte-reads", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(body)) }},
		{"half-reads", func() io.Reader { return iotest.HalfReader(bytes.NewReader(body)) }},
		{"data-err", func() io.Reader { return iotest.DataErrReader(bytes.NewReader(body)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := drain(NewStreamScanner(tt.r(), streamKey, 0))
			if err != nil || !bytes.Equal(out, body) {
				t.Errorf("drain = %d bytes, %v; want the %d bytes unchanged", len(out), err, len(body))
			}
		})
	}
	t.Run("event-passed-on-whole", func(t *testing.T) {
		c := chunkread.Reader{[]byte(event[:30]), []byte(event[30:]), []byte(event)}
		s := NewStreamScanner(&c, streamKey, 0)
		var got []string
		for {
			p, err := s.Next()
			if err != nil {
				break
			}
			got = append(got, string(p))
		}
		// The cut at 30 ends in plain text and an event ends in "\n\n":
		// neither can start a form, so nothing is held.
		want := []string{event[:30], event[30:], event}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pieces mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("possible-start-held", func(t *testing.T) {
		// A read ending in "sk-test-Str", a prefix of the key, is held
		// until the next read shows it is not the key.
		c := chunkread.Reader{[]byte("text sk-test-Str"), []byte("ing more\n\n")}
		s := NewStreamScanner(&c, streamKey, 0)
		p1, err1 := s.Next()
		p1 = bytes.Clone(p1) // valid only until the next call
		p2, err2 := s.Next()
		if string(p1) != "text " || string(p2) != "sk-test-String more\n\n" || err1 != nil || err2 != nil {
			t.Errorf("pieces %q (%v), %q (%v); want %q then %q", p1, err1, p2, err2, "text ", "sk-test-String more\n\n")
		}
	})
}

// TestStreamScannerCap: exactly the limit passes; one byte more fails with
// ErrTooLarge, having passed on no more than the limit.
func TestStreamScannerCap(t *testing.T) {
	const limit = 100 << 10
	for _, tt := range []struct {
		name string
		size int
		want error
	}{
		{"at-limit", limit, nil},
		{"over-limit", limit + 1, ErrTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("data: x\n\n"), tt.size/9+1)[:tt.size]
			out, err := drain(NewStreamScanner(bytes.NewReader(body), streamKey, limit))
			if !errors.Is(err, tt.want) || len(out) > limit {
				t.Errorf("drain = %d bytes, %v; want %v and at most %d bytes", len(out), err, tt.want, limit)
			}
		})
	}
	if MaxStreamBytes != 50<<20 {
		t.Errorf("MaxStreamBytes = %d; want 50 MiB", MaxStreamBytes)
	}
}

// TestStreamScannerNoKey: an empty key finds nothing, but the cap holds.
func TestStreamScannerNoKey(t *testing.T) {
	out, err := drain(NewStreamScanner(strings.NewReader("data: x\n\n"), "", 0))
	if err != nil || string(out) != "data: x\n\n" {
		t.Errorf("drain = %q, %v", out, err)
	}
}

// FuzzStreamScanner: for any body and any cutting into reads, the scanner
// fails with ErrReflect exactly when the whole body holds one of the key's
// forms, never passes one on, and otherwise passes the body on unchanged.
func FuzzStreamScanner(f *testing.F) {
	f.Add([]byte("data: {\"text\":\"sk-test-Stream/Key+42\"}\n\n"), []byte{3, 7, 1})
	f.Add([]byte("plain text sk-test-Str then more"), []byte{16})
	f.Add([]byte(hexOf(streamKey)), []byte{1, 1, 1, 1, 5})
	f.Add([]byte(bom+"data: {\"text\":\"sk-test-Stream/Key+42\"}\n\n"), []byte{1, 2, 3})
	forms := searchForms(streamKey)
	f.Fuzz(func(t *testing.T, body, cuts []byte) {
		var c chunkread.Reader
		rest := body
		for _, n := range cuts {
			k := min(int(n), len(rest))
			c = append(c, bytes.Clone(rest[:k]))
			rest = rest[k:]
		}
		c = append(c, bytes.Clone(rest))
		out, err := drain(NewStreamScanner(&c, streamKey, 0))
		holds := false
		for _, form := range forms {
			holds = holds || bytes.Contains(body, form)
			if bytes.Contains(out, form) {
				t.Fatalf("passed on form %q", form)
			}
		}
		switch {
		case holds && !errors.Is(err, ErrReflect):
			t.Fatalf("body holds a form; err = %v", err)
		case !holds && (err != nil || !bytes.Equal(out, body)):
			t.Fatalf("clean body: out %q, err %v; want it unchanged", out, err)
		}
	})
}

func hexOf(s string) string { return strings.ToUpper(hex.EncodeToString([]byte(s))) }

// In event mode a key hidden by JSON escapes inside an event's data is
// found however the event is cut into reads, before any byte of that
// event is passed on; clean events pass whole, each as soon as it ends.
func TestStreamScannerEventsDecoded(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	escaped := strings.Replace(key, "sk", `\u0073\u006b`, 1) // "sk" as \u escapes
	clean := "event: content_block_delta\ndata: {\"delta\":{\"text\":\"hi\"}}\n\n"
	bad := "event: content_block_delta\ndata: {\"delta\":{\"text\":\"" + escaped + "\"}}\n\n"
	if strings.Contains(bad, key) {
		t.Fatal("the escaped event holds the raw key; the test would not test decoding")
	}
	body := clean + bad + clean
	for cut := 1; cut < len(body); cut++ {
		sc := NewStreamScanner(&chunkread.Reader{[]byte(body[:cut]), []byte(body[cut:])}, key, 0)
		sc.Events()
		var passed strings.Builder
		var err error
		for {
			var piece []byte
			if piece, err = sc.Next(); err != nil {
				break
			}
			passed.Write(piece)
		}
		if !errors.Is(err, ErrReflect) {
			t.Fatalf("cut %d: Next = %v; want ErrReflect", cut, err)
		}
		if got := passed.String(); strings.Contains(got, escaped) || !strings.HasPrefix(clean, got) && got != clean {
			t.Fatalf("cut %d: passed on %q; want at most the first clean event", cut, got)
		}
	}
	// Without the key the same events pass whole, CR LF endings too.
	crlf := strings.ReplaceAll(clean, "\n", "\r\n")
	sc := NewStreamScanner(&chunkread.Reader{[]byte(crlf[:10]), []byte(crlf[10:] + crlf)}, key, 0)
	sc.Events()
	got, err := drain(sc)
	if err != nil || string(got) != crlf+crlf {
		t.Errorf("drain = %q, %v; want both events", got, err)
	}
}

// An event longer than MaxStreamEvent is refused rather than held without
// bound.
func TestStreamScannerEventsBounded(t *testing.T) {
	big := "data: \"" + strings.Repeat("x", 2*MaxStreamEvent) + "\"\n\n"
	sc := NewStreamScanner(strings.NewReader(big), "sk-live-0123456789abcdef", 0)
	sc.Events()
	for {
		_, err := sc.Next()
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Next = %v; want ErrTooLarge", err)
		}
		break
	}
}

func TestEventsEnd(t *testing.T) {
	for in, want := range map[string]int{
		"":                0,
		"data: a":         0,
		"data: a\n":       0,
		"data: a\n\n":     9,
		"data: a\n\nda":   9,
		"a\n\nb\n\nc":     6,
		"a\r\n\r\nb":      5,
		"a\r\n\r\nb\r\n":  5,
		"a\r\rb":          3,
		"a\nb\nc\n":       0,
		"a\n\nb\nc\nd\ne": 3,
	} {
		if got := eventsEnd([]byte(in)); got != want {
			t.Errorf("eventsEnd(%q) = %d; want %d", in, got, want)
		}
	}
}
