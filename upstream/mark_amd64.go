//go:build amd64 && !purego

package upstream

import "golang.org/x/sys/cpu"

// hasAVX2 chooses markBlocksAVX2; it is read only.
var hasAVX2 = cpu.X86.HasAVX2

// markBlocksAVX2 is markBlocks for n whole blocks at p, written to bs,
// qs and cs (mark_amd64.s).
//
//go:noescape
func markBlocksAVX2(p *byte, n int, bs, qs, cs *uint64)

// markBlocks sets, for each whole 64-byte block j of b, bit k of bs[j],
// qs[j] and cs[j] when byte k of the block is a backslash, a quote or a
// control character (below 0x20), and clears the others. bs, qs and cs
// must hold a word for each block.
func markBlocks(b []byte, bs, qs, cs []uint64) {
	n := len(b) / 64
	if n == 0 {
		return
	}
	if !hasAVX2 {
		markBlocksGo(b, bs, qs, cs)
		return
	}
	_, _, _ = bs[n-1], qs[n-1], cs[n-1]
	markBlocksAVX2(&b[0], n, &bs[0], &qs[0], &cs[0])
}
