package upstream

import (
	"math/rand/v2"
	"testing"
)

// marksByLoop is what markBlocks must make of b, found a byte at a time.
func marksByLoop(b []byte) (bs, qs, cs []uint64) {
	n := len(b) / 64
	bs, qs, cs = make([]uint64, n), make([]uint64, n), make([]uint64, n)
	for i, c := range b[:64*n] {
		bit := uint64(1) << (i % 64)
		switch {
		case c == '\\':
			bs[i/64] |= bit
		case c == '"':
			qs[i/64] |= bit
		case c < 0x20:
			cs[i/64] |= bit
		}
	}
	return bs, qs, cs
}

// agreeMarks fails t unless markBlocks and markBlocksGo mark b as the
// byte loop does; the words past the blocks must stay untouched.
func agreeMarks(t *testing.T, b []byte) {
	t.Helper()
	wb, wq, wc := marksByLoop(b)
	for _, impl := range []struct {
		name string
		fn   func(b []byte, bs, qs, cs []uint64)
	}{{"markBlocks", markBlocks}, {"markBlocksGo", markBlocksGo}} {
		n := len(wb)
		bs, qs, cs := make([]uint64, n+1), make([]uint64, n+1), make([]uint64, n+1)
		bs[n], qs[n], cs[n] = 7, 7, 7
		impl.fn(b, bs, qs, cs)
		for j := range n {
			if bs[j] != wb[j] || qs[j] != wq[j] || cs[j] != wc[j] {
				t.Fatalf("%s(%q) block %d = %064b %064b %064b, want %064b %064b %064b",
					impl.name, b, j, bs[j], qs[j], cs[j], wb[j], wq[j], wc[j])
			}
		}
		if bs[n] != 7 || qs[n] != 7 || cs[n] != 7 {
			t.Fatalf("%s(%q) wrote past its blocks", impl.name, b)
		}
	}
	agreePair(t, b, '\\', 'u')
	if len(b) > 0 { // bytes of every value, as the input holds them
		agreePair(t, b, b[0], b[len(b)/2])
	}
}

// agreePair fails t unless markPair and markPairGo mark the bytes x and y
// of b as a byte loop does, and leave the words past the blocks alone.
func agreePair(t *testing.T, b []byte, x, y byte) {
	t.Helper()
	n := len(b) / 64
	wx, wy := make([]uint64, n), make([]uint64, n)
	for i, c := range b[:64*n] {
		if c == x {
			wx[i/64] |= 1 << (i % 64)
		}
		if c == y {
			wy[i/64] |= 1 << (i % 64)
		}
	}
	for _, impl := range []struct {
		name string
		fn   func(b []byte, x, y byte, xs, ys []uint64)
	}{{"markPair", markPair}, {"markPairGo", markPairGo}} {
		xs, ys := make([]uint64, n+1), make([]uint64, n+1)
		xs[n], ys[n] = 7, 7
		impl.fn(b, x, y, xs, ys)
		for j := range n {
			if xs[j] != wx[j] || ys[j] != wy[j] {
				t.Fatalf("%s(%q, %q, %q) block %d = %064b %064b, want %064b %064b",
					impl.name, b, x, y, j, xs[j], ys[j], wx[j], wy[j])
			}
		}
		if xs[n] != 7 || ys[n] != 7 {
			t.Fatalf("%s(%q) wrote past its blocks", impl.name, b)
		}
	}
}

// Every byte value at every position of a block, among every kind of
// byte, and random texts of every length up to a few blocks: the marks
// (in assembly where the machine has it, and in Go) are exactly the byte
// loop's. (It replaced a test of special, which found only the first
// stop of a word.)
func TestMarkBlocksAgreesWithLoop(t *testing.T) {
	for _, fill := range []byte{'a', ' ', '!', '#', 0x21, 0x7f, 0x80, 0xff, '"', '\\', 0, 0x1f, 0x20, 0x5d, 0xdc, 0xa2, 0x9f} {
		for pos := range 64 {
			b := make([]byte, 64)
			for c := range 256 {
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(c)
				agreeMarks(t, b)
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("ab \"\\\n\x00\x1f\x7f\x80\xff\xe4\x9c\xa2\xdc")
	for n := range 300 {
		for range 20 {
			b := make([]byte, n)
			for i := range b {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
			agreeMarks(t, b)
		}
	}
	for range 1000 {
		b := make([]byte, 64*(1+r.IntN(8)))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		agreeMarks(t, b)
	}
}

// FuzzMarkBlocksAgreesWithLoop is the differential fuzz target of the
// marking passes: markBlocks and markPair (assembly on amd64) and their Go
// versions record exactly the bytes a byte loop finds.
func FuzzMarkBlocksAgreesWithLoop(f *testing.F) {
	f.Add([]byte(`{"a":"b\\n\"c\u00e9"}` + "\x00\x1f\x20\"\\"))
	f.Add(make([]byte, 130))
	f.Fuzz(func(t *testing.T, b []byte) { agreeMarks(t, b) })
}
