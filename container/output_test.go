package container

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	for _, chunks := range [][]string{
		nil,
		{"short"},
		{strings.Repeat("a", 10), strings.Repeat("b", 7)},
		{strings.Repeat("x", 20)},
		{"abc", strings.Repeat("y", 16), "de"},
	} {
		tb := newTailBuffer(1<<20, 16)
		var all []byte
		for _, c := range chunks {
			if n, err := tb.Write([]byte(c)); n != len(c) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			all = append(all, c...)
		}
		want := all[max(0, len(all)-16):]
		if len(all) == 0 {
			want = nil
		}
		if got := tb.Tail(); !bytes.Equal(got, want) {
			t.Errorf("chunks %q: tail %q; want %q", chunks, got, want)
		}
	}
	tb := newTailBuffer(8, 4)
	if _, err := tb.Write(make([]byte, 9)); !errors.Is(err, ErrOutputLimit) {
		t.Errorf("Write over the limit = %v; want ErrOutputLimit", err)
	}
}

// FuzzTailBuffer: the tail is always the last bytes written, whatever the
// chunking.
func FuzzTailBuffer(f *testing.F) {
	f.Add([]byte("hello world, this is stderr"), uint8(5))
	f.Add(bytes.Repeat([]byte("z"), 100), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		size := int(step%32) + 1
		tb := newTailBuffer(1<<20, 13)
		for rest := data; len(rest) > 0; {
			n := min(size, len(rest))
			if _, err := tb.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		want := data[max(0, len(data)-13):]
		if got := tb.Tail(); !bytes.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("tail %q; want %q", got, want)
		}
	})
}

// TestSinksKeepTheirOverflow: once a write went past the bound, Err says
// so (ErrOutputLimit), and every later write fails too: an engine whose
// stream words the sink's error its own way asks the sink.
func TestSinksKeepTheirOverflow(t *testing.T) {
	rb := NewReplyBuffer()
	if rb.Err() != nil {
		t.Fatal("a fresh sink reports an overflow")
	}
	if _, err := rb.Write(make([]byte, StdoutLimit+1)); !errors.Is(err, ErrOutputLimit) {
		t.Fatalf("Write over the bound = %v", err)
	}
	if _, err := rb.Write([]byte("x")); !errors.Is(err, ErrOutputLimit) || !errors.Is(rb.Err(), ErrOutputLimit) {
		t.Errorf("after the overflow: Write %v, Err %v", err, rb.Err())
	}
	tb := newTailBuffer(8, 4)
	tb.Write(make([]byte, 9))
	if !errors.Is(tb.Err(), ErrOutputLimit) {
		t.Errorf("TailBuffer.Err = %v", tb.Err())
	}
}
