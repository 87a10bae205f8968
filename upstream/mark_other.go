//go:build !amd64 || purego

package upstream

// markBlocks sets, for each whole 64-byte block j of b, bit k of bs[j],
// qs[j] and cs[j] when byte k of the block is a backslash, a quote or a
// control character (below 0x20), and clears the others. bs, qs and cs
// must hold a word for each block.
func markBlocks(b []byte, bs, qs, cs []uint64) { markBlocksGo(b, bs, qs, cs) }

// markPair sets, for each whole 64-byte block j of b, bit k of xs[j] when
// byte k of the block is x and bit k of ys[j] when it is y, and clears
// the others. xs and ys must hold a word for each block.
func markPair(b []byte, x, y byte, xs, ys []uint64) { markPairGo(b, x, y, xs, ys) }
