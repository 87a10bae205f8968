package upstream

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestSpecialFindsTheFirstStop holds special to its contract: the lowest
// mark is the first byte that is '"', '\\' or below 0x20, for every byte
// value at every position after every kind of byte, and for random words.
func TestSpecialFindsTheFirstStop(t *testing.T) {
	first := func(w uint64) int {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], w)
		for i, c := range b {
			if c == '"' || c == '\\' || c < 0x20 {
				return i
			}
		}
		return 8
	}
	got := func(w uint64) int { return bits.TrailingZeros64(special(w)) / 8 }
	check := func(w uint64) {
		if g, want := got(w), first(w); g != want {
			t.Fatalf("special(%#016x): first stop at %d, want %d", w, g, want)
		}
	}
	for c := range 256 {
		for pos := range 8 {
			for _, fill := range []byte{'a', ' ', '!', '#', 0x21, 0x7f, 0x80, 0xff, '"', '\\', 0} {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(c)
				check(binary.LittleEndian.Uint64(b[:]))
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		check(r.Uint64())
	}
}
