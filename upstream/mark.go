package upstream

import (
	"encoding/binary"
	"sync"
)

// The marking pass of the scan: for each 64-byte block of a text, a bit
// per byte for the backslashes, the quotes and the control bytes (below
// 0x20), the only bytes that end a plain run inside a JSON string. The
// scan reads these words instead of the bytes, so a plain run costs a
// word per 64 bytes, the next stop after an escape a few instructions,
// and a block of escapes can be taken at once (scanner.block). On amd64
// with AVX2 the marks are made 32 bytes an instruction (mark_amd64.s);
// elsewhere, and as the reference for it, markBlocksGo makes them eight
// bytes at a time.

// markWords is how many 64-byte blocks the marks cover at a time: the
// scan marks the text a window of 4 KiB at a time as it moves.
const markWords = 64

// marks are the stops of a window of the text, a word per block; u is
// filled by markEscapes only.
type marks struct {
	back, quote, ctl, u [markWords]uint64
}

var markPool = sync.Pool{New: func() any { return new(marks) }}

// mark records the stops of b, at most markWords blocks, the last block
// padded with bytes that are none.
func (mk *marks) mark(b []byte) {
	n := len(b) / 64
	markBlocks(b[:64*n], mk.back[:n], mk.quote[:n], mk.ctl[:n])
	if 64*n < len(b) {
		var last [64]byte
		for k := copy(last[:], b[64*n:]); k < len(last); k++ {
			last[k] = 'a'
		}
		markBlocks(last[:], mk.back[n:n+1], mk.quote[n:n+1], mk.ctl[n:n+1])
	}
}

// markEscapes records the backslashes of b (in back) and its 'u' bytes
// (in u), at most markWords blocks, the last block padded with bytes that
// are neither: what KeyForms.revealing needs to find the \u escapes.
func (mk *marks) markEscapes(b []byte) {
	n := len(b) / 64
	markPair(b[:64*n], '\\', 'u', mk.back[:n], mk.u[:n])
	if 64*n < len(b) {
		var last [64]byte
		for k := copy(last[:], b[64*n:]); k < len(last); k++ {
			last[k] = 'a'
		}
		markPair(last[:], '\\', 'u', mk.back[n:n+1], mk.u[n:n+1])
	}
}

// Word-at-a-time constants: lo has 0x01 in every byte, hi has 0x80.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// markBlocksGo is markBlocks eight bytes at a time, in Go.
func markBlocksGo(b []byte, bs, qs, cs []uint64) {
	for j := range len(b) / 64 {
		blk := (*[64]byte)(b[64*j:])
		var back, quote, ctl uint64
		for k := range 8 {
			w := binary.LittleEndian.Uint64(blk[8*k:])
			back |= gather(zeroBytes(w^lo*'\\')) << (8 * k)
			quote |= gather(zeroBytes(w^lo*'"')) << (8 * k)
			ctl |= gather(hi&^(w&^hi+lo*0x60|w)) << (8 * k)
		}
		bs[j], qs[j], cs[j] = back, quote, ctl
	}
}

// zeroBytes has the high bit set in each byte of w that is zero, and in
// no other: no carry crosses a byte.
func zeroBytes(w uint64) uint64 { return hi &^ (w&^hi + lo*0x7f | w) }

// gather moves the high bit of each byte of m to bit k for byte k (the
// first in memory the lowest): the product puts byte k's bit at bit 56+k,
// with no two partial products colliding.
func gather(m uint64) uint64 { return (m >> 7) * 0x0102040810204080 >> 56 }

// markPairGo is markPair eight bytes at a time, in Go.
func markPairGo(b []byte, x, y byte, xs, ys []uint64) {
	for j := range len(b) / 64 {
		blk := (*[64]byte)(b[64*j:])
		var mx, my uint64
		for k := range 8 {
			w := binary.LittleEndian.Uint64(blk[8*k:])
			mx |= gather(zeroBytes(w^lo*uint64(x))) << (8 * k)
			my |= gather(zeroBytes(w^lo*uint64(y))) << (8 * k)
		}
		xs[j], ys[j] = mx, my
	}
}
