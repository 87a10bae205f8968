//go:build amd64 && !purego

package upstream

import "golang.org/x/sys/cpu"

// The assembly earns its place (docs/benchmarks.md, "Does the AVX2 scan
// earn its place?"): without it a 1 MiB answer through the broker costs
// 14 % more, beyond the run-to-run noise; the Go marks (mark_other.go,
// -tags purego) stay the reference every build can run.

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

// markPairAVX2 is markPair for n whole blocks at p, the bytes x and y
// packed in c (x | y<<8) (mark_amd64.s).
//
//go:noescape
func markPairAVX2(p *byte, n int, c uint64, xs, ys *uint64)

// markPair sets, for each whole 64-byte block j of b, bit k of xs[j] when
// byte k of the block is x and bit k of ys[j] when it is y, and clears
// the others. xs and ys must hold a word for each block.
func markPair(b []byte, x, y byte, xs, ys []uint64) {
	n := len(b) / 64
	if n == 0 {
		return
	}
	if !hasAVX2 {
		markPairGo(b, x, y, xs, ys)
		return
	}
	_, _ = xs[n-1], ys[n-1]
	markPairAVX2(&b[0], n, uint64(x)|uint64(y)<<8, &xs[0], &ys[0])
}
